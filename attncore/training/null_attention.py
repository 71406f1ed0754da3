"""Experiment: a sink forms on the Bigram-Backcopy task, and what each fix does to it.

``python -m attncore.training.experiments null_attention --out DIR`` trains the character
transformer on Guo et al.'s Bigram-Backcopy task (:mod:`attncore.training.bbm`) with softmax
and each proposed fix (softmax1, a learned sink logit at two initial values, sigmoid with bias
-log n, an output gate, ReLU attention), for several seeds, probing it every ``eval_every``
steps; then, per trained model, hides BOS (the ablation) and runs StreamingLLM's cache test.
The result file holds every curve and number; :func:`summarise` turns its runs into per-variant
statistics over seeds and :func:`attncore.training.null_verdicts.verdicts` into sentences, each
computed by a stated rule from numbers with their standard errors (the app recomputes both from the
file, and for live runs).

Shape legend: ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attncore.errors import AttnInputError
from attncore.training import io as _io
from attncore.training.bbm import (
    EVAL_SEED,
    BigramBackcopy,
    Cancel,
    Progress,
    bbm_label,
    bbm_streaming,
    bos_ablation,
    eval_sequences,
)
from attncore.training.bbm_train import BBMResult, train_bbm
from attncore.training.config import TrainConfig
from attncore.training.io import load_model, save_model
from attncore.training.model import CharTransformer
from attncore.training.null_verdicts import table_rows, verdicts
from attncore.training.record import Recorder, format_table
from attncore.training.sink_stats import (  # the statistics live there; these names stay importable here
    COPY_TOL,
    KL_TOL,
    mean_se,
    run_facts,
    summarise,
)

__all__ = [
    "CLAIM",
    "COPY_TOL",
    "KL_TOL",
    "MODELS_DIR",
    "SHIPPED",
    "SIZES",
    "check_sizes",
    "mean_se",
    "models_dir",
    "shipped_model",
    "shipped_task",
    "slug",
    "TestedRun",
    "live_test_sizes",
    "run_null_attention",
    "summarise",
    "held_out_sets",
    "train_and_test",
]

MODELS_DIR = "null_attention_models"  # next to null_attention.json: the seed-0 model of every variant

_V = [dict(variant="standard"), dict(variant="softmax1"), dict(variant="sink_logit", sink_init=0.0),
      dict(variant="sink_logit", sink_init=-5.0), dict(variant="sigmoid"), dict(variant="gated"),
      dict(variant="relu")]

# "cpu": every variant x 3 seeds in about half an hour of one core of a 2-vCPU machine (each run
# about a minute); "gpu": Guo et al.'s width and sequence length, longer; "tiny": a smoke test.
SIZES: dict[str, dict[str, Any]] = {
    "cpu": {
        "config": dict(n_layer=1, n_head=1, d_model=64, context=64, batch=64, steps=600, warmup=50,
                       eval_every=50, lr=1e-2),
        "variants": _V, "seeds": 3, "ablation_seqs": 128, "stream_seqs": 16, "stream_len": 256, "window": 16,
    },
    "gpu": {
        "config": dict(n_layer=1, n_head=1, d_model=256, context=256, batch=128, steps=3000, warmup=100,
                       eval_every=50, lr=3e-3),
        "variants": _V, "seeds": 5, "ablation_seqs": 256, "stream_seqs": 32, "stream_len": 1024, "window": 64,
    },
    "tiny": {
        "config": dict(n_layer=1, n_head=1, d_model=16, context=16, batch=4, steps=6, warmup=2, eval_every=3,
                       lr=1e-2),
        "variants": _V, "seeds": 2, "ablation_seqs": 4, "stream_seqs": 2, "stream_len": 40, "window": 4,
    },
}

CLAIM = (
    "Attention sinks are a learned workaround for softmax's lack of a null option: a head that must "
    "sometimes do nothing still has to spend a weight of 1, so it learns to park it on the first token, "
    'whose value shrinks (a value-state drain). Guo et al. 2024 ("Active-Dormant Attention Heads: '
    'Mechanistically Demystifying Extreme-Token Phenomena in LLMs") show it on their Bigram-Backcopy '
    "task: in a 1-layer, 1-head, width-256 model the weight non-trigger positions put on BOS goes from "
    "0.03 at step 100 to 0.56 at step 300 and 0.78 at step 1,000 (numbers read from a figure-data file in "
    "their repository, not from the paper's text). A denominator term with no value behind"
    ' it (softmax1, Evan Miller 2023, "Attention Is Off By One"; a learned sink logit as in gpt-oss), an '
    "elementwise normaliser (sigmoid attention, Ramapuram et al. 2024; ReLU attention, Guo et al.) or an "
    'output gate (Qiu et al. 2025, "Gated Attention for Large Language Models") should remove the need '
    'for the sink. StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with Attention '
    'Sinks"): a sliding window fails once the sink is evicted.'
)


MODEL_NOTE = (
    "The app's CharTransformer: pre-LayerNorm, rotary positions, tied embeddings, a 4x GELU MLP (Guo et al. "
    "use learned absolute positions and an untied output). Rotary positions let the StreamingLLM test place "
    "cached keys at their slots, and the app's other pages already read this model."
)


# ---------------------------------------------------------------------------- the shipped models


def slug(label: str) -> str:
    """A folder name for a variant label ('sink logit b₀=-5' -> 'sink_logit_b0_m5')."""
    s = label.replace("₀", "0").replace("-", "m").replace(".", "p")
    return re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_").lower()


SHIPPED: dict[str, str] = {slug(bbm_label(c, with_seed=False)): bbm_label(c, with_seed=False)
                           for c in ({"seed": 0, **v} for v in _V)}
"""Folder name -> label of every variant whose seed-0 model the command saves (in the command's order)."""


def models_dir(directory: str | Path | None = None) -> Path:
    """Where the shipped models and the task live: ``directory/null_attention_models`` (default: the
    results shipped in this package)."""
    return Path(directory or _io.RESULTS_DIR) / MODELS_DIR


def shipped_task(directory: str | Path | None = None) -> BigramBackcopy:
    """The Bigram-Backcopy task the shipped models learned (rebuilt from its counts, no corpus needed)."""
    path = models_dir(directory) / "task.json"
    if not path.is_file():
        raise AttnInputError(f"no shipped Bigram-Backcopy task ({path.name}); make it with python -m "
                             "attncore.training.experiments null_attention --out DIR.")
    return BigramBackcopy.load(path)


def shipped_model(name: str, device: str | torch.device = "cpu",
                  directory: str | Path | None = None) -> CharTransformer:
    """The seed-0 model of the variant ``name`` (a key of :data:`SHIPPED`)."""
    if name not in SHIPPED:
        raise AttnInputError(f"no shipped model {name!r}; choose one of {', '.join(SHIPPED)}.")
    return load_model(models_dir(directory) / name, device)


# ---------------------------------------------------------------------------- the command


def _round(x: Any, digits: int = 5) -> Any:
    """Floats to ``digits`` significant digits, recursively (non-finite -> None)."""
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_round(v, digits) for v in x]
    return x


