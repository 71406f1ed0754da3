"""Train the character transformer on a text: seeded, cancellable, with divergence detection.

Shape legend: ``B`` batch, ``T`` context (tokens per training sequence), ``V`` vocabulary,
``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.training.config import MAX_VOCAB, TrainConfig, check_train_budget
from attncore.training.model import CharTransformer

__all__ = [
    "SATURATION_THRESHOLD",
    "FinalLosses",
    "TrainResult",
    "TrainingLoop",
    "best_val",
    "build_vocab",
    "divergence_threshold",
    "encode_text",
    "make_optimizer",
    "saturated_share",
    "split_text",
    "train",
]

Progress = Callable[[int, int, float, float | None], None]
Cancel = Callable[[], bool]
Batch = Callable[[torch.Generator], tuple[Tensor, Tensor]]  # data generator -> inputs (B, T), targets (B, T)

SATURATION_THRESHOLD = 0.99  # a row whose max weight exceeds this counts as saturated
EVAL_TOKENS = 8192  # held-out tokens per evaluation point (fixed windows)
SATURATION_WINDOWS = 8  # held-out windows whose attention is inspected at each evaluation point
MAX_TEXT_CHARS = 50_000_000


class FinalLosses:
    """The last evaluation point's losses, for a result whose ``train_loss`` and ``val_loss`` lists are
    aligned with its evaluation steps (:class:`TrainResult`,
    :class:`~attncore.training.bbm_train.BBMResult`)."""

    train_loss: Sequence[float | None]
    val_loss: Sequence[float]

    @property
    def final_train_loss(self) -> float | None:
        """The last evaluation point's training loss (None when no point was made)."""
        return self.train_loss[-1] if self.train_loss else None

    @property
    def final_val_loss(self) -> float | None:
        """The last evaluation point's held-out loss (None when no point was made)."""
        return self.val_loss[-1] if self.val_loss else None


@dataclass(frozen=True)
class TrainResult(FinalLosses):
    """What a training run produced (lists are aligned with ``steps``; every value finite).

    Attributes:
        config: the run's settings.
        vocab: the characters (index = token id).
        steps: the evaluation steps (every ``eval_every`` steps and the last step run).
        train_loss: nats/char, the mean training batch loss since the previous evaluation point.
        val_loss: nats/char on fixed windows of the held-out last 10% of the text (the model in eval
            mode: no dropout).
        batch_loss: every step's training batch loss.
        saturated_share: share of attention rows (all layers and heads, rows i >= 1 of fixed
            held-out windows) whose max weight exceeds :data:`SATURATION_THRESHOLD`.
        saturated_share_by_layer: the same per layer (one list of N values per evaluation point).
        qk_grad_norm: L2 norm of the loss gradient on the query and key projections (all
            layers, before clipping) at each evaluation step.
        diverged_at: the first step whose loss was non-finite or above
            :func:`divergence_threshold`; training stopped there and that step is not in the lists.
        cancelled: ``cancel()`` stopped the run early.
        tokens_per_s: training tokens per second of training (evaluations excluded).
        wall_s: the whole call's wall time.
        device: where it ran.
        model: the trained model (in eval mode, on ``device``).
    """

    config: TrainConfig
    vocab: str
    steps: list[int]
    train_loss: list[float]
    val_loss: list[float]
    batch_loss: list[float]
    saturated_share: list[float]
    saturated_share_by_layer: list[list[float]]
    qk_grad_norm: list[float]
    diverged_at: int | None
    cancelled: bool
    tokens_per_s: float
    wall_s: float
    device: str
    model: CharTransformer = field(repr=False)

    @property
    def best_val_loss(self) -> float | None:
        """The lowest held-out loss of any evaluation point (None when no point was made)."""
        return best_val(self.steps, self.val_loss)[0]

    @property
    def best_val_step(self) -> int | None:
        """The step of :attr:`best_val_loss` (the earliest, on a tie)."""
        return best_val(self.steps, self.val_loss)[1]

    def curves(self) -> dict[str, object]:
        """The JSON-able part (no model): config, vocab, every list and number."""
        return {
            "config": self.config.to_dict(),
            "vocab_size": len(self.vocab),
            "steps": self.steps,
            "train_loss": self.train_loss,
            "val_loss": self.val_loss,
            "batch_loss": self.batch_loss,
            "saturated_share": self.saturated_share,
            "saturated_share_by_layer": self.saturated_share_by_layer,
            "qk_grad_norm": self.qk_grad_norm,
            "diverged_at": self.diverged_at,
            "cancelled": self.cancelled,
            "tokens_per_s": self.tokens_per_s,
            "wall_s": self.wall_s,
            "device": self.device,
            "final_train_loss": self.final_train_loss,
            "final_val_loss": self.final_val_loss,
            "best_val_loss": self.best_val_loss,
            "best_val_step": self.best_val_step,
        }


