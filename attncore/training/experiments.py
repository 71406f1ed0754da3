"""The Training lab's three experiments; ``python -m attncore.training.experiments NAME --out DIR``.

NAME is ``lr_sweep`` (Graphcore's "Almost-scaled dot-product attention": standard vs fully
scaled attention over a learning-rate sweep), ``scaling`` (the "Why √d Matters" tutorial's
"When Scaling Matters Most" table, tested as its scaling-ablation exercise suggests:
standard vs unscaled at head dims 16, 64, 256), ``sinks`` (first-token sinks and the
StreamingLLM test for softmax, softmax1, a learned sink logit and gated attention),
``null_attention`` (a sink forms on Guo et al.'s Bigram-Backcopy task, and what each fix does
to it: its own module, :mod:`attncore.training.null_attention`) or ``all``. Each prints its
result table and writes ``DIR/NAME.json`` (every run's curves, the per-cell tables with mean
and sd over seeds, the comparisons of :mod:`attncore.training.verdicts`, the command, the
configs, the machine, the git commit, the wall time); ``lr_sweep`` also saves the first
seed's run of the best ``standard`` cell to ``DIR/causal_model``.

``--seeds 0,1,2`` trains several seeds: ``lr_sweep`` runs the first seed at every rate and
the others at each variant's best rate and its better neighbour (:func:`lrs_to_seed`);
``scaling`` and ``sinks`` run every cell at every seed. ``--resume`` keeps the runs of an
earlier ``DIR/NAME.json`` whose config is identical, after training the first of them again
and finding it bit-identical (else it stops, and the file is left as it was); the file lists
the kept runs and their commit. Training plans for :func:`device_train_budget` of the device
(CUDA: the GPU's memory), not the app's smaller budget for live runs. ``--scale cpu``
(default) is sized for a 2-core CPU; ``--scale gpu`` is nanoGPT's shakespeare-char setup
(6 x 384, context 256, dropout 0.2, 5,000 steps); ``--scale tiny`` is a smoke test.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attncore.budget import fmt_bytes
from attncore.device import resolve_device
from attncore.errors import AttnInputError
from attncore.training.config import TrainConfig, device_train_budget
from attncore.training.io import save_model
from attncore.training.measure import first_token_sinks, streaming_test
from attncore.training.null_attention import SIZES as NULL_SIZES
from attncore.training.null_attention import run_null_attention
from attncore.training.record import (
    Recorder,
    config_key,
    default_corpus,
    format_table,
    log,
    sig,
    train_logged,
)
from attncore.training.train import TrainResult, split_text
from attncore.training.verdicts import (
    LR_VARIANTS,
    MIN_SEEDS,
    NOT_DISTINGUISHABLE,
    Comparison,
    lr_sweep_analysis,
    scale_text,
    scaling_analysis,
    sink_heads,
    sinks_analysis,
    stats_of,
)

__all__ = ["CLAIMS", "EXPERIMENTS", "SIZES", "main", "run_lr_sweep", "run_scaling", "run_sinks"]


# Model sizes per scale. "cpu": the three experiments together take about 25-40 minutes of
# one core of a 2-vCPU machine; "gpu": larger models trained longer (minutes on one GPU).
SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "lr_sweep": {
            "config": dict(n_layer=3, n_head=4, d_model=128, context=64, batch=32, steps=500,
                           warmup=50, eval_every=50),
            "lrs": [round(10 ** x, 6) for x in (-3.5, -3.0, -2.5, -2.0, -1.5)],
        },
        "scaling": {
            "config": dict(n_layer=2, d_model=256, context=64, batch=32, steps=300, warmup=30,
                           eval_every=25, lr=2e-3),
            "d_heads": [16, 64, 256],
        },
        "sinks": {
            "config": dict(n_layer=3, n_head=4, d_model=128, context=64, batch=32, steps=600,
                           warmup=50, eval_every=50, lr=3e-3),
            "window": 32,
            "sink_windows": 16,
        },
    },
    # nanoGPT's shakespeare-char model (6 layers, 6 heads, width 384, context 256, batch 64,
    # dropout 0.2, 5,000 steps, lr 1e-3 decaying to 1e-4; its val ~1.47): without dropout this
    # size memorises tiny Shakespeare (val rose from 1.61 at step 750 to 3.87 at 2,500 on an H200).
    "gpu": {
        "lr_sweep": {
            "config": dict(n_layer=6, n_head=6, d_model=384, context=256, batch=64, steps=5000,
                           warmup=100, eval_every=250, dropout=0.2),
            "lrs": [round(10 ** x, 6) for x in (-3.5, -3.0, -2.5)],
        },
        "scaling": {
            "config": dict(n_layer=4, d_model=512, context=256, batch=64, steps=2000, warmup=100,
                           eval_every=100, lr=1e-3, dropout=0.2),
            "d_heads": [16, 64, 256],
        },
        "sinks": {
            "config": dict(n_layer=6, n_head=6, d_model=384, context=256, batch=64, steps=5000,
                           warmup=100, eval_every=250, lr=1e-3, dropout=0.2),
            "window": 128,
            "sink_windows": 32,
        },
    },
    # a smoke test of the whole pipeline in seconds (tests use it); its numbers mean nothing
    "tiny": {
        "lr_sweep": {
            "config": dict(n_layer=1, n_head=2, d_model=16, context=16, batch=4, steps=6, warmup=2,
                           eval_every=3),
            "lrs": [1e-3, 1e-2],
        },
        "scaling": {
            "config": dict(n_layer=1, d_model=32, context=16, batch=4, steps=6, warmup=2, eval_every=3),
            "d_heads": [4, 16],
        },
        "sinks": {
            "config": dict(n_layer=1, n_head=2, d_model=16, context=16, batch=4, steps=6, warmup=2,
                           eval_every=3, lr=1e-2),
            "window": 8,
            "sink_windows": 2,
        },
    },
}

SINK_VARIANTS = {"softmax": "standard", "softmax1": "softmax1", "sink_logit": "sink_logit", "gated": "gated"}
# The claim each experiment tests, citing what a reader can find (written into the result file).
CLAIMS: dict[str, str] = {
    "lr_sweep": (
        'Graphcore\'s "Almost-scaled dot-product attention" post: fully scaled attention (output x'
        " sqrt(T/e)) trained worse than standard attention on a Shakespeare character model: "
        "final training loss about 1.4 vs 1.2 at the best learning rate of a sweep."),
    "scaling": (
        'The "Scaled Attention: Why √d Matters" tutorial: without the 1/sqrt(d) scaling, attention '
        "logits grow like sqrt(d), softmax saturates (one weight near 1) and its gradients vanish; "
        'its "When Scaling Matters Most" table calls the scaling critical for a high d_k and less '
        "critical for a low one, so training without it should suffer more the larger the head dim. "
        "The comparison is the tutorial's scaling-ablation exercise (train with and without the "
        "scaling, compare learning curves)."),
    "sinks": (
        "Attention sinks are a learned workaround for softmax's lack of a null option (every "
        'query must spend a weight of 1); softmax1 (Evan Miller 2023, "Attention Is Off By One") '
        "or a denominator bias (a learned sink logit) should remove the need for them. "
        'StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with Attention '
        'Sinks"): a sliding window fails once the first tokens are evicted; keeping 4 of them '
        "restores it."),
}

# What the source says about its own run, beside which each verdict states this run's scale.
SOURCE_SETUP: dict[str, str] = {
    "lr_sweep": ("Graphcore's post: \"a small autoregressive character language model trained on "
                 "Shakespeare\", swept over learning rates; its size, steps and seeds are not stated; final "
                 "training loss about 1.2 (standard) and 1.4 (fully scaled), read from its figure."),
    "scaling": ("The tutorial states no experiment of its own: its \"When Scaling Matters Most\" table calls "
                "scaling critical for a high d_k and less critical for a low one, and its scaling-ablation "
                "exercise asks the reader to train with and without it and compare learning curves."),
    "sinks": ("StreamingLLM (Xiao et al. 2023): Llama-2, MPT, Falcon and Pythia models of 2.8B to 70B "
              "parameters, streaming up to 4 million tokens; attention sinks emerge in such trained models. "
              "Evan Miller's softmax1 post proposes the fix without a training run."),
}

# ---------------------------------------------------------------------------- seeds and cells


def _mean_sd(runs: list[dict[str, Any]], key: str, digits: int = 5) -> list[Any]:
    """[mean, sd] of ``key`` over a cell's converged runs (None where undefined), rounded."""
    s = stats_of(runs, key)
    if s is None:
        return [None, None]
    return [sig(s.mean, digits), sig(s.sd, digits) if s.sd is not None else None]


