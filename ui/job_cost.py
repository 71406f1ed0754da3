"""What a training job costs before it runs, for the Training lab: the model sizes a live run may use,
its configs, tokens and FLOPs, and its time, estimated from a short calibration run of the same config
on this machine (cached per config, vocabulary band and device).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from attncore.errors import AttnInputError
from attncore.threads import single_threaded
from attncore.training import TrainConfig, TrainResult, train
from attncore.training.model import FUSED_VARIANTS

__all__ = [
    "Calibration",
    "Estimate",
    "MAX_JOB_TOKENS",
    "SIZES",
    "calibrate",
    "calibration_cached",
    "calibration_key",
    "calibrations_for",
    "estimate_seconds",
    "eval_points",
    "flops_per_token",
    "job_tokens",
    "make_configs",
    "vocab_band",
]


# Model sizes a live run may use: bounded so that a CPU run takes seconds to a few minutes.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 1, "n_head": 2, "d_model": 32, "context": 32, "batch": 8},
    "small": {"n_layer": 2, "n_head": 4, "d_model": 64, "context": 64, "batch": 16},
    "medium": {"n_layer": 3, "n_head": 4, "d_model": 128, "context": 64, "batch": 32},
}
MAX_JOB_TOKENS = 1_000_000  # training tokens per Run press, all runs together


def make_configs(variants: Sequence[str], lrs: Sequence[float], size: str, steps: int,
                 seed: int) -> list[TrainConfig]:
    """One TrainConfig per distinct (variant, learning rate), in that order; evaluation 20 times per run.

    The job's size (runs x steps x batch x context tokens) is checked against :data:`MAX_JOB_TOKENS`
    from the counts alone, before any config is built: AttnInputError when it is over (a URL can list
    thousands of entries; building their product first would exhaust the server's memory).
    """
    shape = SIZES[size]
    variants = list(dict.fromkeys(variants))  # a repeat would train the same run twice
    rates = list(dict.fromkeys(float(lr) for lr in lrs))
    runs = len(variants) * len(rates)
    tokens = runs * steps * shape["batch"] * shape["context"]
    if tokens > MAX_JOB_TOKENS:
        raise AttnInputError(f"That is {runs:,} runs and {tokens:,} training tokens; one Run may train at "
                             f"most {MAX_JOB_TOKENS:,}. Pick fewer steps, variants or rates, or a smaller "
                             "size.")
    return [TrainConfig(variant=v, lr=lr, steps=steps, warmup=min(100, steps // 10),
                        eval_every=max(1, steps // 20), seed=seed, **shape)
            for v in variants for lr in rates]


def job_tokens(configs: Sequence[TrainConfig]) -> int:
    """Training tokens of a job: steps x batch x context, summed over its runs."""
    return sum(c.steps * c.batch * c.context for c in configs)


def flops_per_token(config: TrainConfig | dict[str, Any], vocab: int = 100) -> float:
    """Rough forward + backward FLOPs per training token (3 x forward: matmuls and attention): a
    measure of a job's size (for caps), not of its time (see :func:`calibrate`)."""
    c = config.to_dict() if isinstance(config, TrainConfig) else config
    D, N, T = c["d_model"], c["n_layer"], c["context"]
    gate = {"gated": D, "gated_control": D, "gated_headwise": c["n_head"]}.get(c["variant"], 0)  # its width
    per_layer = 12 * D * D + D * gate
    forward = 2 * (N * per_layer + D * vocab) + 4 * N * T * D
    return 3.0 * forward


def eval_points(config: TrainConfig) -> int:
    """Evaluation points of a run: every ``eval_every`` steps, and the last step."""
    return config.steps // config.eval_every + (config.steps % config.eval_every != 0)


@dataclass(frozen=True)
class Calibration:
    """Times measured here by a short real training run of one model shape (see :func:`calibrate`).

    Attributes:
        step_s: one training step (median over the measured steps after the first).
        eval_s: one evaluation point (held-out loss and the saturation share).
        setup_s: the rest of a run: vocabulary, encoding, model and optimiser creation, the
            first step's warm-up.
        steps: the steps measured; ``device``: where; ``key``: what the calibration stands for.
    """

    step_s: float
    eval_s: float
    setup_s: float
    steps: int
    device: str
    key: tuple[Any, ...]


@dataclass(frozen=True)
class Estimate:
    """Seconds a job should take: per run, setup + steps x step time + evaluations x evaluation time."""

    seconds: float
    tokens: int
    calibrations: tuple[Calibration, ...]


CALIBRATION_STEPS = 6
_CALIBRATIONS: dict[tuple[Any, ...], Calibration] = {}
_CAL_LOCK = threading.Lock()
_MEASURING: dict[tuple[Any, ...], threading.Lock] = {}


_GATE_WIDTH = {"gated": "D", "gated_control": "D", "gated_headwise": "H"}  # the output gate's width


def calibration_key(config: TrainConfig, vocab: int, device: str,
                    train_fn: Callable[..., Any] = train) -> tuple[Any, ...]:
    """What a calibration stands for: device, model shape, vocabulary size (its :func:`vocab_band`), the
    attention path (torch's fused kernel or attncore's materialised one, the two speeds a variant can
    have) and the training function (the character model's ``train`` or another task's runner)."""
    c = config
    fn = f"{train_fn.__module__}.{train_fn.__qualname__}"
    return (device, c.n_layer, c.n_head, c.d_model, c.context, c.batch, vocab_band(vocab),
            c.variant in FUSED_VARIANTS, _GATE_WIDTH.get(c.variant, ""), fn)


def vocab_band(vocab: int) -> int:
    """The power of two at or above ``vocab`` (at least 32): a step's time depends on the vocabulary only
    through the embedding and output layer (d_model x vocab), so corpora whose vocabularies fall in one
    band share a calibration instead of timing new steps for every upload (issue 32 F11)."""
    band = 32
    while band < vocab:
        band *= 2
    return band


def calibrate(config: TrainConfig, text: str, device: str, steps: int = CALIBRATION_STEPS,
              train_fn: Callable[..., TrainResult] = train) -> Calibration:
    """Time ``steps`` real training steps of ``config``'s shape on ``text`` and ``device`` (with one
    CPU thread on a CPU, as live runs train), with one evaluation at the last step.

    The step time is the median interval between progress calls after the first step; the
    evaluation time is the last interval less one step; the setup time is what remains of
    the call's wall time. Cached for the process by :func:`calibration_key`; a second caller of the
    same key while it is measured waits for that measurement instead of timing steps of its own.
    """
    vocab = len(set(text))
    key = calibration_key(config, vocab, device, train_fn)
    with _CAL_LOCK:
        hit = _CALIBRATIONS.get(key)
        measuring = _MEASURING.setdefault(key, threading.Lock())
    if hit is not None:
        return hit
    with measuring:  # two sessions asking for the same calibration at once: one measures, one waits
        with _CAL_LOCK:
            hit = _CALIBRATIONS.get(key)
        return hit if hit is not None else _measure(config, text, device, steps, train_fn, key)


def _measure(config: TrainConfig, text: str, device: str, steps: int, train_fn: Callable[..., TrainResult],
             key: tuple[Any, ...]) -> Calibration:
    """One calibration measured (see :func:`calibrate`) and cached under ``key``."""
    n = max(3, int(steps))
    cfg = config.replace(steps=n, warmup=0, eval_every=n)
    marks: list[float] = []

    def progress(step: int, total: int, loss: float | None, val: float | None, probe: Any = None) -> None:
        if loss is not None:  # a runner's step-0 probe (no loss) belongs to the setup
            marks.append(time.perf_counter())

    ctx = single_threaded() if device.startswith("cpu") else contextlib.nullcontext()
    with ctx:
        t0 = time.perf_counter()
        train_fn(cfg, text, device=device, progress=progress)
        wall = time.perf_counter() - t0
    gaps = sorted(b - a for a, b in zip(marks[:-2], marks[1:-1], strict=False))  # steps 2..n-1
    step_s = gaps[len(gaps) // 2] if gaps else wall / n
    eval_s = max(0.0, (marks[-1] - marks[-2]) - step_s) if len(marks) >= 2 else 0.0
    setup_s = max(0.0, wall - n * step_s - eval_s)
    cal = Calibration(step_s, eval_s, setup_s, n, device, key)
    with _CAL_LOCK:
        _CALIBRATIONS[key] = cal
    return cal


def estimate_seconds(configs: Sequence[TrainConfig], calibrations: Sequence[Calibration], vocab: int,
                     device: str, train_fn: Callable[..., Any] = train) -> Estimate | None:
    """Time for ``configs`` (on ``device``, a corpus of ``vocab`` distinct characters, trained by
    ``train_fn``) from calibrations measured here (:func:`calibrate`): per run, setup + steps x
    step time + evaluation points x evaluation time. None when a config has no calibration."""
    by_key = {c.key: c for c in calibrations}
    total = 0.0
    used: list[Calibration] = []
    for c in configs:
        cal = by_key.get(calibration_key(c, vocab, device, train_fn))
        if cal is None:
            return None
        total += cal.setup_s + c.steps * cal.step_s + eval_points(c) * cal.eval_s
        if cal not in used:
            used.append(cal)
    return Estimate(total, job_tokens(configs), tuple(used))


def calibration_cached(config: TrainConfig, vocab: int, device: str,
                       train_fn: Callable[..., Any] = train) -> Calibration | None:
    """The calibration already measured for ``config``'s shape and path, if any."""
    with _CAL_LOCK:
        return _CALIBRATIONS.get(calibration_key(config, vocab, device, train_fn))


def calibrations_for(configs: Sequence[TrainConfig], text: str, device: str,
                     train_fn: Callable[..., Any] = train) -> list[Calibration]:
    """One :func:`calibrate` per distinct :func:`calibration_key` among ``configs`` (cached)."""
    vocab = len(set(text))
    seen: dict[tuple[Any, ...], Calibration] = {}
    for c in configs:
        key = calibration_key(c, vocab, device, train_fn)
        if key not in seen:
            seen[key] = calibrate(c, text, device, train_fn=train_fn)
    return list(seen.values())