def best_val(steps: list[int], val_loss: list[float | None]) -> tuple[float | None, int | None]:
    """(lowest validation loss, its step) of a curve; the earliest step on a tie; (None, None) for none.

    A model whose validation loss rises while its training loss falls has begun to memorise
    the training text: the best point says where that began and how good the model was there.
    """
    points = [(v, s) for s, v in zip(steps, val_loss, strict=True) if v is not None and math.isfinite(v)]
    if not points:
        return None, None
    v, s = min(points, key=lambda p: (p[0], p[1]))
    return v, s


def _check_text(text: str) -> None:
    if not isinstance(text, str):
        raise AttnInputError("the corpus must be text (a str); decode a file before training on it.")
    if not text:
        raise AttnInputError("the corpus is empty.")
    if len(text) > MAX_TEXT_CHARS:
        raise AttnInputError(
            f"the corpus has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}."
        )
    if "\x00" in text:
        raise AttnInputError("the corpus looks binary (it contains NUL characters), not text.")
    sample = text[:100_000]
    control = sum(1 for c in sample if (ord(c) < 32 and c not in "\n\t\r\f") or c == "\ufffd")
    if control > 0.01 * len(sample):
        raise AttnInputError(
            "the corpus looks binary: more than 1% of its characters are control characters "
            "or undecodable bytes."
        )


def build_vocab(text: str) -> str:
    """The sorted distinct characters of ``text`` (checked: text, not binary, at most 1000 of them)."""
    _check_text(text)
    vocab = "".join(sorted(set(text)))
    if len(vocab) > MAX_VOCAB:
        raise AttnInputError(
            f"the corpus has {len(vocab)} distinct characters; the limit is {MAX_VOCAB} "
            "(one embedding row each)."
        )
    return vocab


def encode_text(text: str, vocab: str) -> Tensor:
    """Token ids (T,) int64 of ``text``; characters outside ``vocab`` -> AttnInputError naming them."""
    index = {c: i for i, c in enumerate(vocab)}
    missing = sorted({c for c in text if c not in index})
    if missing:
        shown = ", ".join(repr(c) for c in missing[:10])
        raise AttnInputError(
            f"{len(missing)} character(s) of the text are not in the model's vocabulary: {shown}."
        )
    return torch.tensor([index[c] for c in text], dtype=torch.int64)


def _split_fits(n: int, context: int) -> bool:
    cut = int(n * 0.9)
    return cut >= context + 1 and n - cut >= context + 1


def min_corpus_chars(context: int) -> int:
    """The fewest tokens :func:`split_text` accepts for ``context``: the smallest ``n`` whose 90/10
    split leaves ``context + 1`` tokens on both sides (found with the same test, so the number a
    message states is the one that is needed)."""
    n = 10 * max(int(context), 0)  # below this the validation tenth is shorter than context + 1
    while not _split_fits(n, context):
        n += 1
    return n