def _cmp_dicts(comparisons: dict[Any, Comparison | None]) -> dict[str, Any]:
    """JSON form of a mapping of comparisons."""
    return {str(k): (c.to_dict() if c is not None else None) for k, c in comparisons.items()}


def lrs_to_seed(first: dict[float, float | None]) -> list[float]:
    """The learning rates of one variant that get the extra seeds: its best rate by the first
    seed's final training loss, and the better of its neighbours in the sweep (the rate most
    likely to be best instead). ``first`` maps each rate to that loss (None: diverged)."""
    lrs = sorted(first)
    ok = [lr for lr in lrs if first[lr] is not None]
    if not ok:
        return []
    best = min(ok, key=lambda lr: (first[lr], lr))
    i = lrs.index(best)
    near = [lrs[j] for j in (i - 1, i + 1) if 0 <= j < len(lrs) and first[lrs[j]] is not None]
    if not near:
        return [best]
    return sorted([best, min(near, key=lambda lr: (first[lr], lr))])


# ---------------------------------------------------------------------------- experiment 1


def run_lr_sweep(text: str, out: Path, rec: Recorder, sizes: dict[str, Any], device: torch.device,
                 seed: int = 0) -> dict[str, Any]:
    """Graphcore's "Almost-scaled dot-product attention": final losses of standard, fully_scaled
    and fully_scaled_rows over a log-spaced learning-rate sweep at the first seed, then the
    other seeds at each variant's best rate and its better neighbour (:func:`lrs_to_seed`);
    the best cell per variant is the one with the lowest mean over all seeds. Saves the
    first seed's run of the best standard cell to ``out/causal_model``."""
    seeds = rec.seeds
    base = TrainConfig(**sizes["config"])
    variants = list(LR_VARIANTS)
    lrs = list(sizes["lrs"])
    cells: dict[tuple[str, float], list[dict[str, Any]]] = {}
    models: dict[float, Any] = {}

    def one(variant: str, lr: float, sd: int) -> None:
        cfg = base.replace(variant=variant, lr=lr, seed=sd)
        record, r = rec.run(cfg, f"{variant} lr={lr:g}", lr=lr)
        cells.setdefault((variant, lr), []).append(record)
        if r is not None and variant == "standard" and sd == seeds[0] and r.diverged_at is None:
            models[lr] = r.model.to("cpu")

    for variant in variants:
        for lr in lrs:
            one(variant, lr, seeds[0])
    seeded = {v: lrs_to_seed({lr: cells[(v, lr)][0]["final_train_loss"]
                              if cells[(v, lr)][0]["diverged_at"] is None else None for lr in lrs})
              for v in variants}
    for sd in seeds[1:]:
        for v in variants:
            for lr in seeded[v]:
                one(v, lr, sd)

    rows: list[list[Any]] = []
    for (v, lr), runs in cells.items():
        n_div = sum(r["diverged_at"] is not None for r in runs)
        rows.append([v, lr, len(runs), *_mean_sd(runs, "final_train_loss"), *_mean_sd(runs, "final_val_loss"),
                     *_mean_sd(runs, "best_val_loss"), n_div])
    analysis = lr_sweep_analysis(rec.doc)
    best: dict[str, dict[str, Any]] = {}
    for v, (lr, runs) in analysis.best.items():
        tr, va = stats_of(runs, "final_train_loss"), stats_of(runs, "final_val_loss")
        assert tr is not None and va is not None
        best[v] = {"lr": lr, "seeds": list(tr.seeds), "final_train_loss": sig(tr.mean),
                   "final_train_sd": sig(tr.sd) if tr.sd is not None else None,
                   "final_val_loss": sig(va.mean), "final_val_sd": sig(va.sd) if va.sd is not None else None}
    comparisons = _cmp_dicts(analysis.comparisons)
    model_dir = None
    if "standard" in best:
        lr = best["standard"]["lr"]
        first = cells[("standard", lr)][0]
        model_dir = _save_causal_model(rec, out, base.replace(variant="standard", lr=lr, seed=seeds[0]),
                                       models.get(lr), first)
    main_cmp = comparisons.get("fully_scaled vs standard")
    reproduces = None if main_cmp is None or not main_cmp["distinguishable"] else main_cmp["sign"] > 0
    finding = lr_sweep_finding(best, comparisons, sizes["config"], len(seeds))
    columns = ["variant", "lr", "seeds", "final train mean", "final train sd", "final val mean",
               "final val sd", "best val mean", "best val sd", "diverged runs"]
    sum_cols = ["variant", "best lr", "seeds", "final train mean", "final train sd", "final val mean",
                "final val sd"]
    summary = [[v, b["lr"], len(b["seeds"]), b["final_train_loss"], b["final_train_sd"], b["final_val_loss"],
                b["final_val_sd"]] for v, b in best.items()]
    print(f"\nlr_sweep: final losses (nats/char), {len(seeds)} seed(s) where seeded\n"
          + format_table(columns, rows))
    print("\nbest learning rate per variant (lowest mean final training loss over all seeds)\n"
          + format_table(sum_cols, summary))
    print("\n" + finding)
    return rec.finish(
        table={"columns": columns, "rows": rows},
        summary={"columns": sum_cols, "rows": summary},
        seeded_lrs=seeded,
        best=best,
        comparisons=comparisons,
        claim=CLAIMS["lr_sweep"],
        source_setup=SOURCE_SETUP["lr_sweep"],
        reproduces=reproduces,
        finding=finding,
        causal_model=model_dir,
    )


