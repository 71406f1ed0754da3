"""Induction heads in a real decoder (Olsson et al. 2022, "In-context Learning and Induction Heads").

Shape legend: ``N`` layers, ``H`` heads, ``T`` tokens of one copy, ``L = 2T`` tokens.

A seeded sequence of T random tokens is repeated once. At query ``i = T + j`` of the second copy the
token equals token ``j``; an induction head attends to the token that followed it, key ``j + 1 = i - T + 1``:
a stripe ``T - 1`` below the diagonal. The induction score of a head is its mean weight on that key
over the second copy's queries; the model's loss falls on the second copy if it copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.decoder.probe import decoder_pass, decoder_shape
from attncore.errors import AttnInputError
from attncore.synthetic import make_generator

__all__ = ["MAX_COPY", "Induction", "induction", "repeated_tokens"]

MAX_COPY = 512


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
