"""Activation patching between a clean and a corrupted prompt of a Llama-family decoder.

Shape legend as in :mod:`attncore`: ``N`` layers, ``H`` query heads, ``E`` head dim, ``D`` residual width,
``V`` vocabulary, ``L`` tokens (both prompts have the same count), ``B`` prompts run together in one batch.

Two prompts of the same token count differ where the answer is decided (an indirect-object sentence with
the names swapped, a capital asked of another country). The **metric** is the logit difference between two
answer tokens at the last position, ``m = logit(answer) - logit(wrong)``: clearly positive on the clean
prompt, negative on the corrupted one. Running the corrupted prompt with one activation copied in from the
clean prompt's pass gives ``m_patched``; the **recovered share** is

    ``(m_patched - m_corrupted) / (m_clean - m_corrupted)``,

0 when the patch changes nothing, 1 when it gives back the clean prompt's difference (it can leave [0, 1]).
Two kinds of activation are patched, one at a time:

* **the residual stream** at the input of layer ``l`` at one position ``p`` (TransformerLens's
  ``resid_pre``): the whole D-vector the layer reads there replaced by the clean one. Patching every
  position of one layer's input is running the clean prompt from that layer on, so it recovers exactly 1.
* **a head's output**: head h's slice ``[hE, (h+1)E)`` of layer l's attention output before ``o_proj`` (its
  ``z``), at every position. This is the head's whole contribution to the residual (``o_proj``'s columns for
  that head times ``z``), so the patch replaces what that head writes, and nothing else.

One batched pass per layer: row b of the batch is the corrupted prompt with patch b (position b for the
residual, head b for the heads), so N passes of L rows and N passes of H rows, plus one clean and one
corrupted pass. The passes run layer by layer with a progress callback and a stop flag; a stopped run
returns what it has (NaN for the layers not reached) and a later call resumes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from attncore.budget import check_bytes
from attncore.decoder.probe import DecoderShape, _layers, check_ids, decoder_shape
from attncore.errors import AttnInputError
from attncore.models.capture import PASS_OVERHEAD_BYTES
from attncore.models.modules import attention_implementation, hooked_run

__all__ = [
    "MAX_PAIR_CHARS",
    "MAX_PATCH_TOKENS",
    "PAIRS",
    "PARTS",
    "PairIds",
    "Patching",
    "PromptPair",
    "activation_patching",
    "answer_token",
    "clean_activations",
    "pair_ids",
    "patch_bytes",
    "patched_logits",
    "recovered",
]

MAX_PATCH_TOKENS = 64  # the residual part runs N passes of L rows of L tokens: L^2 grows fast on a CPU
MAX_PAIR_CHARS = 1000  # a prompt longer than this cannot be 64 tokens of text anyway
PARTS = ("resid", "heads")
# |m_clean - m_corrupted| under this many logits: nothing to recover, every share would be noise
MIN_GAP = 1e-3


@dataclass(frozen=True)
class PromptPair:
    """A clean and a corrupted prompt, and the two answer tokens (as text, with their leading space).

    ``answer`` is the clean prompt's answer and ``wrong`` the corrupted one's, so the clean logit difference
    ``logit(answer) - logit(wrong)`` is positive and the corrupted one negative.
    """

    key: str
    title: str
    clean: str
    corrupted: str
    answer: str
    wrong: str


# Checked on SmolLM2-135M (tests/test_patching.py): same token counts (14 and 5, no BOS added), single-token
# answers; logit difference clean / corrupted: +6.12 / -6.47 (indirect object), +7.31 / -6.02 (capital).
PAIRS: tuple[PromptPair, ...] = (
    PromptPair(key="ioi", title="Indirect object (names swapped)",
               clean="When Mary and John went to the store, John gave a drink to",
               corrupted="When John and Mary went to the store, Mary gave a drink to",
               answer=" Mary", wrong=" John"),
    PromptPair(key="capital", title="Factual recall (a capital)",
               clean="The capital of France is", corrupted="The capital of Italy is",
               answer=" Paris", wrong=" Rome"),
)


@dataclass(frozen=True)
class PairIds:
    """A prompt pair as token ids: ``clean`` and ``corrupted`` (1, L) int64, the two answer ids."""

    clean: Tensor
    corrupted: Tensor
    answer: int
    wrong: int

    @property
    def length(self) -> int:
        """L."""
        return int(self.clean.shape[1])


def _prompt_ids(tokenizer: Any, text: Any, which: str) -> list[int]:
    if not isinstance(text, str) or not text.strip():
        raise AttnInputError(f"the {which} prompt is empty; type a sentence.")
    if len(text) > MAX_PAIR_CHARS:
        raise AttnInputError(f"the {which} prompt has {len(text):,} characters; the limit is "
                             f"{MAX_PAIR_CHARS:,}. Use a shorter sentence.")
    try:
        ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
    except Exception as exc:  # a tokenizer raises many kinds
        raise AttnInputError(f"the tokenizer could not read the {which} prompt.") from exc
    if len(ids) < 2:
        raise AttnInputError(f"the {which} prompt gave {len(ids)} token; patching needs at least 2.")
    if len(ids) > MAX_PATCH_TOKENS:
        raise AttnInputError(f"the {which} prompt has {len(ids):,} tokens; the limit is {MAX_PATCH_TOKENS} "
                             "(the residual patching runs one pass per layer of one row per position). Use a "
                             "shorter sentence.")
    return [int(i) for i in ids]


def answer_token(tokenizer: Any, text: Any, which: str = "answer") -> int:
    """The id of ``text`` as one token (no special tokens added); a plain error when it is not one token."""
    if not isinstance(text, str) or not text:
        raise AttnInputError(f"the {which} token is empty; type one word (with its leading space, "
                             "e.g. ' Paris').")
    if len(text) > 100:
        raise AttnInputError(f"the {which} token has {len(text):,} characters; type one word.")
    try:
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    except Exception as exc:
        raise AttnInputError(f"the tokenizer could not read the {which} token.") from exc
    if len(ids) != 1:
        raise AttnInputError(f"the {which} token is {len(ids)} tokens, not 1; the metric reads one logit. "
                             "Try a shorter or more common word, with its leading space (' Paris').")
    return int(ids[0])


def pair_ids(tokenizer: Any, clean: Any, corrupted: Any, answer: Any, wrong: Any) -> PairIds:
    """Tokenize a prompt pair (special tokens as the model's tokenizer adds them) and its two answers.

    Raises :class:`AttnInputError` with a plain message for an empty or over-long prompt (over
    :data:`MAX_PAIR_CHARS` characters or :data:`MAX_PATCH_TOKENS` tokens), prompts of different token
    counts, an answer that is not one token, or the same token twice.
    """
    c = _prompt_ids(tokenizer, clean, "clean")
    r = _prompt_ids(tokenizer, corrupted, "corrupted")
    if len(c) != len(r):
        raise AttnInputError(f"the clean prompt has {len(c)} tokens and the corrupted one {len(r)}; patching "
                             "copies activations position by position, so both need the same count. Change "
                             "a word so that the counts match.")
    a = answer_token(tokenizer, answer, "answer")
    w = answer_token(tokenizer, wrong, "wrong")
    if a == w:
        raise AttnInputError("the two answer tokens are the same token; the metric is their difference.")
    return PairIds(clean=torch.tensor([c]), corrupted=torch.tensor([r]), answer=a, wrong=w)


@dataclass(frozen=True)
class Patching:
    """Recovered shares of the metric (float64 on the CPU), NaN where not computed (yet).

    Attributes:
        clean_diff: m on the clean prompt, ``logit(answer) - logit(wrong)`` at the last position.
        corrupted_diff: m on the corrupted prompt.
        resid: (N, L) the share recovered by patching the residual stream at the input of layer l,
            position p; None when not asked.
        heads: (N, H) the share recovered by patching head h's output at layer l (every position); None
            when not asked.
        resid_done: layers of ``resid`` computed (its first rows); ``heads_done`` likewise.
    """

    clean_diff: float
    corrupted_diff: float
    resid: Tensor | None
    heads: Tensor | None
    resid_done: int = 0
    heads_done: int = 0

    @property
    def layers(self) -> int:
        """N."""
        t = self.resid if self.resid is not None else self.heads
        return 0 if t is None else int(t.shape[0])

    @property
    def steps(self) -> tuple[int, int]:
        """(done, total) layer steps over the parts asked for."""
        done = (self.resid_done if self.resid is not None else 0) + (self.heads_done if self.heads is not None
                                                                      else 0)
        total = self.layers * ((self.resid is not None) + (self.heads is not None))
        return done, total

    @property
    def complete(self) -> bool:
        """Every layer of every part asked for is computed."""
        done, total = self.steps
        return done == total


def recovered(patched: Tensor, clean: float, corrupted: float) -> Tensor:
    """(...) metric values -> (...) recovered shares ``(m - m_corrupted) / (m_clean - m_corrupted)``."""
    return (patched.double() - corrupted) / (clean - corrupted)


def patch_bytes(shape: DecoderShape, L: int) -> float:
    """Peak bytes of :func:`activation_patching` at L tokens, beyond the model's weights.

    The widest pass has B = max(L, H) rows of L tokens (torch's SDPA, no weights kept): the residual stream
    and the MLP's activations (12 B L D floats), one layer's scores if SDPA falls back to its plain form
    (3 B H L^2), the mask (L^2) and the last position's logits (2 B V); the clean pass's kept activations
    (every layer's input N L D and heads' outputs N L H E) and the pass's fixed overhead
    (:data:`attncore.models.capture.PASS_OVERHEAD_BYTES`).
    """
    B = max(L, shape.heads)
    floats = (12.0 * B * L * shape.hidden + 3.0 * B * shape.heads * L * L + L * L + 2.0 * B * shape.vocab
              + shape.layers * L * (shape.hidden + shape.heads * shape.head_dim))
    return 4.0 * floats + PASS_OVERHEAD_BYTES


def _first(out: Any) -> Tensor:
    return out[0] if isinstance(out, tuple) else out


def _metric(logits: Tensor, pair: PairIds) -> Tensor:
    """(B, V) -> (B,) float64 ``logit(answer) - logit(wrong)``."""
    return logits[:, pair.answer].double() - logits[:, pair.wrong].double()


# (B, L) bool which positions of each row are patched, and (L, D) the clean values
ResidPatch = tuple[Tensor, Tensor]
# (B, H) bool which heads of each row are patched, and (L, H E) the clean outputs
HeadPatch = tuple[Tensor, Tensor]


def patched_logits(model: Any, ids: Tensor, *, resid: Mapping[int, ResidPatch] | None = None,
                   heads: Mapping[int, HeadPatch] | None = None) -> Tensor:
    """(B, V) last-position logits (the model's dtype) of ``ids`` (B, L), each row run with its own patches.

    ``resid[l] = (where (B, L) bool, values (L, D))``: row b's residual stream at the input of layer l, at
    the positions ``where[b]``, is replaced by ``values`` there.
    ``heads[l] = (where (B, H) bool, z (L, H E))``: row b's attention output before layer l's ``o_proj``, in
    the slice of each head ``where[b]`` names, is replaced by ``z``'s slice, at every position.
    One pass with torch's SDPA.
    """
    shape = decoder_shape(model)
    layers = _layers(model)
    E = shape.head_dim
    resid, heads = dict(resid or {}), dict(heads or {})
    for layer in (*resid, *heads):
        if not 0 <= layer < shape.layers:
            raise AttnInputError(f"layer must lie in [0, {shape.layers}); got {layer}.")

    def resid_hook(layer: int) -> Callable[..., Any]:
        where, values = resid[layer]

        def fn(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            in_args = bool(args)
            h = args[0] if in_args else kwargs["hidden_states"]  # (B, L, D)
            w = where.to(h.device)[..., None]  # (B, L, 1)
            h = torch.where(w, values.to(h.device, h.dtype)[None], h)
            return ((h, *args[1:]), kwargs) if in_args else (args, {**kwargs, "hidden_states": h})
        return fn

    def head_hook(layer: int) -> Callable[..., Any]:
        where, z = heads[layer]

        def fn(_m: Any, args: tuple[Any, ...]) -> Any:
            x = args[0]  # (B, L, H E)
            w = where.to(x.device).repeat_interleave(E, dim=1)[:, None, :]  # (B, 1, H E)
            return (torch.where(w, z.to(x.device, x.dtype)[None], x), *args[1:])
        return fn

    handles: list[Any] = []
    dev = next(model.parameters()).device
    with attention_implementation(model, "sdpa"), hooked_run("the decoder", handles):
        for layer in resid:
            handles.append(layers[layer].register_forward_pre_hook(resid_hook(layer), with_kwargs=True))
        for layer in heads:
            handles.append(layers[layer].self_attn.o_proj.register_forward_pre_hook(head_hook(layer)))
        with torch.inference_mode():
            out = model(input_ids=ids.to(dev), use_cache=False, logits_to_keep=1)
        return out.logits[:, -1]  # (B, V)


def clean_activations(model: Any, ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One pass of ``ids`` (1, L): every layer's input (N, L, D), every layer's attention output before
    ``o_proj`` (N, L, H E), in the model's dtype on its device, and the last position's logits (V,)."""
    layers = _layers(model)
    N = len(layers)
    res: list[Tensor | None] = [None] * N
    zs: list[Tensor | None] = [None] * N

    def resid_hook(i: int) -> Callable[..., None]:
        def fn(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            res[i] = (args[0] if args else kwargs["hidden_states"])[0].detach().clone()  # (L, D)
        return fn

    def z_hook(i: int) -> Callable[..., None]:
        def fn(_m: Any, args: tuple[Any, ...]) -> None:
            zs[i] = args[0][0].detach().clone()  # (L, H E)
        return fn

    handles: list[Any] = []
    dev = next(model.parameters()).device
    with attention_implementation(model, "sdpa"), hooked_run("the decoder", handles):
        for i, blk in enumerate(layers):
            handles.append(blk.register_forward_pre_hook(resid_hook(i), with_kwargs=True))
            handles.append(blk.self_attn.o_proj.register_forward_pre_hook(z_hook(i)))
        with torch.inference_mode():
            logits = model(input_ids=ids.to(dev), use_cache=False, logits_to_keep=1).logits[0, -1]
    if any(t is None for t in res) or any(t is None for t in zs):
        raise AttnInputError("the decoder's modules did not all run: not a Llama-family layout.")
    return torch.stack(res), torch.stack(zs), logits  # type: ignore[arg-type]


def activation_patching(model: Any, pair: PairIds, *, parts: tuple[str, ...] = PARTS,
                        progress: Callable[[int, int, Patching], None] | None = None,
                        cancel: Callable[[], bool] | None = None, resume: Patching | None = None) -> Patching:
    """Recovered shares of ``pair``'s logit difference, patching clean -> corrupted, layer by layer.

    ``parts``: "resid" (the residual stream at each layer's input, per position) and/or "heads" (each head's
    output, every position). ``progress(done, total, partial)`` after each layer of each part; ``cancel()``
    checked before each: when it says True the partial result is returned (NaN where not run).
    ``resume``: a partial result of the same pair and parts, continued from where it stopped. Memory is
    checked first (:func:`patch_bytes`); the clean and corrupted metrics must differ by at least 1e-3.
    """
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise AttnInputError(f"the parts to patch are {PARTS}; got {parts!r}.")
    clean = check_ids(pair.clean, model, MAX_PATCH_TOKENS)
    corrupted = check_ids(pair.corrupted, model, MAX_PATCH_TOKENS)
    shape = decoder_shape(model)
    L = int(clean.shape[1])
    if corrupted.shape != clean.shape:
        raise AttnInputError(f"the prompts have {L} and {int(corrupted.shape[1])} tokens; patching needs the "
                             "same count.")
    for a in (pair.answer, pair.wrong):
        if not 0 <= a < shape.vocab:
            raise AttnInputError(f"an answer token must be an id in [0, {shape.vocab}); got {a}.")
    check_bytes(patch_bytes(shape, L), f"patching a pair of {L} tokens", "Use shorter prompts.")
    N, H = shape.layers, shape.heads
    x_clean, z_clean, logits_clean = clean_activations(model, clean)
    m_clean = float(_metric(logits_clean[None], pair)[0])
    m_corr = float(_metric(patched_logits(model, corrupted), pair)[0])
    if not math.isfinite(m_clean - m_corr) or abs(m_clean - m_corr) < MIN_GAP:
        raise AttnInputError(f"the logit difference is {m_clean:+.4f} on the clean prompt and {m_corr:+.4f} "
                             "on the corrupted one: nothing to recover. Choose prompts or answers that the "
                             "model tells apart.")
    nan = float("nan")
    res = resume if resume is not None else Patching(
        clean_diff=m_clean, corrupted_diff=m_corr,
        resid=torch.full((N, L), nan, dtype=torch.float64) if "resid" in parts else None,
        heads=torch.full((N, H), nan, dtype=torch.float64) if "heads" in parts else None)
    if ((res.resid is None) != ("resid" not in parts) or (res.heads is None) != ("heads" not in parts)
            or (res.resid is not None and tuple(res.resid.shape) != (N, L))
            or (res.heads is not None and tuple(res.heads.shape) != (N, H))):
        raise AttnInputError("the partial result to resume was computed for other parts or another pair.")
    res = replace(res, clean_diff=m_clean, corrupted_diff=m_corr)
    _, total = res.steps
    rows_l = torch.eye(L, dtype=torch.bool)  # (L, L): row b patches position b
    rows_h = torch.eye(H, dtype=torch.bool)  # (H, H): row b patches head b
    for part in parts:
        start = res.resid_done if part == "resid" else res.heads_done
        for layer in range(start, N):
            if cancel is not None and cancel():
                return res
            if part == "resid":
                assert res.resid is not None
                got = patched_logits(model, corrupted.expand(L, L), resid={layer: (rows_l, x_clean[layer])})
                grid = res.resid.clone()
                grid[layer] = recovered(_metric(got, pair), m_clean, m_corr).cpu()
                res = replace(res, resid=grid, resid_done=layer + 1)
            else:
                assert res.heads is not None
                got = patched_logits(model, corrupted.expand(H, L), heads={layer: (rows_h, z_clean[layer])})
                grid = res.heads.clone()
                grid[layer] = recovered(_metric(got, pair), m_clean, m_corr).cpu()
                res = replace(res, heads=grid, heads_done=layer + 1)
            if progress is not None:
                progress(res.steps[0], total, res)
    return res
