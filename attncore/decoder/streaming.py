"""StreamingLLM on real text: dense vs a sliding window vs the window plus the first k tokens.

Shape legend: ``L`` tokens, ``P`` settings, ``B`` text windows, ``K`` residual dims edited.

Xiao et al. 2023 ("Efficient Streaming Language Models with Attention Sinks") keep a KV cache of the
last W tokens and find perplexity explodes once the first tokens leave it; keeping the first 4 tokens
("attention sinks") restores it. Here every setting is one forward pass over the whole text under a
banded mask (:func:`attncore.decoder.probe.band_allowed`): at every layer query i sees keys
i-W+1..i, plus keys 0..k-1. That is exactly a rolling KV cache (each token's keys and values were
computed when it was newest, from its own window; the tests decode token by token to check it), not
the "window with re-computation" baseline. The one difference from StreamingLLM's cache: it re-indexes
positions inside the cache (the kept first tokens sit just before the window), while the positions
here are the true ones. With rotary positions a window alone is the same either way; the kept first
tokens are seen at their true distance instead of at distance W.

Ablations of the first token on the dense model: delete it (hide key 0 from every later query, which is
the same thing: :mod:`attncore.decoder.position`), or zero / mean-replace its largest residual dims (Sun et
al. 2024); the loss change of each with its 95% t interval over text windows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attncore.decoder.probe import ResidualEdit, band_allowed, check_ids, decoder_pass
from attncore.errors import AttnInputError
from attncore.stats import t_critical

__all__ = [
    "ABLATIONS",
    "BLOCK",
    "MAX_SETTINGS",
    "Ablation",
    "Cancelled",
    "StreamResult",
    "StreamSetting",
    "ablations",
    "default_settings",
    "massive_point",
    "mean_se",
    "stream_losses",
]

MAX_SETTINGS = 12
# Positions are correlated; standard errors of a mean loss over positions use blocks of this many.
BLOCK = 64
# "delete first token" runs as a mask of key 0 for every later query, which is exactly a deletion
ABLATIONS: tuple[str, ...] = ("delete first token", "zero massive dims", "mean-replace massive dims")


class Cancelled(Exception):
    """Raised inside :func:`stream_losses` when ``cancel()`` says stop; the result so far is attached."""

    def __init__(self, partial: StreamResult) -> None:
        super().__init__("stopped")
        self.partial = partial


@dataclass(frozen=True)
class StreamSetting:
    """One mask: ``window`` keys (None = dense) plus the first ``sinks`` tokens."""

    window: int | None
    sinks: int = 0

    @property
    def label(self) -> str:
        """'dense', 'window 256' or 'window 256 + first 4'."""
        if self.window is None:
            return "dense"
        return f"window {self.window}" + (f" + first {self.sinks}" if self.sinks else "")


def default_settings(L: int, windows: Sequence[int] | None = None, sinks: Sequence[int] = (1, 4)
                     ) -> tuple[StreamSetting, ...]:
    """Dense, then for each window W: W alone and W + first k for each k: 7 settings for two windows.

    The default windows are L/8 and L/4 (at least 8 and 16 keys).
    """
    ws = tuple(windows) if windows is not None else (max(8, L // 8), max(16, L // 4))
    out = [StreamSetting(None)]
    for w in ws:
        out.append(StreamSetting(int(w)))
        out.extend(StreamSetting(int(w), int(k)) for k in sinks)
    return tuple(out)


def mean_se(x: Tensor, block: int = BLOCK) -> tuple[float, float]:
    """Mean of ``x`` (n,) and its standard error from the means of consecutive blocks of ``block`` values.

    Fewer than two blocks: the plain standard error over values (NaN for one value).
    """
    n = int(x.numel())
    if n == 0:
        return math.nan, math.nan
    x = x.double()
    m = float(x.mean())
    nb = n // block
    if nb >= 2:
        means = x[: nb * block].view(nb, block).mean(dim=1)
        return m, float(means.std(unbiased=True)) / math.sqrt(nb)
    if n < 2:
        return m, math.nan
    return m, float(x.std(unbiased=True)) / math.sqrt(n)


@dataclass(frozen=True)
class StreamResult:
    """Per-position losses of each setting on one text.

    Attributes:
        settings: (P,) the settings run (in order; a stopped run has fewer than asked).
        nll: (P, L - 1) loss of predicting token i + 1 at query i (nats).
        length: L.
        seconds: (P,) seconds per setting.
    """

    settings: tuple[StreamSetting, ...]
    nll: Tensor
    length: int
    seconds: tuple[float, ...]

    def index(self, setting: StreamSetting) -> int:
        """Row of ``setting`` in :attr:`nll`."""
        return self.settings.index(setting)

    def ppl(self, setting: StreamSetting, start: int = 0) -> float:
        """exp(mean loss) over queries ``start``..L-2."""
        return math.exp(float(self.nll[self.index(setting), start:].double().mean()))

    def delta(self, setting: StreamSetting, base: StreamSetting, start: int) -> tuple[float, float]:
        """Mean loss difference (setting - base) over queries ``start``.. and its block standard error."""
        d = self.nll[self.index(setting), start:] - self.nll[self.index(base), start:]
        return mean_se(d)


def stream_losses(model: Any, ids: Tensor, settings: Sequence[StreamSetting],
                  progress: Callable[[int, int, StreamSetting], None] | None = None,
                  cancel: Callable[[], bool] | None = None) -> StreamResult:
    """One forward pass per setting over ``ids`` (1, L) under its banded mask; losses (P, L - 1).

    ``progress(done, total, setting)`` is called after each setting; when ``cancel()`` returns True
    before a setting, :class:`Cancelled` is raised with the settings done so far.
    """
    ids = check_ids(ids, model)
    L = int(ids.shape[1])
    if not settings or len(settings) > MAX_SETTINGS:
        raise AttnInputError(f"choose 1 to {MAX_SETTINGS} settings; got {len(settings)}.")
    for s in settings:
        if s.window is not None and not (s.window >= 1 and 0 <= s.sinks < L):
            raise AttnInputError(f"{s.label}: the window and the kept first tokens must fit {L} tokens.")
    rows: list[Tensor] = []
    secs: list[float] = []
    done: list[StreamSetting] = []
    for s in settings:
        if cancel is not None and cancel():
            raise Cancelled(StreamResult(tuple(done), torch.stack(rows) if rows else torch.zeros(0, L - 1),
                                         L, tuple(secs)))
        t0 = time.perf_counter()
        p = decoder_pass(model, ids, allowed=band_allowed(L, s.window, s.sinks), weights=False)
        rows.append(p.nll)
        secs.append(time.perf_counter() - t0)
        done.append(s)
        if progress is not None:
            progress(len(done), len(settings), s)
    return StreamResult(tuple(done), torch.stack(rows), L, tuple(secs))


@dataclass(frozen=True)
class Ablation:
    """Loss change of one ablation of the first token, per text window and its mean ± standard error.

    Attributes:
        name: one of :data:`ABLATIONS`.
        deltas: (B,) mean loss (ablated - dense) per window (nats per token).
        base: (B,) dense mean loss per window.
        layer, dims: the residual point and dims edited (-1 and () for the mask).
        values: the values written (the mean-replacement), () otherwise.
    """

    name: str
    deltas: Tensor
    base: Tensor
    layer: int
    dims: tuple[int, ...]
    values: tuple[float, ...] = ()

    @property
    def mean(self) -> float:
        """Mean loss change over windows."""
        return float(self.deltas.double().mean())

    @property
    def se(self) -> float:
        """Standard error of the mean over windows (NaN for one window)."""
        n = int(self.deltas.numel())
        return float(self.deltas.double().std(unbiased=True)) / math.sqrt(n) if n > 1 else math.nan

    @property
    def windows(self) -> int:
        """B, the text windows averaged."""
        return int(self.deltas.numel())

    @property
    def margin(self) -> float:
        """Half-width of the 95% t interval of the mean: t(0.975, B - 1) x standard error (NaN for B < 2)."""
        n = self.windows
        return t_critical(n - 1) * self.se if n > 1 else math.nan

    @property
    def sign(self) -> int:
        """+1 when the whole 95% interval is above 0 (a cost), -1 below, 0 when it holds 0 or is undefined."""
        m, h = self.mean, self.margin
        if not math.isfinite(h):
            return 0
        return 1 if m - h > 0 else (-1 if m + h < 0 else 0)


def massive_point(model: Any, ids: Tensor, top: int = 4) -> tuple[int, tuple[int, ...]]:
    """Where the residual ablations edit, read from one pass over ``ids`` (1, L): after the layer (0-based;
    -1 = the embeddings) where the first token's residual norm first passes half its peak, the first token's
    ``top`` largest |dims| where the norm peaks."""
    p = decoder_pass(model, ids, weights=False)
    norm = p.residual_norm[:, 0]  # (N + 1,)
    layer = int((norm > 0.5 * norm.max()).nonzero()[0]) - 1
    idx = p.first_residual[int(norm.argmax())].abs().topk(min(top, p.first_residual.shape[-1])).indices
    return layer, tuple(int(d) for d in idx)


def ablations(model: Any, windows: Sequence[Tensor], layer: int, dims: Sequence[int],
              progress: Callable[[int, int, str], None] | None = None) -> tuple[Ablation, ...]:
    """The three first-token ablations of :data:`ABLATIONS` on each window (1, L) of text.

    "delete first token": no query but the first sees key 0, which is deleting token 0 (the later tokens
    compute what they would without it; with rotary positions only distances count). The residual edits
    overwrite ``dims`` of token 0 at the output of layer ``layer`` (0-based; -1 = the embeddings) with 0, or
    with their mean over the windows (Sun et al. 2024: the values matter only through their size, so the
    mean keeps the loss while zeroing breaks it). With one window the mean is the value itself: no change.
    """
    if not windows:
        raise AttnInputError("the ablations need at least one window of text.")
    dims = tuple(int(d) for d in dims)
    base, masked, zeroed, meaned = [], [], [], []
    total = 4 * len(windows)
    step = 0

    def tick(what: str) -> None:
        nonlocal step
        step += 1
        if progress is not None:
            progress(step, total, what)

    dense_runs = []
    for w in windows:
        dense_runs.append(decoder_pass(model, w, weights=False))
        tick("dense")
    idx = torch.tensor(dims, dtype=torch.long)
    mean_vals = torch.stack([p.first_residual[layer + 1, idx] for p in dense_runs]).double().mean(0)  # (K,)
    values = tuple(float(v) for v in mean_vals)
    for w, run in zip(windows, dense_runs, strict=True):
        L = int(w.shape[-1])
        dense = run.nll.double().mean()
        allowed = band_allowed(L)
        allowed[1:, 0] = False
        masked.append(decoder_pass(model, w, allowed=allowed, weights=False).nll.double().mean() - dense)
        tick("mask")
        zeroed.append(decoder_pass(model, w, weights=False,
                                   edits=[ResidualEdit(layer, dims, "zero")]).nll.double().mean() - dense)
        tick("zero")
        mean_edit = ResidualEdit(layer, dims, "set", values)
        meaned.append(decoder_pass(model, w, weights=False, edits=[mean_edit]).nll.double().mean() - dense)
        tick("mean")
        base.append(dense)
    b = torch.stack(base)
    return (Ablation(ABLATIONS[0], torch.stack(masked), b, -1, ()),
            Ablation(ABLATIONS[1], torch.stack(zeroed), b, layer, dims),
            Ablation(ABLATIONS[2], torch.stack(meaned), b, layer, dims, values))
