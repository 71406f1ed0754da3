"""Warm a server for a class: the real model loaded (converted on a first start) and the passes of the Tour's
real-decoder step and of the real-model views at their defaults computed into the server's caches, so the
first students find them cached instead of queueing behind each other for the same passes.

``serve.py`` runs :func:`run` in a background thread once Streamlit's runtime exists (the first page is
never held up by it; a student who opens a view before its step is done computes it, and the warm-up then
finds it cached) and reports each step on its readiness endpoint. Every step calls the same cached
functions with the same arguments as the page it warms (the pages' own ``Param`` defaults and constants),
and ``tests/test_warmup.py`` holds each page's default calls to be cache hits after :func:`run`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attncore.decoder.sinks import GU_TOKENS
from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.models import SMOLLM2
from ui import cached_decoder, cached_models, decoder_lab, tour
from ui.cached import text_key
from ui.page import SEED
from ui.realtext import DEFAULT_TEXT

__all__ = ["Step", "run", "steps"]

SINKS_EPS = 0.3  # the Attention sinks page's default sink threshold (pages/4_Attention_sinks.py, snk_eps)


class _Quiet:
    """A page slot that draws nothing (the warm-up runs outside any page; nobody waits for its messages)."""

    def empty(self) -> _Quiet:
        return self

    def info(self, *args: Any, **kwargs: Any) -> None:
        return None


QUIET = _Quiet()


@dataclass(frozen=True)
class Step:
    """One warm-up step: what it does, in words, and the calls."""

    name: str
    work: Callable[[], object]


def _tour_real_sink(device: str) -> None:
    # ui.tour.show_real_sink's passes (its constants), and the shipped StreamingLLM run it reads
    cached_decoder.decoder_sinks(GU_TOKENS, tour.REAL_EPS, device, where=QUIET)
    cached_decoder.decoder_deletion(GU_TOKENS, device, where=QUIET)
    cached_decoder.decoder_ablations(tour.REAL_WINDOWS, tour.REAL_WINDOW, device, where=QUIET)
    with contextlib.suppress(AttnInputError):  # a missing shipped run: the Tour says so itself
        cached_decoder.shipped_stream_run()


def _sinks_default(device: str) -> None:
    # ui.decoder_lab.decoder_part on the shipped text at its defaults: the sink heads at Gu et al.'s 64 tokens
    # and at the default length, the variants, the ablations, the deletion and the induction test
    eps, key = SINKS_EPS, text_key(None)
    sinks = cached_decoder._decoder_sinks
    sinks(GU_TOKENS, eps, device, key, None, where=QUIET)
    sinks(decoder_lab.P_L.default, eps, device, key, None, where=QUIET)
    total = cached_decoder.decoder_tokens(decoder_lab.P_L.default, device).total
    shift = decoder_lab.P_SHIFT.default
    cached_decoder.decoder_variants(shift, eps, device, None, decoder_lab.variants_length(total, shift),
                                    where=QUIET)
    cached_decoder.decoder_ablations(decoder_lab.P_AW.default, decoder_lab.P_AL.default, device, where=QUIET)
    cached_decoder.decoder_deletion(GU_TOKENS, device, where=QUIET)
    cached_decoder.decoder_induction(decoder_lab.P_T.default, SEED.default, device, where=QUIET)


def _heatmaps_default(device: str) -> None:
    # Heatmaps' real text with SmolLM2 picked: the default text's maps (a short text: every layer's)
    cached_models.text_attention(SMOLLM2.key, DEFAULT_TEXT, device, where=QUIET)


def _entropy_default(device: str) -> None:
    cached_decoder.decoder_entropy(decoder_lab.P_EL.default, device, where=QUIET)


def steps(device: str) -> list[Step]:
    """The warm-up's steps on ``device``, in order (the model first: every later step reads it)."""
    return [
        Step("loading the real model (SmolLM2-135M)",
             lambda: cached_models.language_model(SMOLLM2.key, device)),
        Step("the Tour's real-decoder step", lambda: _tour_real_sink(device)),
        Step("Attention sinks: the real decoder at its defaults", lambda: _sinks_default(device)),
        Step("Heatmaps: SmolLM2 on the default text", lambda: _heatmaps_default(device)),
        Step("Entropy: the real decoder at its defaults", lambda: _entropy_default(device)),
    ]


def run(report: Callable[[str, int, int], None], stop: Callable[[], bool] = lambda: False,
        device: str | None = None) -> list[tuple[str, str]]:
    """Run every step in order, calling ``report(step, done, total)`` before each and once at the end
    (``step`` ""), until ``stop()``; a failing step is reported and skipped (the pages say why when a
    student opens them), and when the model itself does not load, every later step is skipped. Returns the
    failures: (step, ``Type: first line`` or why skipped)."""
    dev = device if device is not None else str(resolve_device("auto"))
    todo = steps(dev)
    failed: list[tuple[str, str]] = []
    for i, s in enumerate(todo):
        if stop():
            break
        if i > 0 and failed and failed[0][0] == todo[0].name:  # every later step reads the model
            failed.append((s.name, "skipped: the model did not load"))
            continue
        report(s.name, i, len(todo))
        try:
            s.work()
        except Exception as exc:  # noqa: BLE001 - any failure ends this step, never the server
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            failed.append((s.name, f"{type(exc).__name__}: {first}"))
    report("", len(todo), len(todo))
    return failed