def split_text(n: int, context: int) -> int:
    """Where the 90/10 split of ``n`` tokens falls; both parts need ``context + 1`` tokens."""
    if not _split_fits(n, context):
        raise AttnInputError(
            f"the corpus has {n:,} characters: too short for a context of {context}. Training "
            f"keeps the last 10% for validation and each part needs {context + 1} characters, "
            f"so at least {min_corpus_chars(context):,} characters are needed."
        )
    return int(n * 0.9)


def divergence_threshold(vocab_size: int) -> float:
    """A loss above ``max(3 ln V, ln V + 5)`` (far worse than guessing uniformly) counts as diverged."""
    u = math.log(max(vocab_size, 2))
    return max(3.0 * u, u + 5.0)


def saturated_share(maps: list[Tensor], threshold: float = SATURATION_THRESHOLD) -> tuple[float, list[float]]:
    """Share of rows i >= 1 (row 0 sees one key) with max weight > ``threshold``.

    ``maps``: one (B, H, L, S) causal weight tensor per layer. Returns (all layers, per layer).
    """
    per_layer = []
    for w in maps:
        top = w[..., 1:, :].amax(dim=-1)  # (B, H, L-1)
        per_layer.append(float((top > threshold).double().mean()) if top.numel() else 0.0)
    overall = sum(per_layer) / len(per_layer) if per_layer else 0.0
    return overall, per_layer


