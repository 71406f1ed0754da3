"""Training the character transformer on the Bigram-Backcopy task (:mod:`attncore.training.bbm`): the
training loop with a probe of fixed held-out sequences at every evaluation point, and its result (the
curves, the probes, the first step a sink head formed).

Shape legend as in :mod:`attncore.training.bbm`: ``B`` sequences, ``T`` positions, ``V`` vocabulary,
``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.training.bbm import (
    MIN_CONTEXT,
    BigramBackcopy,
    Cancel,
    Progress,
    bbm_label,
    eval_sequences,
    first_crossing,
    probe,
)
from attncore.training.config import TrainConfig, check_train_budget
from attncore.training.model import CharTransformer
from attncore.training.train import FinalLosses, TrainingLoop, divergence_threshold

__all__ = [
    "BBMResult",
    "check_bbm_config",
    "train_bbm",
]


def _sink_head(p: dict[str, Any]) -> float | None:
    """The largest BOS weight from non-trigger positions over every layer and head."""
    vals = [v for row in p["bos_other"] if row is not None for v in row]
    return max(vals) if vals else None


@dataclass(frozen=True)
class BBMResult(FinalLosses):
    """A training run on the Bigram-Backcopy task (lists aligned with ``steps``).

    Attributes:
        config: the run's settings.
        task: the task it learned.
        steps: the evaluation steps (every ``eval_every`` steps, the last step run; step 0 is the
            untrained model).
        train_loss: mean training batch loss since the previous evaluation point (step 0: None).
        val_loss: the held-out loss (:func:`probe`'s ``loss``).
        batch_loss: every step's training batch loss.
        probes: :func:`probe`'s dict at each evaluation step.
        diverged_at: the first step whose loss was non-finite or above
            :func:`~attncore.training.train.divergence_threshold`; training stopped there.
        cancelled: ``cancel()`` stopped the run.
        tokens_per_s: training tokens per second of training (evaluations and data excluded).
        data_s, eval_s, wall_s: seconds spent sampling batches, probing, and in the whole call.
        device: where it ran.
        model: the trained model (eval mode).
    """

    config: TrainConfig
    task: BigramBackcopy
    steps: list[int]
    train_loss: list[float | None]
    val_loss: list[float]
    batch_loss: list[float]
    probes: list[dict[str, Any]]
    diverged_at: int | None
    cancelled: bool
    tokens_per_s: float
    data_s: float
    eval_s: float
    wall_s: float
    device: str
    model: CharTransformer = field(repr=False)

    @property
    def sink_step(self) -> int | None:
        """The first evaluation step at which a head's BOS weight from non-trigger positions exceeds 0.3."""
        return first_crossing(self.steps, [_sink_head(p) for p in self.probes])

    def curves(self) -> dict[str, Any]:
        """The JSON-able part (no model)."""
        return {
            "task": "bbm", "label": bbm_label(self.config), "config": self.config.to_dict(),
            "bbm": self.task.to_dict(), "vocab_size": self.task.size,
            "steps": self.steps, "train_loss": self.train_loss, "val_loss": self.val_loss,
            "batch_loss": self.batch_loss, "probes": self.probes, "sink_step": self.sink_step,
            "diverged_at": self.diverged_at, "cancelled": self.cancelled,
            "tokens_per_s": self.tokens_per_s, "data_s": self.data_s, "eval_s": self.eval_s,
            "wall_s": self.wall_s, "device": self.device,
            "final_train_loss": self.final_train_loss, "final_val_loss": self.final_val_loss,
        }


def check_bbm_config(config: TrainConfig) -> None:
    """:class:`AttnInputError` when the context leaves no room for triggers to copy."""
    if config.context < MIN_CONTEXT:
        raise AttnInputError(f"the Bigram-Backcopy task needs sequences of at least {MIN_CONTEXT} tokens "
                             f"(BOS, a token, a trigger and its copy, and room for more); got a context of "
                             f"{config.context}.")


def train_bbm(
    config: TrainConfig,
    source: BigramBackcopy | str,
    *,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> BBMResult:
    """Train a :class:`CharTransformer` with ``config`` on the Bigram-Backcopy task of ``source``
    (a task, or a corpus to build it from).

    Fresh sequences of ``context + 1`` tokens every step, drawn from a generator seeded with
    ``config.seed + 1`` (initialisation: ``config.seed``; dropout, if the config sets one:
    ``config.seed + 2``); the loop, optimiser, schedule, clipping and divergence test are
    :func:`attncore.training.train`'s (:class:`~attncore.training.train.TrainingLoop`). Evaluation
    points at step 0 and every ``eval_every`` steps probe the fixed held-out sequences
    (:func:`eval_sequences`) with the model in eval mode.

    Args:
        progress: called after every step as ``progress(step, total, batch_loss, val_loss, probe)``
            (the last two None except at evaluation steps), and once before the first step with
            ``step = 0`` and ``batch_loss = None`` (the untrained model's probe).
        cancel: called before every step; True stops the run (``cancelled=True``) with an
            evaluation point at the step reached.
    """
    t_start = time.perf_counter()
    task = source if isinstance(source, BigramBackcopy) else BigramBackcopy.from_text(source)
    check_bbm_config(config)
    check_train_budget(config, task.size)
    dev = resolve_device(device)
    T = config.context
    held_out = eval_sequences(task, T)
    probes: list[dict[str, Any]] = []

    def evaluate(model: CharTransformer) -> float:
        p = probe(model, task, held_out)
        probes.append(p)
        return float(p["loss"])

    def batch(gen: torch.Generator) -> tuple[Tensor, Tensor]:
        seqs = task.sample(config.batch, T + 1, gen).to(dev)  # (B, T + 1)
        return seqs[:, :-1], seqs[:, 1:]

    def on_step(step: int, loss: float, v: float | None) -> None:
        if progress is not None:
            progress(step, config.steps, loss, v, probes[-1] if v is not None else None)

    loop = TrainingLoop(config, task.vocab, dev, limit=divergence_threshold(task.size), evaluate=evaluate)
    v0 = loop.eval_point(0)
    if progress is not None:
        progress(0, config.steps, None, v0, probes[-1])
    loop.run(batch, cancel=cancel, on_step=on_step)
    return BBMResult(
        config=config, task=task, steps=loop.steps, train_loss=loop.train_loss, val_loss=loop.val_loss,
        batch_loss=loop.batch_loss, probes=probes, diverged_at=loop.diverged_at, cancelled=loop.cancelled,
        tokens_per_s=len(loop.batch_loss) * config.batch * T / loop.train_s if loop.train_s > 0 else 0.0,
        data_s=loop.data_s, eval_s=loop.eval_s, wall_s=time.perf_counter() - t_start, device=str(dev),
        model=loop.model,
    )