def _save_causal_model(rec: Recorder, out: Path, cfg: TrainConfig, model: Any, run: dict[str, Any]) -> str:
    """Save the app's causal model (the best standard cell's first-seed run) to ``out/causal_model``.

    A kept run has no model: the one on disk stays when it was made with the same config,
    else the run is trained again (the same seed gives the same weights)."""
    target = out / "causal_model"
    if model is None:
        try:
            on_disk = json.loads((target / "model.json").read_text(encoding="utf-8"))["config"]
            same = config_key(on_disk) == config_key(cfg)
        except (OSError, ValueError, KeyError, AttnInputError):
            same = False
        if same:
            return target.name
        model = train_logged(cfg, rec.text, rec.device, "causal model (again, for its weights)",
                              rec.budget).model
    model.meta = {
        "made_by": rec.doc["command"],
        "experiment": "lr_sweep",
        "git_commit": rec.doc["git_commit"],
        "corpus": rec.doc["corpus"]["name"],
        "lr": cfg.lr,
        "seed": cfg.seed,
        "final_train_loss": run["final_train_loss"],
        "final_val_loss": run["final_val_loss"],
    }
    return str(save_model(model.to("cpu"), target).name)


def lr_sweep_finding(best: dict[str, dict[str, Any]], comparisons: dict[str, Any], config: dict[str, Any],
                     n_seeds: int) -> str:
    """The sweep's verdict on the Graphcore post's claim in plain words (means over seeds)."""
    if "standard" not in best or "fully_scaled" not in best:
        return "Not enough runs converged to compare."
    s, f = best["standard"], best["fully_scaled"]
    c = comparisons.get("fully_scaled vs standard")
    head = (f"At this scale ({scale_text(config)}, {n_seeds} seed{'s' if n_seeds != 1 else ''} at the best "
            f"rates) the mean final training loss at each variant's best learning rate is "
            f"{s['final_train_loss']:.3f} for standard attention and {f['final_train_loss']:.3f} for fully "
            "scaled attention")
    if c is None:
        return head + "."
    word = {1: "fully scaled trains worse, the ordering the Graphcore post reports (1.2 vs 1.4 there)",
            -1: "fully scaled trains better, against the Graphcore post's ordering (1.2 vs 1.4 there)",
            0: f"the difference is {NOT_DISTINGUISHABLE}"}[c["sign"]] if c["enough_seeds"] else \
        f"too few seeds to decide (need {MIN_SEEDS})"
    return f"{head} (difference {c['diff']:+.3f}, 95% margin ±{(c['margin'] or 0):.3f}): {word}."