def make_optimizer(model: CharTransformer, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW (betas 0.9, 0.95) at ``config.lr``, decaying the 2-D weights by ``config.weight_decay``
    and nothing else (norms, biases, per-head scalars)."""
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr, betas=(0.9, 0.95), eps=1e-8,
    )


def _lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to ``lr / 10``."""
    if cfg.warmup and step <= cfg.warmup:
        return cfg.lr * step / cfg.warmup
    span = max(cfg.steps - cfg.warmup, 1)
    frac = min(max(step - cfg.warmup, 0) / span, 1.0)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def _windows(data: Tensor, starts: Tensor, T: int) -> tuple[Tensor, Tensor]:
    """Input (B, T) and target (B, T) windows of ``data`` starting at ``starts`` (B,)."""
    idx = starts.to(data.device)[:, None] + torch.arange(T + 1, device=data.device)  # (B, T + 1)
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def _evaluate(model: CharTransformer, val: Tensor, starts: Tensor, cfg: TrainConfig) -> tuple[float, float,
                                                                                                 list[float]]:
    """Held-out loss over fixed windows, and the saturation share on the first few of them."""
    total, count = 0.0, 0
    for i in range(0, len(starts), cfg.batch):
        x, y = _windows(val, starts[i : i + cfg.batch], cfg.context)
        logits, _ = model(x)
        total += float(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum"))
        count += y.numel()
    # one window at a time: N maps of (1, H, T, T) at once, not SATURATION_WINDOWS of them
    sums: list[float] = []
    chosen = starts[:SATURATION_WINDOWS]
    for i in range(len(chosen)):
        x, _ = _windows(val, chosen[i : i + 1], cfg.context)
        _, maps = model(x, return_attn=True)
        _, layer_shares = saturated_share(maps)
        sums = [a + b for a, b in zip(sums, layer_shares, strict=True)] if sums else layer_shares
    per_layer = [v / len(chosen) for v in sums]
    return total / count, sum(per_layer) / len(per_layer), per_layer


class TrainingLoop:
    """The training loop :func:`train` and :func:`~attncore.training.bbm_train.train_bbm` share, and its
    records.

    The model is initialised from a generator seeded with ``config.seed``; batches come from
    ``data_gen``, seeded with ``config.seed + 1``; dropout masks from the device's global generator,
    seeded with ``config.seed + 2`` for the loop and restored afterwards (nothing is drawn, and nothing
    forked, without dropout). AdamW (:func:`make_optimizer`), gradient clipping at norm 1, linear
    warm-up then cosine decay to lr/10; a loss that is non-finite or above ``limit`` stops the loop.

    Attributes:
        model: the model (on ``device``; in eval mode after :meth:`run`).
        data_gen: the CPU generator batches are drawn from.
        opt: its optimiser.
        steps: the evaluation steps (:meth:`eval_point`).
        train_loss: mean training batch loss since the previous evaluation point (None when no step ran
            since).
        val_loss: ``evaluate``'s held-out loss at each evaluation step.
        batch_loss: every step's training batch loss.
        diverged_at: the first step whose loss was non-finite or above ``limit`` (not in the lists).
        cancelled: ``cancel()`` stopped the loop.
        train_s, data_s, eval_s: seconds in the steps' forward, backward and update; in drawing their
            batches (and setting the learning rate); in evaluation points.
    """

    def __init__(self, config: TrainConfig, vocab: str, device: torch.device, *, limit: float,
                 evaluate: Callable[[CharTransformer], float]) -> None:
        """``vocab``: the model's tokens (index = id); ``limit``: the divergence threshold
        (:func:`divergence_threshold`); ``evaluate(model)``: the held-out loss at an evaluation point
        (it may record more; it gets the model in eval mode, which is put back in training mode after)."""
        self.config, self.device, self.limit, self._evaluate = config, device, limit, evaluate
        gen = torch.Generator(device="cpu")
        gen.manual_seed(config.seed)
        self.model = CharTransformer.create(config, vocab, gen).to(device)
        self.data_gen = torch.Generator(device="cpu")
        self.data_gen.manual_seed(config.seed + 1)
        self.opt = make_optimizer(self.model, config)
        self.steps: list[int] = []
        self.train_loss: list[float | None] = []
        self.val_loss: list[float] = []
        self.batch_loss: list[float] = []
        self.diverged_at: int | None = None
        self.cancelled = False
        self.train_s = self.data_s = self.eval_s = 0.0
        self._since: list[float] = []

    def eval_point(self, step: int) -> float:
        """Evaluate at ``step``, record the point and return its held-out loss."""
        t0 = time.perf_counter()
        self.model.eval()  # no dropout masks: the model's own loss
        v = self._evaluate(self.model)
        self.model.train()
        self.steps.append(step)
        self.train_loss.append(sum(self._since) / len(self._since) if self._since else None)
        self.val_loss.append(v)
        self._since.clear()
        self.eval_s += time.perf_counter() - t0
        return v

    def run(
        self,
        batch: Batch,
        *,
        cancel: Cancel | None = None,
        on_step: Callable[[int, float, float | None], None] | None = None,
        before_clip: Callable[[CharTransformer], None] | None = None,
    ) -> None:
        """Steps 1 to ``config.steps``, with an evaluation point every ``eval_every`` steps and at the last.

        Args:
            batch: ``batch(data_gen)`` -> inputs (B, T) and targets (B, T) on the model's device.
            cancel: called before every step; True stops the loop.
            on_step: called after every step as ``on_step(step, batch_loss, val_loss)`` (``val_loss``
                None except at evaluation steps).
            before_clip: called after every backward pass, before clipping (to read the gradients).

        A loop that is cancelled or diverges ends with an evaluation point at the step reached (when a
        step ran since the last one).
        """
        cfg, model, opt = self.config, self.model, self.opt
        model.train()
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=cfg.dropout > 0):
            if cfg.dropout > 0:
                torch.manual_seed(cfg.seed + 2)
            step = 0
            for step in range(1, cfg.steps + 1):
                if cancel is not None and cancel():
                    self.cancelled = True
                    step -= 1
                    break
                t0 = time.perf_counter()
                for g in opt.param_groups:
                    g["lr"] = _lr_at(step, cfg)
                x, y = batch(self.data_gen)
                t1 = time.perf_counter()
                self.data_s += t1 - t0
                logits, _ = model(x)
                loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
                value = float(loss.detach())
                if not math.isfinite(value) or value > self.limit:
                    self.diverged_at = step
                    self.train_s += time.perf_counter() - t1
                    step -= 1
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if before_clip is not None:
                    before_clip(model)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                self.train_s += time.perf_counter() - t1
                self.batch_loss.append(value)
                self._since.append(value)
                v = self.eval_point(step) if step % cfg.eval_every == 0 or step == cfg.steps else None
                if on_step is not None:
                    on_step(step, value, v)
        if (self.cancelled or self.diverged_at is not None) and self._since:
            self.eval_point(step)
        model.eval()


def train(
    config: TrainConfig,
    text: str,
    *,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    max_bytes: int | None = None,
) -> TrainResult:
    """Train a :class:`CharTransformer` with ``config`` on ``text`` (characters as tokens).

    The first 90% of the text trains, the last 10% validates. AdamW (betas 0.9, 0.95),
    gradient clipping at norm 1, linear warm-up then cosine decay to lr/10. Every random
    draw (initialisation, batch positions, dropout masks) comes from generators seeded with
    ``config.seed``, so the same config, text and device give the same curves.

    Args:
        config: the run's settings (validated on construction).
        text: the corpus; empty, binary or too short -> AttnInputError.
        device: where to train (default: ``attncore.resolve_device("auto")``).
        progress: called after every step as ``progress(step, total, batch_loss, val_loss)``
            (``val_loss`` is None except at evaluation steps).
        cancel: called before every step; True stops the run (``cancelled=True``), which
            returns what it has, with an evaluation point at the step reached.
        max_bytes: the memory budget of the run (default: the app's
            :data:`~attncore.training.config.MAX_TRAIN_BYTES`; the experiments command passes
            :func:`~attncore.training.config.device_train_budget` of its device).

    Raises:
        AttnInputError: bad corpus; ResourceLimitError: the run would not fit in memory.
    """
    t_start = time.perf_counter()
    vocab = build_vocab(text)
    check_train_budget(config, len(vocab), max_bytes)
    dev = resolve_device(device)
    data_cpu = encode_text(text, vocab)
    cut = split_text(len(data_cpu), config.context)
    train_data, val_data = data_cpu[:cut].to(dev), data_cpu[cut:].to(dev)
    T = config.context
    n_val_windows = min(max(4, math.ceil(EVAL_TOKENS / T)), len(val_data) - T)
    val_starts = torch.linspace(0, len(val_data) - T - 1, n_val_windows).round().to(torch.int64)
    D = config.d_model

    sat: list[float] = []
    sat_layer: list[list[float]] = []
    gnorm: list[float] = []
    last_qk = 0.0

    def evaluate(model: CharTransformer) -> float:
        v, share, per_layer = _evaluate(model, val_data, val_starts, config)
        sat.append(share)
        sat_layer.append(per_layer)
        gnorm.append(last_qk)
        return v

    def batch(gen: torch.Generator) -> tuple[Tensor, Tensor]:
        starts = torch.randint(0, len(train_data) - T, (config.batch,), generator=gen)
        return _windows(train_data, starts, T)

    def note_qk(model: CharTransformer) -> None:
        nonlocal last_qk
        qk = torch.stack([blk.attn.qkv.weight.grad[: 2 * D].norm() for blk in model.blocks])
        last_qk = float(qk.norm())

    def on_step(step: int, loss: float, v: float | None) -> None:
        if progress is not None:
            progress(step, config.steps, loss, v)

    loop = TrainingLoop(config, vocab, dev, limit=divergence_threshold(len(vocab)), evaluate=evaluate)
    loop.run(batch, cancel=cancel, on_step=on_step, before_clip=note_qk)
    step_s = loop.train_s + loop.data_s
    return TrainResult(
        config=config,
        vocab=vocab,
        steps=loop.steps,
        train_loss=cast(list[float], loop.train_loss),  # every point here follows a step: never None
        val_loss=loop.val_loss,
        batch_loss=loop.batch_loss,
        saturated_share=sat,
        saturated_share_by_layer=sat_layer,
        qk_grad_norm=gnorm,
        diverged_at=loop.diverged_at,
        cancelled=loop.cancelled,
        tokens_per_s=len(loop.batch_loss) * config.batch * T / step_s if step_s > 0 else 0.0,
        wall_s=time.perf_counter() - t_start,
        device=str(dev),
        model=loop.model,
    )