@dataclass(frozen=True)
class TestedRun:
    """A Bigram-Backcopy training run and the two tests on its model (None when it diverged or was stopped).

    Attributes:
        result: the training run.
        ablation: :func:`~attncore.training.bbm.bos_ablation` on held-out sequences.
        streaming: :func:`~attncore.training.bbm.bbm_streaming` on longer held-out sequences.
        test_s: seconds the two tests took.
    """

    result: BBMResult
    ablation: dict[str, Any] | None
    streaming: dict[str, Any] | None
    test_s: float

    @property
    def config(self) -> TrainConfig:
        """The run's settings."""
        return self.result.config

    def curves(self) -> dict[str, Any]:
        """The run's JSON-able part with the tests added."""
        return {**self.result.curves(), "ablation": self.ablation, "streaming": self.streaming,
                "test_s": self.test_s}


def held_out_sets(task: BigramBackcopy, context: int, sizes: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """The fixed held-out sequences of the two tests: (ablation_seqs, context + 1) and
    (stream_seqs, stream_len)."""
    ab = eval_sequences(task, context, n=int(sizes["ablation_seqs"]), seed=EVAL_SEED + 1)
    g = torch.Generator(device="cpu")
    g.manual_seed(EVAL_SEED + 2)
    return ab, task.sample(int(sizes["stream_seqs"]), int(sizes["stream_len"]), g)


def live_test_sizes(context: int) -> dict[str, int]:
    """The tests' sizes for a live run: 64 sequences for the ablation, 8 of 4 x the context streamed
    through a window of a quarter of the context."""
    return {"ablation_seqs": 64, "stream_seqs": 8, "stream_len": 4 * context, "window": max(1, context // 4)}


def train_and_test(config: TrainConfig, source: BigramBackcopy | str, *,
                   device: str | torch.device | None = None, progress: Progress | None = None,
                   cancel: Cancel | None = None, sizes: dict[str, Any] | None = None,
                   held_out: tuple[Tensor, Tensor] | None = None) -> TestedRun:
    """:func:`~attncore.training.bbm_train.train_bbm`, then (unless it diverged or was stopped) the BOS
    ablation and the streaming test with ``sizes`` (default :func:`live_test_sizes`) on ``held_out``
    sequences (default :func:`held_out_sets`)."""
    task = source if isinstance(source, BigramBackcopy) else BigramBackcopy.from_text(source)
    r = train_bbm(config, task, device=device, progress=progress, cancel=cancel)
    if r.diverged_at is not None or r.cancelled:
        return TestedRun(r, None, None, 0.0)
    t0 = time.perf_counter()
    sz = sizes or live_test_sizes(config.context)
    ab_ids, stream_ids = held_out or held_out_sets(task, config.context, sz)
    ab = bos_ablation(r.model, task, ab_ids)
    # learned absolute positions end at the context: no positions for the streamed tokens beyond it
    st = bbm_streaming(r.model, task, stream_ids, int(sz["window"])) if config.positions == "rotary" else None
    return TestedRun(r, ab, st, time.perf_counter() - t0)


def run_record(run: TestedRun) -> dict[str, Any]:
    """The JSON record of one run (no per-step batch losses: the evaluation points carry the curves)."""
    c = run.curves()
    keep = ("config", "vocab_size", "steps", "train_loss", "val_loss", "probes", "sink_step", "diverged_at",
            "final_train_loss", "final_val_loss", "tokens_per_s", "data_s", "eval_s", "wall_s", "device",
            "ablation", "streaming", "test_s")
    rec = {"name": c["label"], "label": bbm_label(run.config, with_seed=False), "variant": run.config.variant,
           **{k: c[k] for k in keep}}
    return _round(rec)


RUN_COLUMNS = ["variant", "seed", "BOS w (non-trigger)", "BOS w (trigger)", "first step > 0.3", "sink share",
               "nowhere (non-trigger)", "value ratio", "copy loss", "bigram excess", "ablation Δ (non-trig)",
               "window - window+BOS", "diverged at", "train s"]


def run_rows(runs: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per run (:data:`RUN_COLUMNS`), its numbers read at its sink head, rounded to 4 digits."""
    rows = []
    for r in runs:
        f = run_facts(r)
        keys = ("bos_other", "bos_trigger", "crossing", "sink_share", "nowhere_other", "value_ratio",
                "copy_loss", "bigram_excess", "ablation_bigram", "evict_bigram")
        rows.append([r["label"], r["config"]["seed"], *(_round(f.get(k), 4) for k in keys),
                     r.get("diverged_at"), r.get("wall_s")])
    return rows


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_null_attention(text: str, out: Path, rec: Recorder, sizes: dict[str, Any], device: torch.device,
                       seed: int = 0) -> dict[str, Any]:
    """Train every variant of ``sizes['variants']`` for ``sizes['seeds']`` seeds (``seed``, ``seed + 1``, ...)
    on the Bigram-Backcopy task of ``text``; probe, ablate and stream each; save the first seed's model of
    every variant and the task to ``out/null_attention_models``; write the summary and verdicts."""

    check_sizes(sizes)
    task = BigramBackcopy.from_text(text)
    base = TrainConfig(seed=seed, **sizes["config"])
    held_out = held_out_sets(task, base.context, sizes)
    models = out / MODELS_DIR
    task.save(models / "task.json")
    rec.doc["task"] = task.to_dict()
    rec.doc["model_note"] = MODEL_NOTE
    rec.seeds = [seed + k for k in range(int(sizes["seeds"]))]  # its own seeds, not the command's --seeds
    rec.doc["seeds"] = list(rec.seeds)
    for k in range(int(sizes["seeds"])):
        for changes in sizes["variants"]:
            cfg = base.replace(seed=seed + k, **changes)
            t0 = time.perf_counter()
            run = train_and_test(cfg, task, device=device, sizes=sizes, held_out=held_out)
            r = run.result
            record = run_record(run)
            rec.add(record)
            if k == 0 and r.diverged_at is None:
                r.model.meta = {"made_by": rec.doc["command"], "experiment": "null_attention",
                                "git_commit": rec.doc["git_commit"], "label": record["label"],
                                "seed": cfg.seed, "corpus": rec.doc["corpus"]["name"], "task": "bbm"}
                save_model(r.model.to("cpu"), models / slug(record["label"]))
            state = (f"diverged at {r.diverged_at}" if r.diverged_at else
                     f"BOS w {record['probes'][-1]['bos_other']} copy {record['probes'][-1]['copy_loss']}")
            took = time.perf_counter() - t0
            _log(f"  {record['name']}: {state} ({took:.0f} s, {r.tokens_per_s:.0f} tok/s)")
    summary = summarise(rec.doc["runs"])
    judged = verdicts(summary, int(sizes["window"]))
    cols, rows = table_rows(summary)
    print("\nnull_attention: per variant, mean ± standard error over seeds (final evaluation point)\n"
          + format_table(cols, rows))
    for label, lines in judged.items():
        print(f"\n{label}:\n  " + "\n  ".join(lines))
    return rec.finish(table={"columns": RUN_COLUMNS, "rows": run_rows(rec.doc["runs"])},
                      summary={"columns": cols, "rows": rows}, claim=CLAIM, finding=judged["overall"][0],
                      models=MODELS_DIR)


def check_sizes(sizes: dict[str, Any]) -> None:
    """AttnInputError for an unusable sizes entry (seeds, window, streaming length)."""
    T = int(sizes["config"]["context"])
    if not 1 <= int(sizes["seeds"]) <= 20:
        raise AttnInputError(f"run 1 to 20 seeds; got {sizes['seeds']}.")
    if not 1 <= int(sizes["window"]) < T or not T < int(sizes["stream_len"]) <= 16 * T:
        raise AttnInputError("the streaming window must lie below the context and the streamed sequences "
                             "between the context and 16 times it.")