# ---------------------------------------------------------------------------- experiment 2


def run_scaling(text: str, out: Path, rec: Recorder, sizes: dict[str, Any], device: torch.device,
                seed: int = 0) -> dict[str, Any]:
    """The "Why √d Matters" tutorial's scaling ablation: standard vs unscaled attention at head
    dims 16, 64, 256 and the same total width, every cell at every seed; learning curves, the
    share of saturated rows and the query/key gradient norm during training."""
    width = sizes["config"]["d_model"]
    d_heads = list(sizes["d_heads"])
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for sd in rec.seeds:
        for d_head in d_heads:
            for variant in ("standard", "unscaled"):
                cfg = TrainConfig(variant=variant, n_head=width // d_head, **{**sizes["config"], "seed": sd})
                record, _ = rec.run(cfg, f"{variant} d_head={d_head}", d_head=d_head)
                cells.setdefault((variant, d_head), []).append(record)
    analysis = scaling_analysis(rec.doc)  # adds the second-half medians to the run records
    rows: list[list[Any]] = []
    for d_head in d_heads:
        for variant in ("standard", "unscaled"):
            runs = cells[(variant, d_head)]
            rows.append([variant, d_head, width // d_head, len(runs), *_mean_sd(runs, "final_train_loss"),
                         *_mean_sd(runs, "final_val_loss"), *_mean_sd(runs, "best_val_loss"),
                         *_mean_sd(runs, "saturated_second_half_median", 3),
                         *_mean_sd(runs, "qk_grad_second_half_median", 3),
                         sum(r["diverged_at"] is not None for r in runs)])
    comparisons = {"loss": _cmp_dicts(analysis.loss), "grad": _cmp_dicts(analysis.grad),
                   "gap_growth": _cmp_dicts(analysis.gap_growth), "gap_grows": analysis.gap_grows}
    finding = scaling_finding(comparisons, d_heads, sizes["config"], len(rec.seeds))
    columns = ["variant", "d_head", "heads", "seeds", "final train mean", "final train sd", "final val mean",
               "final val sd", "best val mean", "best val sd", "saturated (2nd half median) mean",
               "saturated sd", "|grad q,k| (2nd half median) mean", "|grad q,k| sd", "diverged runs"]
    print("\nscaling: standard vs unscaled at the same width\n" + format_table(columns, rows))
    print("\n" + finding)
    return rec.finish(
        table={"columns": columns, "rows": rows},
        comparisons=comparisons,
        claim=CLAIMS["scaling"],
        source_setup=SOURCE_SETUP["scaling"],
        gap_grows_with_d_head=comparisons["gap_grows"],
        finding=finding,
    )


def scaling_finding(comparisons: dict[str, Any], d_heads: list[int], config: dict[str, Any],
                    n_seeds: int) -> str:
    """The ablation's verdict in plain words (means over seeds, distinguishable or not)."""
    parts = []
    for d in d_heads:
        c = comparisons["loss"].get(str(d))
        if c is None:
            parts.append(f"d_head {d}: a run diverged")
            continue
        word = {1: "worse", -1: "better", 0: NOT_DISTINGUISHABLE}[c["sign"]] if c["enough_seeds"] else \
            "too few seeds"
        parts.append(f"d_head {d}: unscaled {c['b']['mean']:.3f} vs standard {c['a']['mean']:.3f} "
                     f"({c['diff']:+.3f} ± {(c['margin'] or 0):.3f}, {word})")
    grows = comparisons["gap_grows"]
    tail = {True: "The gap grows with every step up in head dim, as the tutorial's table predicts.",
            False: "The gap shrinks at one step up in head dim, against the tutorial's prediction.",
            None: f"Whether the gap grows at every step up in head dim is {NOT_DISTINGUISHABLE}."}[grows]
    return (f"At this scale ({scale_text(config)}, {n_seeds} seed{'s' if n_seeds != 1 else ''} per cell), "
            "final validation loss: " + "; ".join(parts) + ". " + tail)


# ---------------------------------------------------------------------------- experiment 3


def run_sinks(text: str, out: Path, rec: Recorder, sizes: dict[str, Any], device: torch.device,
              seed: int = 0) -> dict[str, Any]:
    """Null attention and attention sinks: first-token sink scores per layer and head after training, and the
    StreamingLLM test (window vs window + 4 first tokens vs full), for softmax, softmax1,
    a learned sink logit and gated attention, each at every seed."""
    base = TrainConfig(**sizes["config"])
    T = base.context
    cut = split_text(len(text), T)
    val = text[cut:]
    n_win = sizes["sink_windows"]
    step = max((len(val) - T) // n_win, 1)
    windows = [val[i * step : i * step + T] for i in range(n_win)]
    long_text = val[: 8 * T]

    def measure(r: TrainResult) -> dict[str, Any]:
        sm = first_token_sinks(r.model, windows)
        st = streaming_test(r.model, long_text, window=sizes["window"], sinks=4)
        return {"sink_alpha": [[sig(float(a), 4) for a in row] for row in sm.alpha],
                "sink_share": [sig(float(s), 4) for s in sm.share],
                "sink_alpha_uniform": sig(sm.alpha_uniform, 4), "sink_eps": sm.eps,
                "streaming": {k: (sig(v) if isinstance(v, float) else v) for k, v in st.to_dict().items()}}

    cells: dict[str, list[dict[str, Any]]] = {}
    for sd in rec.seeds:
        for label, variant in SINK_VARIANTS.items():
            record, _ = rec.run(base.replace(variant=variant, seed=sd), label, measure, label=label)
            cells.setdefault(label, []).append(record)
    for runs in cells.values():
        for r in runs:
            if r["diverged_at"] is None and "sink_alpha" in r:
                a = [v for row in r["sink_alpha"] for v in row]
                r["sink_heads"] = sink_heads(r)
                r["sink_alpha_mean"] = sig(sum(a) / len(a), 4)
                r["sink_alpha_max"] = sig(max(a), 4)
                for key in ("full_beyond", "window_beyond", "window_sinks_beyond"):
                    r[key] = r["streaming"][key]
    rows: list[list[Any]] = []
    for label, runs in cells.items():
        heads = [r.get("sink_heads") for r in runs if r.get("sink_heads") is not None]
        n_heads = base.n_layer * base.n_head
        rows.append([label, len(runs), *_mean_sd(runs, "final_val_loss"), *_mean_sd(runs, "best_val_loss"),
                     *_mean_sd(runs, "sink_alpha_mean", 3),
                     sig(max((r.get("sink_alpha_max") or 0.0) for r in runs), 3),
                     f"{sum(heads)}/{n_heads * len(heads)}", *_mean_sd(runs, "full_beyond"),
                     *_mean_sd(runs, "window_beyond"), *_mean_sd(runs, "window_sinks_beyond"),
                     sum(r["diverged_at"] is not None for r in runs)])
    base_alpha = first_token_sinks_baseline(T)
    analysis = sinks_analysis(rec.doc)
    comparisons = {"streaming": _cmp_dicts(analysis.streaming),
                   "val_vs_softmax": _cmp_dicts(analysis.val_vs_softmax)}
    finding = sinks_finding(cells, comparisons, base_alpha, sizes["config"], len(rec.seeds))
    columns = ["normaliser", "seeds", "final val mean", "final val sd", "best val mean", "best val sd",
               "mean alpha_0 mean", "mean alpha_0 sd", "max alpha_0 (any seed)",
               "sink heads (>0.3), all seeds",
               "full cache mean", "full cache sd", "window mean", "window sd", "window+4 sinks mean",
               "window+4 sinks sd", "diverged runs"]
    print(f"\nsinks: first-token sink score alpha_0 over {n_win} held-out windows of {T} characters; "
          f"StreamingLLM loss (nats/char) on {8 * T} characters, predictions past position {T}, "
          f"window {sizes['window']}\n" + format_table(columns, rows))
    print("\n" + finding)
    return rec.finish(
        table={"columns": columns, "rows": rows},
        comparisons=comparisons,
        claim=CLAIMS["sinks"],
        source_setup=SOURCE_SETUP["sinks"],
        alpha_uniform=sig(base_alpha, 4),
        sinks_formed=analysis.formed,
        finding=finding,
    )


def sinks_finding(cells: dict[str, list[dict[str, Any]]], comparisons: dict[str, Any], base_alpha: float,
                  config: dict[str, Any], n_seeds: int) -> str:
    """Plain-words verdict from the sinks runs (see :func:`run_sinks`)."""
    seeds = f"{n_seeds} seed{'s' if n_seeds != 1 else ''} per normaliser"
    text = (f"At this scale ({scale_text(config)}, {seeds}), uniform causal attention gives "
            f"alpha_0 = {base_alpha:.3f}. ")
    parts = []
    for label, runs in cells.items():
        done = [r for r in runs if r["diverged_at"] is None and "sink_heads" in r]
        if len(done) < len(runs):
            parts.append(f"{label}: {len(runs) - len(done)} of {len(runs)} runs diverged")
        if done:
            heads = sum(r["sink_heads"] for r in done)
            top = max(r["sink_alpha_max"] for r in done)
            parts.append(f"{label}: {heads} sink heads over {len(done)} models (largest alpha_0 {top:.3f})")
    text += "; ".join(parts) + ". "
    formed = any((r.get("sink_heads") or 0) > 0 for runs in cells.values() for r in runs)
    if not formed:
        below = all((r.get("sink_alpha_max") or 0.0) <= base_alpha for runs in cells.values() for r in runs)
        text += ("No head of any model became a first-token sink"
                 + (" (every head gives the first token less than uniform attention would)" if below else "")
                 + ", so softmax had no sinks for softmax1, the sink logit or the gate to remove, and the "
                 "StreamingLLM comparison cannot test the claim at this scale. ")
    else:
        text += "Sink heads formed (see the counts). "
    for label, c in comparisons["streaming"].items():
        if c is None:
            continue
        if c["sign"] == -1:
            text += f"Keeping the first 4 tokens lowers the windowed loss for {label} ({c['diff']:+.3f}). "
        elif c["sign"] == 1:
            text += f"Keeping the first 4 tokens raises the windowed loss for {label} ({c['diff']:+.3f}). "
    if all(c is None or c["sign"] == 0 for c in comparisons["streaming"].values()):
        text += ("Keeping the first 4 tokens changes no model's windowed loss distinguishably "
                 f"({NOT_DISTINGUISHABLE}). ")
    return text.strip()


def first_token_sinks_baseline(length: int) -> float:
    """alpha_0 under uniform causal attention over ``length`` tokens: the mean of 1/(i+1)."""
    return sum(1.0 / (i + 1) for i in range(length)) / length


EXPERIMENTS: dict[str, Callable[..., dict[str, Any]]] = {
    "lr_sweep": run_lr_sweep,
    "scaling": run_scaling,
    "sinks": run_sinks,
    "null_attention": run_null_attention,  # attncore.training.null_attention: a sink forms (Bigram-Backcopy)
}
for _scale, _sizes in NULL_SIZES.items():
    SIZES[_scale]["null_attention"] = _sizes


def parse_seeds(text: str) -> list[int]:
    """'0,1,2' or '0-2' -> [0, 1, 2] (distinct, in order); AttnInputError for anything else."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                seeds += list(range(int(lo), int(hi) + 1))
            else:
                seeds.append(int(part))
    except ValueError:
        raise AttnInputError(f"--seeds takes numbers like 0,1,2 or 0-2; got {text!r}.") from None
    if not seeds or len(set(seeds)) != len(seeds) or any(not 0 <= s < 2**31 - 2 for s in seeds):
        raise AttnInputError(f"--seeds needs distinct seeds in 0..{2**31 - 3}; got {text!r}.")
    return seeds


def _earlier(path: Path) -> dict[str, Any] | None:
    """The runs of an earlier result file to keep (``--resume``), or None when there is none."""
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AttnInputError(f"--resume cannot read {path}: {exc}") from exc
    return doc if isinstance(doc, dict) and isinstance(doc.get("runs"), list) else None


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m attncore.training.experiments",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("name", choices=[*EXPERIMENTS, "all"])
    p.add_argument("--out", required=True, type=Path, help="directory for NAME.json (and causal_model/)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="text file (default: ../shared/data/tinyshakespeare.txt)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--scale", choices=list(SIZES), default="cpu",
                   help="model sizes (cpu: under an hour on 2 cores; gpu: larger; tiny: a smoke test)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=None, help="one seed (the same as --seeds N)")
    p.add_argument("--seeds", default=None,
                   help="seeds, e.g. 0,1,2 or 0-2 (default 0): lr_sweep runs the first at every rate and the "
                        "others at each variant's best rate and its better neighbour; scaling and sinks run "
                        "every cell at every seed; null_attention runs its own number of seeds from the "
                        "first")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs of OUT/NAME.json whose config is identical, after retraining the "
                        "first of them and finding it bit-identical")
    args = p.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        seeds = parse_seeds(args.seeds) if args.seeds is not None else [args.seed or 0]
        if args.seeds is not None and args.seed is not None:
            raise AttnInputError("give --seed or --seeds, not both.")
    except AttnInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    corpus = args.corpus or default_corpus()
    try:
        text = corpus.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"cannot read the corpus {corpus}: {exc}", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    budget = device_train_budget(device)
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    command = "python -m attncore.training.experiments " + " ".join(
        a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    try:
        for name in names:
            sizes = SIZES[args.scale][name]
            log(f"{name} ({args.scale} scale on {device}, seeds {seeds}, memory budget "
                 f"{fmt_bytes(budget)}):")
            reuse = _earlier(args.out / f"{name}.json") if args.resume else None
            rec = Recorder(name, args.out, scale=args.scale, device=device, corpus=corpus, text=text,
                           sizes=sizes, command=command, seeds=seeds, reuse=reuse, budget=budget)
            doc = EXPERIMENTS[name](text, args.out, rec, sizes, device, seed=seeds[0])
            log(f"{name}: {doc['wall_s']:.0f} s, {rec.trained} runs trained -> {rec.path}")
    except AttnInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
