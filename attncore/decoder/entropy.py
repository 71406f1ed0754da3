"""Entropy against length in a real decoder: does a query's sharpness drift with the keys it sees?

Shape legend: ``N`` layers, ``H`` heads, ``L`` tokens, ``Q`` position bands.

Query i of a causal model sees i + 1 keys, so uniform attention has entropy ln(i + 1); a head whose
entropy tracks ln(i + 1) spreads out as the text grows (the notes' training-instability hypothesis),
one whose entropy stays flat does not. The first token is often a sink that soaks up weight, so the
entropy is also given without it (the other weights renormalised). Heads are classed by where their
weight goes: *sink-dominated* (median weight on the first token > 1/2), *local* (median weight on the
query and its :data:`~attncore.decoder.probe.LOCAL_KEYS` - 1 predecessors > 1/2), else *broad*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.decoder.probe import DecoderPass
from attncore.errors import AttnInputError

__all__ = ["CLASSES", "EntropyProfile", "entropy_profile", "head_classes", "position_bands"]

CLASSES: tuple[str, ...] = ("sink-dominated", "local", "broad")


def position_bands(L: int) -> list[tuple[int, int]]:
    """Query-position bands [1, 2), [2, 4), [4, 8), ... up to L (query 0 sees one key and is left out)."""
    if L < 2:
        raise AttnInputError("entropy bands need at least 2 tokens.")
    out, lo = [], 1
    while lo < L:
        hi = min(2 * lo, L)
        out.append((lo, hi))
        lo = hi
    return out


def head_classes(first_weight: Tensor, local_weight: Tensor) -> list[list[str]]:
    """(N, H, L) weights on the first token and on the local keys -> (N, H) class names.

    Medians over queries 1..L-1 (query 0 sees only the first token, which is also its own key).
    """
    f = first_weight[..., 1:].median(dim=-1).values  # (N, H)
    loc = local_weight[..., 1:].median(dim=-1).values  # (N, H)
    return [[CLASSES[0] if f[n, h] > 0.5 else CLASSES[1] if loc[n, h] > 0.5 else CLASSES[2]
             for h in range(f.shape[1])] for n in range(f.shape[0])]


@dataclass(frozen=True)
class EntropyProfile:
    """Entropy by position of every head.

    Attributes:
        entropy, entropy_rest: (N, H, L) with and without the first token (NaN where undefined).
        uniform: (L,) ln(i + 1), the entropy of uniform causal attention.
        bands: (Q,) position bands [lo, hi).
        median, median_rest: class name (and "all") -> (Q,) median entropy over heads and queries of the band.
        classes: (N, H) class names; counts: class -> heads.
    """

    entropy: Tensor
    entropy_rest: Tensor
    uniform: Tensor
    bands: tuple[tuple[int, int], ...]
    median: dict[str, Tensor]
    median_rest: dict[str, Tensor]
    classes: tuple[tuple[str, ...], ...]

    @property
    def counts(self) -> dict[str, int]:
        """Heads per class."""
        flat = [c for row in self.classes for c in row]
        return {c: flat.count(c) for c in CLASSES}


def _band_medians(x: Tensor, sel: Tensor, bands: list[tuple[int, int]]) -> Tensor:
    out = []
    for lo, hi in bands:
        v = x[sel][:, lo:hi].reshape(-1)
        v = v[~torch.isnan(v)]
        out.append(float(v.median()) if v.numel() else math.nan)
    return torch.tensor(out, dtype=torch.float64)


def entropy_profile(p: DecoderPass) -> EntropyProfile:
    """Per-head entropy against position, band medians by class, from a pass with weights."""
    if p.entropy is None or p.entropy_rest is None or p.first_weight is None or p.local_weight is None:
        raise AttnInputError("the pass kept no weights; run it with weights=True.")
    L = p.length
    bands = position_bands(L)
    classes = head_classes(p.first_weight, p.local_weight)
    names = torch.tensor([[CLASSES.index(c) for c in row] for row in classes])  # (N, H)
    median: dict[str, Tensor] = {}
    median_rest: dict[str, Tensor] = {}
    for name, sel in [("all", torch.ones_like(names, dtype=torch.bool))] + [
            (c, names == i) for i, c in enumerate(CLASSES)]:
        if bool(sel.any()):
            median[name] = _band_medians(p.entropy, sel, bands)
            median_rest[name] = _band_medians(p.entropy_rest, sel, bands)
    return EntropyProfile(entropy=p.entropy, entropy_rest=p.entropy_rest,
                          uniform=torch.log(torch.arange(1, L + 1, dtype=torch.float64)), bands=tuple(bands),
                          median=median, median_rest=median_rest,
                          classes=tuple(tuple(r) for r in classes))
