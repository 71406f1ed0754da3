"""Induction heads in a real decoder (Olsson et al. 2022, "In-context Learning and Induction Heads").

Shape legend: ``N`` layers, ``H`` heads, ``T`` tokens of one copy, ``L = 2T`` tokens.

A seeded sequence of T random tokens is repeated once. At query ``i = T + j`` of the second copy the
token equals token ``j``; an induction head attends to the token that followed it, key ``j + 1 = i - T + 1``:
a stripe ``T - 1`` below the diagonal. The induction score of a head is its mean weight on that key
over the second copy's queries; the model's loss falls on the second copy if it copies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.decoder.probe import check_ids, decoder_pass, decoder_shape
from attncore.errors import AttnInputError
from attncore.models.modules import attention_implementation
from attncore.synthetic import make_generator

__all__ = [
    "ABLATION_SHARES",
    "MAX_COPY",
    "Induction",
    "InductionAblation",
    "ablate_induction_heads",
    "head_ablation_nll",
    "induction",
    "repeated_tokens",
]

MAX_COPY = 512
# Crosbie & Shutova 2025 ablate the top 1% and 3% of heads by induction score (3 and 8 of SmolLM2's 270)
ABLATION_SHARES: tuple[float, ...] = (0.01, 0.03)


def repeated_tokens(vocab: int, T: int, seed: int, exclude: Sequence[int] = ()) -> Tensor:
    """(1, 2T) int64: T token ids drawn uniformly (seeded, CPU) from [0, vocab) minus ``exclude``, twice."""
    if not 2 <= T <= MAX_COPY:
        raise AttnInputError(f"a copy must have 2 to {MAX_COPY} tokens; got {T}.")
    pool = torch.ones(vocab, dtype=torch.bool)
    bad = [int(i) for i in exclude if 0 <= int(i) < vocab]
    if bad:
        pool[bad] = False
    choices = pool.nonzero().flatten()
    if choices.numel() < 2:
        raise AttnInputError("the vocabulary has fewer than 2 ordinary tokens.")
    g = make_generator(seed)
    first = choices[torch.randint(0, choices.numel(), (T,), generator=g)]
    return torch.cat([first, first])[None]


@dataclass(frozen=True)
class Induction:
    """Induction measurements on one repeated sequence.

    Attributes:
        ids: (1, 2T) the tokens.
        score: (N, H) mean weight of the second copy's queries on the token after the earlier occurrence.
        loss_first, loss_second: mean loss (nats) on the first copy's tokens 1..T-1 and on the
            second's T+1..2T-1.
        top: the ``k`` heads with the highest score, (layer, head).
        maps: (layer, head) -> (2T, 2T) weights of the top heads.
        vocab: V, the model's vocabulary size (ln V nats: the loss of uniform guessing over it).
    """

    ids: Tensor
    score: Tensor
    loss_first: float
    loss_second: float
    top: tuple[tuple[int, int], ...]
    maps: dict[tuple[int, int], Tensor]
    vocab: int = 0

    @property
    def copy_length(self) -> int:
        """T."""
        return int(self.ids.shape[-1]) // 2


def induction(model: Any, T: int, seed: int, exclude: Sequence[int] = (), top: int = 3) -> Induction:
    """Induction scores of every head, the loss on both copies and the top heads' maps (two passes)."""
    shape = decoder_shape(model)
    ids = repeated_tokens(shape.vocab, T, seed, exclude)
    p = decoder_pass(model, ids, stripe_offset=T - 1, stripe_from=T)
    assert p.stripe is not None
    score = p.stripe  # (N, H)
    k = max(1, min(int(top), score.numel()))
    flat = score.flatten().topk(k).indices
    heads = tuple((int(i) // shape.heads, int(i) % shape.heads) for i in flat)
    maps = decoder_pass(model, ids, maps=heads).maps
    return Induction(ids=ids, score=score, loss_first=float(p.nll[: T - 1].double().mean()),
                     loss_second=float(p.nll[T:].double().mean()), top=heads, maps=maps,
                     vocab=shape.vocab)


# ---------------------------------------------------------------------------- induction heads made causal


def head_ablation_nll(model: Any, ids: Tensor, heads: Sequence[tuple[int, int]]) -> Tensor:
    """(L - 1,) per-token loss of ``ids`` (1, L) with the outputs of ``heads`` (layer, head) set to zero.

    Zero ablation: each head's slice (E values) of the attention output is zeroed before ``o_proj``, so the
    head writes nothing to the residual stream; the other heads, and the ablated head's own weights, are
    unchanged. One pass (SDPA, no weights kept), holding the model alone while its hooks are on.
    """
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (0 <= layer < shape.layers and 0 <= head < shape.heads):
            raise AttnInputError(f"no head ({layer}, {head}): the model has {shape.layers} layers x "
                                 f"{shape.heads} heads.")
        by_layer.setdefault(int(layer), []).append(int(head))
    E = shape.head_dim

    def pre(hs: list[int]) -> Callable[..., tuple[Tensor]]:
        def hook(_mod: Any, args: tuple[Tensor, ...]) -> tuple[Tensor]:
            x = args[0].clone()  # (1, L, H E)
            for h in hs:
                x[..., h * E:(h + 1) * E] = 0.0
            return (x,)
        return hook

    layers = model.model.layers  # a Llama-family decoder: decoder_shape checked it
    dev = next(model.parameters()).device
    # the hooks belong to the shared model: hold it alone (another session's pass would run them too);
    # no weights are needed, so torch's fused SDPA runs the attention
    with attention_implementation(model, "sdpa"), contextlib.ExitStack() as stack:
        for layer, hs in by_layer.items():
            handle = layers[layer].self_attn.o_proj.register_forward_pre_hook(pre(hs))
            stack.callback(handle.remove)
        with torch.inference_mode():
            logits = model(input_ids=ids.to(dev), use_cache=False).logits[0, :-1].float()  # (L - 1, V)
    return torch.nn.functional.cross_entropy(logits, ids[0, 1:].to(dev), reduction="none").cpu()


@dataclass(frozen=True)
class InductionAblation:
    """The top induction heads ablated against random sets of the same size, on the second copy's loss.

    Attributes:
        copy_length: T.
        base: mean loss on the second copy's tokens T+1..2T-1 with nothing ablated (nats).
        first_copy: the same on the first copy's tokens 1..T-1 (nothing to copy there).
        sizes: the set sizes (the top 1% and 3% of heads by induction score).
        top: size -> the top heads ablated.
        top_loss: size -> the second copy's loss with them ablated.
        random_loss: size -> (R,) the loss with each of R random sets of the same size ablated (drawn,
            seeded, from the heads outside that top set).
    """

    copy_length: int
    base: float
    first_copy: float
    sizes: tuple[int, ...]
    top: dict[int, tuple[tuple[int, int], ...]]
    top_loss: dict[int, float]
    random_loss: dict[int, Tensor]

    def beaten_by(self, size: int) -> int:
        """How many random sets raise the loss at least as much as the top set of ``size``."""
        return int((self.random_loss[size] >= self.top_loss[size]).sum())


def ablate_induction_heads(model: Any, ind: Induction, *, sets: int = 20, seed: int = 0,
                           shares: Sequence[float] = ABLATION_SHARES,
                           progress: Callable[[int, int], None] | None = None) -> InductionAblation:
    """Zero the top ``share`` of heads by induction score (for each share) and ``sets`` random sets of the
    same size each, on ``ind``'s repeated tokens; the loss on the second copy for each. 1 + len(shares) x
    (1 + sets) passes; ``progress(done, total)`` after each."""
    if sets < 1:
        raise AttnInputError(f"at least one random set is needed; got {sets}.")
    shape = decoder_shape(model)
    n = shape.layers * shape.heads
    T = ind.copy_length
    sizes = tuple(dict.fromkeys(max(1, round(float(s) * n)) for s in shares))
    order = ind.score.flatten().argsort(descending=True)  # (N H,)
    total = 1 + len(sizes) * (1 + sets)
    done = 0

    def loss(heads: Sequence[tuple[int, int]]) -> Tensor:
        nonlocal done
        out = head_ablation_nll(model, ind.ids, heads)
        done += 1
        if progress is not None:
            progress(done, total)
        return out

    def pair(i: int) -> tuple[int, int]:
        return (i // shape.heads, i % shape.heads)

    base_nll = loss(())
    g = make_generator(seed)
    top: dict[int, tuple[tuple[int, int], ...]] = {}
    top_loss: dict[int, float] = {}
    random_loss: dict[int, Tensor] = {}
    for k in sizes:
        chosen = [int(i) for i in order[:k]]
        top[k] = tuple(pair(i) for i in chosen)
        top_loss[k] = float(loss(top[k])[T:].double().mean())
        rest = order[k:]
        vals = []
        for _ in range(sets):
            pick = rest[torch.randperm(len(rest), generator=g)[:k]]
            vals.append(float(loss([pair(int(i)) for i in pick])[T:].double().mean()))
        random_loss[k] = torch.tensor(vals, dtype=torch.float64)
    return InductionAblation(copy_length=T, base=float(base_nll[T:].double().mean()),
                             first_copy=float(base_nll[: T - 1].double().mean()), sizes=sizes, top=top,
                             top_loss=top_loss, random_loss=random_loss)
