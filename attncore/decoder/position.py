"""The sink is a position, not a word: deleting the first token, and Gu et al.'s inputs.

Shape legend: ``N`` layers, ``H`` query heads, ``L`` tokens, ``K`` residual dims reported.

* **Deleting the first token.** Hiding key 0 from every query after the first (the "first-token mask")
  *is* deleting the first token: no later token reads it, so tokens 1..L-1 compute what they would
  compute with token 0 absent, and with rotary positions only the distance between a query and a key
  enters the score, so token 1 at position 1 computes what a first token at position 0 computes.
  :func:`delete_first_token` runs both and keeps the per-token losses (equal within float error on tokens
  2..L-1) and where the sink goes: each head's score on the new first token, its residual norm and its
  largest dims (massive activations) after a chosen layer, against the original first token's.
* **Gu et al. 2025's inputs** ("When Attention Sink Emerges in Language Models: An Empirical View",
  ICLR 2025, arXiv 2410.10781): the share of sink heads (first-token score above eps) on natural text,
  on random tokens and on one token repeated, and the same with a special token put first.
  :func:`gu_inputs` measures it; the share of heads whose rows put their largest weight on token 0 is
  reported beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.decoder.probe import band_allowed, check_ids, decoder_pass, decoder_shape
from attncore.decoder.sinks import GU_TOKENS, massive_dims
from attncore.errors import AttnInputError

__all__ = [
    "GU_INPUTS",
    "GU_THRESHOLDS",
    "FirstTokenDeletion",
    "GuRow",
    "delete_first_token",
    "gu_inputs",
    "input_variants",
    "main",
]

GU_THRESHOLDS: tuple[float, ...] = (0.3, 0.8)
GU_INPUTS: tuple[str, ...] = ("natural text", "random tokens", "one token repeated")


# ---------------------------------------------------------------------------- deleting the first token


@dataclass(frozen=True)
class FirstTokenDeletion:
    """One text with its first token masked from every later query and with it deleted.

    Attributes:
        length: L, the original text's tokens.
        nll_dense: (L - 1,) loss of token i + 1 given tokens 0..i (nats).
        nll_masked: (L - 1,) the same with key 0 hidden from queries 1..L-1.
        nll_deleted: (L - 2,) loss of token i + 2 given tokens 1..i + 1 (the text without its first token).
        score_first: (N, H) each head's mean weight on token 0 of the original (Gu et al.'s score).
        score_second: (N, H) the same on token 1 of the original.
        score_new_first: (N, H) the same on token 1 once it is first (the deleted text's key 0).
        layer: the 0-based layer whose output the residual numbers read.
        norm_first, norm_second, norm_new_first: residual L2 norms after ``layer`` of the original first
            token, of token 1 in the original and of token 1 once first.
        norm_rest: the median norm of the original's tokens 1..L-1 there.
        dims_first, values_first: (K,) the original first token's largest |residual| dims there and values.
        dims_new_first, values_new_first: (K,) the same for the new first token.
    """

    length: int
    nll_dense: Tensor
    nll_masked: Tensor
    nll_deleted: Tensor
    score_first: Tensor
    score_second: Tensor
    score_new_first: Tensor
    layer: int
    norm_first: float
    norm_second: float
    norm_new_first: float
    norm_rest: float
    dims_first: Tensor
    values_first: Tensor
    dims_new_first: Tensor
    values_new_first: Tensor

    @property
    def equivalence_gap(self) -> float:
        """Largest |masked - deleted| loss over tokens 2..L-1 (nats): 0 up to float error."""
        return float((self.nll_masked[1:].double() - self.nll_deleted.double()).abs().max())

    @property
    def cost(self) -> float:
        """Mean loss change on tokens 2..L-1 when the first token is deleted (nats per token)."""
        return float((self.nll_deleted.double() - self.nll_dense[1:].double()).mean())

    def sink_heads(self, eps: float) -> tuple[int, int, int]:
        """Heads above ``eps`` on the original first token, on token 1 before and after the deletion."""
        return (int((self.score_first > eps).sum()), int((self.score_second > eps).sum()),
                int((self.score_new_first > eps).sum()))

    @property
    def shared_dims(self) -> int:
        """How many of the new first token's largest dims are the original first token's."""
        return len(set(self.dims_first.tolist()) & set(self.dims_new_first.tolist()))


def delete_first_token(model: Any, ids: Tensor, *, layer: int | None = None, top: int = 4
                       ) -> FirstTokenDeletion:
    """Mask key 0 from every later query, and delete token 0, on ``ids`` (1, L), L >= 3.

    Three passes: dense with weights, the first-token mask (losses only), and ``ids[:, 1:]`` with weights.
    ``layer`` (0-based; default: where the original first token's residual norm peaks) is the layer whose
    output the residual norms and the ``top`` largest dims are read after.
    """
    ids = check_ids(ids, model)
    L = int(ids.shape[1])
    if L < 3:
        raise AttnInputError(f"deleting the first token needs at least 3 tokens; got {L}.")
    N = decoder_shape(model).layers
    dense = decoder_pass(model, ids)
    allowed = band_allowed(L)
    allowed[1:, 0] = False
    masked = decoder_pass(model, ids, allowed=allowed, weights=False)
    deleted = decoder_pass(model, ids[:, 1:])
    assert dense.alpha is not None and deleted.alpha is not None
    if layer is None:
        layer = int(dense.residual_norm[1:, 0].argmax())
    if not 0 <= layer < N:
        raise AttnInputError(f"layer must lie in [0, {N}); got {layer}.")
    row = layer + 1  # residual row 0 is the embeddings, row i the output of layer i - 1
    k = min(top, dense.first_residual.shape[-1])
    d0, v0 = massive_dims(dense.first_residual[row:row + 1], k)
    d1, v1 = massive_dims(deleted.first_residual[row:row + 1], k)
    return FirstTokenDeletion(
        length=L, nll_dense=dense.nll, nll_masked=masked.nll, nll_deleted=deleted.nll,
        score_first=dense.alpha[..., 0].clone(), score_second=dense.alpha[..., 1].clone(),
        score_new_first=deleted.alpha[..., 0].clone(), layer=layer,
        norm_first=float(dense.residual_norm[row, 0]), norm_second=float(dense.residual_norm[row, 1]),
        norm_new_first=float(deleted.residual_norm[row, 0]),
        norm_rest=float(dense.residual_norm[row, 1:].median()),
        dims_first=d0[0], values_first=v0[0], dims_new_first=d1[0], values_new_first=v1[0])


# ---------------------------------------------------------------------------- Gu et al.'s inputs


@dataclass(frozen=True)
class GuRow:
    """Sink heads of one input: its name, whether a special token was put first, the per-head numbers.

    Attributes:
        name: one of :data:`GU_INPUTS`.
        prefix: the special token put first ("" for none).
        first_score: (N, H) mean weight on token 0 over the queries (Gu et al.'s score).
        top_first: (N, H) share of queries 1..L-1 whose largest weight is on token 0.
        length: L.
    """

    name: str
    prefix: str
    first_score: Tensor
    top_first: Tensor
    length: int

    def share(self, eps: float) -> float:
        """Share of heads whose first-token score is above ``eps``."""
        return float((self.first_score > eps).double().mean())

    @property
    def top_share(self) -> float:
        """Share of heads most of whose queries 1..L-1 put their largest weight on token 0."""
        return float((self.top_first > 0.5).double().mean())


def input_variants(natural: Tensor, vocab: int, seed: int, exclude: Sequence[int] = ()
                   ) -> dict[str, Tensor]:
    """Gu et al.'s three inputs of L tokens: ``natural`` (1, L) itself, L tokens drawn uniformly from the
    vocabulary without ``exclude`` (a seeded ``torch.Generator`` on the CPU), and one token drawn the same
    way repeated L times."""
    L = int(natural.shape[-1])
    allowed = torch.ones(vocab, dtype=torch.bool)
    bad = [int(i) for i in exclude if 0 <= int(i) < vocab]
    if bad:
        allowed[torch.tensor(bad)] = False
    pool = allowed.nonzero()[:, 0]  # (V',)
    g = torch.Generator().manual_seed(int(seed))
    rand = pool[torch.randint(0, len(pool), (1, L), generator=g)]
    one = pool[torch.randint(0, len(pool), (1,), generator=g)]
    return {GU_INPUTS[0]: natural.reshape(1, L).to(torch.int64).cpu(), GU_INPUTS[1]: rand,
            GU_INPUTS[2]: one.expand(1, L).clone()}


def _row(model: Any, name: str, prefix: str, ids: Tensor) -> GuRow:
    N, H = decoder_shape(model).layers, decoder_shape(model).heads
    L = int(ids.shape[1])
    heads = [(n, h) for n in range(N) for h in range(H)]
    p = decoder_pass(model, ids, maps=heads)
    assert p.alpha is not None
    top = torch.zeros(N, H)
    for (n, h), w in p.maps.items():
        top[n, h] = (w[1:].argmax(dim=-1) == 0).float().mean()  # rows 1..L-1 (row 0 sees key 0 alone)
    return GuRow(name=name, prefix=prefix, first_score=p.alpha[..., 0].clone(), top_first=top, length=L)


def gu_inputs(model: Any, natural: Tensor, *, seed: int = 0, prefix_id: int | None = None,
              prefix_text: str = "", exclude: Sequence[int] = ()) -> tuple[GuRow, ...]:
    """Sink heads on Gu et al.'s three inputs of L = ``natural.shape[-1]`` tokens (64 in their protocol),
    then, when ``prefix_id`` is given, the same three with that token put first (L tokens in all: the
    special token and the first L - 1). One pass each, every head's map kept (L <= 256)."""
    natural = check_ids(natural, model)
    L = int(natural.shape[1])
    if not 3 <= L <= 4 * GU_TOKENS:
        raise AttnInputError(f"Gu et al.'s inputs are read at 3 to {4 * GU_TOKENS} tokens; got {L}.")
    vocab = decoder_shape(model).vocab
    variants = input_variants(natural, vocab, seed, exclude)
    rows = [_row(model, name, "", x) for name, x in variants.items()]
    if prefix_id is not None:
        if not 0 <= int(prefix_id) < vocab:
            raise AttnInputError(f"the special token must be an id in [0, {vocab}); got {prefix_id}.")
        first = torch.full((1, 1), int(prefix_id), dtype=torch.int64)
        for name, x in variants.items():
            rows.append(_row(model, name, prefix_text, torch.cat([first, x[:, : L - 1]], dim=1)))
    return tuple(rows)


# ---------------------------------------------------------------------- the numbers docs/benchmarks.md quotes


def main(argv: Sequence[str] | None = None) -> int:
    """Print, for SmolLM2 on the shipped text, the numbers docs/benchmarks.md quotes: the deletion at 64 and
    256 tokens, Gu et al.'s inputs at 64 (seed 0), the first-token ablations at the page's default (4 windows
    of 256 tokens) and the Tour's (4 of 128) with their 95% t intervals, and the eviction test of the shipped
    StreamingLLM run."""
    import argparse

    from attncore.decoder.probe import MAX_DECODER_TOKENS
    from attncore.decoder.stream_run import load_stream_run
    from attncore.decoder.streaming import ablations, massive_point
    from attncore.decoder.text import shipped_text, text_windows
    from attncore.models import load_model

    parser = argparse.ArgumentParser(prog="python -m attncore.decoder.position", description=main.__doc__)
    parser.parse_args(argv)
    lm = load_model("smollm2")
    ids = lm.tokenizer(shipped_text(), return_tensors="pt")["input_ids"][:, :MAX_DECODER_TOKENS]
    for L in (GU_TOKENS, 4 * GU_TOKENS):
        d = delete_first_token(lm.model, ids[:, :L])
        a, b, c = d.sink_heads(0.3)
        print(f"deletion at {L} tokens: masked vs deleted max gap {d.equivalence_gap:.1e} nats; cost "
              f"{d.cost:+.4f} nats/token on tokens 2..{L - 1}; sink heads (>0.3) first {a}, token 1 "
              f"second {b}, token 1 once first {c}; residual norm after layer {d.layer}: first "
              f"{d.norm_first:,.0f}, token 1 second {d.norm_second:,.1f}, once first "
              f"{d.norm_new_first:,.0f}, "
              f"others' median {d.norm_rest:,.1f}; dims {d.dims_first.tolist()} -> "
              f"{d.dims_new_first.tolist()}", flush=True)
    newline = int(lm.tokenizer("\n", add_special_tokens=False)["input_ids"][0])
    for r in gu_inputs(lm.model, ids[:, :GU_TOKENS], seed=0, prefix_id=newline, prefix_text="\\n",
                       exclude=lm.tokenizer.all_special_ids):
        print(f"Gu inputs: {r.name:>18} {r.prefix or 'as is':>5}: sink heads "
              + ", ".join(f"{100 * r.share(e):.1f}% at {e:g}" for e in GU_THRESHOLDS)
              + f"; largest weight on token 0 {100 * r.top_share:.1f}%", flush=True)
    for n, L in ((4, 256), (4, 128)):
        layer, dims = massive_point(lm.model, ids[:, :L])
        for a_ in ablations(lm.model, text_windows(ids, L, n), layer, dims):
            print(f"ablation, {n} windows of {L}: {a_.name}: {a_.mean:+.4f} ± {a_.margin:.4f} (95% t; SE "
                  f"{a_.se:.4f}) nats/token; after layer {layer}, dims {dims}", flush=True)
    r_ = load_stream_run().result
    from attncore.decoder.streaming import StreamSetting

    dense = r_.ppl(StreamSetting(None), 256)
    for s in (StreamSetting(256), StreamSetting(256, 1), StreamSetting(256, 4)):
        print(f"shipped run, past token 256 of {r_.length}: {s.label} {r_.ppl(s, 256):.2f} "
              f"({r_.ppl(s, 256) / dense:.3f}x dense {dense:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
