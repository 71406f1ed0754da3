"""Experiment: a sink forms on the Bigram-Backcopy task, and what each fix does to it.

``python -m attncore.training.experiments null_attention --out DIR`` trains the character
transformer on Guo et al.'s Bigram-Backcopy task (:mod:`attncore.training.bbm`) with softmax
and each proposed fix (softmax1, a learned sink logit at two initial values, sigmoid with bias
-log n, an output gate, ReLU attention), for several seeds, probing it every ``eval_every``
steps; then, per trained model, hides BOS (the ablation) and runs StreamingLLM's cache test.
The result file holds every curve and number; :func:`summarise` turns its runs into per-variant
statistics over seeds and :func:`verdicts` into sentences, each computed by a stated rule from
numbers with their standard errors (the app recomputes both from the file, and for live runs).

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
    BBMResult,
    BigramBackcopy,
    Cancel,
    Progress,
    bbm_label,
    bbm_streaming,
    bos_ablation,
    eval_sequences,
    train_bbm,
)
from attncore.training.config import TrainConfig
from attncore.training.io import load_model, save_model
from attncore.training.model import CharTransformer
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
    "MATTERS",
    "MODELS_DIR",
    "SHIPPED",
    "SIZES",
    "Z",
    "check_sizes",
    "mean_se",
    "mean_se_text",
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
    "verdicts",
]

MODELS_DIR = "null_attention_models"  # next to null_attention.json: the seed-0 model of every variant
Z = 2.0  # a difference counts when it exceeds Z standard errors
MATTERS = 0.01  # nats: ... and this much loss

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


# ---------------------------------------------------------------------------- verdicts


def _digits(s: dict[str, Any], digits: int) -> int:
    """Decimals to print: ``digits``, or more where the standard error is smaller (to its first
    significant digit, at most 3 more), so that two means a rule tells apart print apart."""
    se = s.get("se")
    if se is None or se <= 0 or not math.isfinite(se):
        return digits
    return min(digits + 3, max(digits, -math.floor(math.log10(se))))


def _pm(s: dict[str, Any], digits: int = 2) -> str:
    """'0.62 ± 0.04' (mean ± standard error over seeds), or '0.62' with one seed."""
    if s["mean"] is None:
        return "no number"
    if _se_too_small(s, digits):
        return f"{s['mean']:.2g} ± {s['se']:.1g}"
    d = _digits(s, digits)
    m = round(s["mean"], d) + 0.0  # + 0.0: no "-0.000"
    if s["se"] is None:
        return f"{m:.{d}f}"
    return f"{m:.{d}f} ± {s['se']:.{d}f}"


def mean_se_text(s: dict[str, Any], digits: int = 2) -> str:
    """A summary entry as the verdicts print it: '0.90 ± 0.07', '0.0003 ± 0.0001', '7.7e-06 ± 4e-06'."""
    return _pm(s, digits)


def _se_too_small(s: dict[str, Any], digits: int) -> bool:
    """True where a non-zero standard error would print as 0 at the most decimals _digits allows."""
    se = s.get("se")
    return se is not None and se > 0 and math.isfinite(se) and round(se, digits + 3) == 0


ONE_SEED = "one seed, so no standard error and no verdict"


def _differs(a: dict[str, Any], b: dict[str, Any], floor: float = 0.0) -> int | None:
    """1 if a's mean exceeds b's by more than Z combined standard errors (and ``floor``), -1 if it is
    below by as much, 0 otherwise; None without two standard errors (fewer than 2 seeds)."""
    if a["mean"] is None or b["mean"] is None or a["se"] is None or b["se"] is None:
        return None
    d = a["mean"] - b["mean"]
    se = math.sqrt(a["se"] ** 2 + b["se"] ** 2)
    if abs(d) > max(Z * se, floor):
        return 1 if d > 0 else -1
    return 0


def _above(s: dict[str, Any], level: float, floor: float = 0.0) -> int | None:
    """1 if the mean exceeds ``level`` by more than Z standard errors (and ``floor``), -1 if below by
    as much, 0 otherwise; None without a standard error."""
    if s["mean"] is None or s["se"] is None:
        return None
    d = s["mean"] - level
    if abs(d) > max(Z * s["se"], floor):
        return 1 if d > 0 else -1
    return 0


def _steps(crossings: list[int | None]) -> str:
    got = sorted(c for c in crossings if c is not None)
    if not got:
        return ""
    return f"step {got[0]}" if len(set(got)) == 1 else f"steps {got[0]}–{got[-1]}"


def _end_words(s: dict[str, Any]) -> str:
    """'over the last 3 evaluation points (steps 500–600)' for a summary's end weight."""
    st = s.get("end_steps") or []
    if len(st) > 1:
        return f"over the last {len(st)} evaluation points (steps {st[0]}–{st[-1]})"
    return f"at the last evaluation point (step {st[0]})" if st else "at the end"


def sink_sentence(s: dict[str, Any]) -> str:
    """Whether this variant formed a sink (rule: the BOS weight from non-trigger positions, averaged over
    the last :data:`~attncore.training.sink_stats.LAST_POINTS` evaluation points, above 0.3 in every
    usable seed = forms; in none = does not; else in k of n; a seed whose weight crossed 0.3 earlier and
    ended at or below it had a transient sink)."""
    n, k, bo, bt = s["n_usable"], s["n_sink"], s.get("bos_end", s["bos_other"]), s["bos_trigger"]
    where = (f"non-trigger positions put {_pm(bo)} of their weight on BOS {_end_words(s)}, trigger "
             f"positions {_pm(bt, 3)} at the last")
    seeds = f"{n} seed" if n == 1 else f"{n} seeds"
    if n == 0:
        return f"{s['label']}: no run finished without diverging, so there is nothing to judge."
    if k == n:
        first = [c for c in s["crossings"] if c is not None]
        when = f" by {_steps(first)}" if first else ""
        return f"{s['label']} forms a sink in {k} of {seeds}{when}: {where}."
    transient = s.get("n_transient", s["n_crossed"] - k)
    tail = ""
    if transient > 0:
        tail = (f" {transient} seed{'s' if transient != 1 else ''} crossed 0.3 on the way "
                f"({_steps(s['crossings'])}) and ended at or below it: a transient sink.")
    if k == 0:
        return f"{s['label']} does not form a sink (0 of {seeds} above 0.3 at the end): {where}.{tail}"
    return f"{s['label']} forms a sink in {k} of {seeds} only: {where}.{tail}"


def learned_sentence(s: dict[str, Any]) -> str:
    """Whether the task was learned (rule: copy loss <= 0.05 nats and the bigram loss within 0.05 nats
    of the bigram entropy, measured as the mean KL divergence from the true rows)."""
    n, k = s["n_usable"], s["n_learned"]
    nums = (f"copy loss {_pm(s['copy_loss'], 3)} nats, 0 at best; at the other positions its predictions are "
            f"{_pm(s['bigram_excess'], 3)} nats from the true bigram rows, as a mean KL divergence: their "
            f"entropy averages {_pm(s['bigram_entropy'], 3)}, the held-out loss there is "
            f"{_pm(s['bigram_loss'], 3)}")
    div = "".join(f" Seed {seed} diverged at step {at}." for seed, at in s["diverged"])
    if n == 0:
        return f"{s['label']}: every seed diverged.{div}"
    return f"{s['label']} learned the task in {k} of {n} seed{'s' if n != 1 else ''} ({nums}).{div}"


def compare_sentence(s: dict[str, Any], soft: dict[str, Any]) -> str:
    """Rule: a fix's BOS weight differs from softmax's when the means differ by more than Z combined
    standard errors."""
    c = _differs(s["bos_other"], soft["bos_other"])
    a, b = _pm(s["bos_other"]), _pm(soft["bos_other"])
    if c is None:
        return f"Its BOS weight from non-trigger positions is {a} against softmax's {b} ({ONE_SEED})."
    return {-1: f"Its BOS weight from non-trigger positions is lower than softmax's ({a} vs {b}), by more "
                f"than {Z:g} standard errors.",
            1: f"Its BOS weight from non-trigger positions is higher than softmax's ({a} vs {b}), by more "
               f"than {Z:g} standard errors.",
            0: f"Its BOS weight from non-trigger positions ({a}) is not distinguishable from softmax's ({b}) "
               f"at {Z:g} standard errors."}[c]


def nowhere_sentence(s: dict[str, Any]) -> str:
    """Rule: a head attends to nothing when non-trigger positions send more than half their weight nowhere
    (by Z standard errors), and reads where it is needed when trigger positions send less (and not more
    than half)."""
    nw, nt = s["nowhere_other"], s["nowhere_trigger"]
    head = f"Non-trigger positions send {_pm(nw)} of their weight nowhere (trigger positions {_pm(nt)}): "
    up = _above(nw, 0.5)
    if up is None:
        return head + f"{ONE_SEED}."
    if up <= 0:
        return head + "the head does not send most of its weight nowhere."
    if _above(nt, 0.5) != 1 and _differs(nw, nt) == 1:
        return head + "the head attends to nothing where it is not needed, and reads where it is."
    tail = "most of every row's weight goes nowhere, trigger positions included"
    if s["variant"] == "relu":
        tail += " (with ReLU ÷ nᵢ a row's total stays small; what the head reads is in the few weights left)"
    return head + tail + "."


def gate_sentence(s: dict[str, Any]) -> str:
    """Rule: the gate closes where the head is not needed when its mean at non-trigger positions is below
    its mean at trigger positions by more than Z combined standard errors."""
    go, gt = s["gate_other"], s["gate_trigger"]
    c = _differs(go, gt)
    head = f"The gate is {_pm(go)} at non-trigger positions against {_pm(gt)} at trigger positions: "
    if c is None:
        return head + f"{ONE_SEED}."
    return head + {-1: "it closes where the head is not needed.", 1: "it is more open where the head is not "
                   "needed.", 0: "no difference at this precision."}[c]


def value_sentence(s: dict[str, Any]) -> str:
    """The value-state drain: BOS's value norm over the mean value norm, against 1; called a drain only
    where the variant has a sink to drain (in some seed), else just smaller."""
    v = s["value_ratio"]
    c = _above(v, 1.0)
    head = f"BOS's value norm is {_pm(v)} times the mean value norm: "
    if c is None:
        return head + f"{ONE_SEED}."
    low = ("a value-state drain (BOS writes less than a typical token)." if s.get("n_sink") else
           "smaller than a typical token's, but with no sink there is nothing for it to drain.")
    return head + {-1: low, 1: "larger than a typical token's.",
                   0: "not distinguishable from a typical token's."}[c]


def _effect(s: dict[str, Any], big: str, small_word: str, none: str, neg: str) -> str:
    """The rule for a loss change: ``big`` when it exceeds Z standard errors and :data:`MATTERS` nats,
    a measurable but small change when it exceeds Z standard errors only, ``none`` within them,
    ``neg`` when it falls by more than both."""
    c = _above(s, 0.0, MATTERS)
    if c is None:
        return f"{ONE_SEED}."
    if c:
        return big if c > 0 else neg
    if _above(s, 0.0) in (1, -1):
        return (f"a change beyond {Z:g} standard errors but under {MATTERS:g} nats: {small_word}.")
    return none


def ablation_sentence(s: dict[str, Any]) -> str:
    """Rule: hiding BOS matters when the loss rises by more than Z standard errors and 0.01 nats."""
    a, b = s["ablation_bigram"], s["ablation_copy"]
    head = (f"Hiding BOS from every query changes the loss at non-trigger positions by {_signed(a)} nats "
            f"(trigger positions {_signed(b)}): ")
    return head + _effect(a, "the model needs its BOS.", "BOS hardly matters to it",
                          "no measurable change, BOS does not matter to it.",
                          "the model does better without BOS.")


def streaming_sentence(s: dict[str, Any], window: int | None) -> str:
    """Rule: evicting BOS hurts when window-only minus window+BOS exceeds Z standard errors and 0.01 nats."""
    e = s["evict_bigram"]
    w = f" of {window} tokens" if window else ""
    head = (f"Streaming past the training length with a sliding window{w}: non-trigger loss "
            f"{_pm(s['window'], 3)} without BOS, {_pm(s['window_bos'], 3)} with BOS kept (full cache "
            f"{_pm(s['full'], 3)}); evicting BOS changes it by {_signed(e)}: ")
    return head + _effect(e, "evicting the sink hurts.", "evicting BOS hardly matters",
                          "no measurable change, evicting BOS makes no difference.", "evicting BOS helps.")


def _signed(s: dict[str, Any], digits: int = 3) -> str:
    """'+0.120 ± 0.010' (a signed mean ± standard error)."""
    if s["mean"] is None:
        return "no number"
    if _se_too_small(s, digits):
        return f"{s['mean']:+.2g} ± {s['se']:.1g}"
    d = _digits(s, digits)
    m = round(s["mean"], d) + 0.0
    body = f"{m:+.{d}f}" if m != 0 else f"{0:.{d}f}"
    return body if s["se"] is None else f"{body} ± {s['se']:.{d}f}"


def verdicts(summary: dict[str, dict[str, Any]], window: int | None = None) -> dict[str, list[str]]:
    """Sentences per variant label (first: whether it learned the task, then the sink verdict, where its
    weight goes, the value drain, the ablation and streaming tests), and ``"overall"``. Every sentence
    is computed from the numbers it quotes by the rules of the functions above (Z = 2 standard errors
    of the mean over seeds)."""
    soft = next((s for s in summary.values() if s["variant"] == "standard"), None)
    out: dict[str, list[str]] = {}
    for label, s in summary.items():
        lines = [learned_sentence(s)]
        if s["n_usable"] and s["n_learned"] < s["n_usable"]:
            lines.append(f"No sink verdict for {label}: a sink only means something in a model that has "
                         "learned the task (it needs the head at trigger positions and not elsewhere). "
                         "Its numbers: "
                         f"BOS weight {_pm(s['bos_other'])} from non-trigger positions, "
                         f"{_pm(s['bos_trigger'], 3)} "
                         "from trigger positions.")
        elif s["n_usable"]:
            lines.append(sink_sentence(s))
            if soft is not None and s is not soft:
                lines.append(compare_sentence(s, soft))
            if s["variant"] in ("softmax1", "sink_logit", "sigmoid", "relu"):
                lines.append(nowhere_sentence(s))
            if s["variant"] == "gated":
                lines.append(gate_sentence(s))
            lines.append(value_sentence(s))
            if s["ablation_bigram"]["mean"] is not None:
                lines.append(ablation_sentence(s))
            if s["evict_bigram"]["mean"] is not None:
                lines.append(streaming_sentence(s, window))
        out[label] = lines
    out["overall"] = [overall_sentence(summary)]
    return out


def overall_sentence(summary: dict[str, dict[str, Any]]) -> str:
    """One sentence: does softmax form a sink, and which variants do not."""
    soft = next((s for s in summary.values() if s["variant"] == "standard"), None)
    fixes = [s for s in summary.values() if s["variant"] != "standard" and s["n_usable"]
             and s["n_learned"] == s["n_usable"]]
    unlearned = [s["label"] for s in summary.values() if s["n_usable"] and s["n_learned"] < s["n_usable"]]
    no_sink = [s["label"] for s in fixes if s["n_sink"] == 0]
    every = [s["label"] for s in fixes if s["n_sink"] == s["n_usable"]]
    some = [f"{s['label']} ({s['n_sink']}/{s['n_usable']})" for s in fixes if 0 < s["n_sink"] < s["n_usable"]]
    if soft is None or not soft["n_usable"]:
        head = "No softmax run to compare with."
    elif soft["n_learned"] < soft["n_usable"]:
        head = (f"Softmax learned the task in {soft['n_learned']}/{soft['n_usable']} seeds only, so no sink "
                "verdict is drawn for it")
    elif soft["n_sink"] == soft["n_usable"]:
        head = f"Softmax forms a sink in {soft['n_sink']}/{soft['n_usable']} seeds"
    elif soft["n_sink"] == 0:
        head = f"Softmax does not form a sink here (0/{soft['n_usable']} seeds)"
    else:
        head = f"Softmax forms a sink in {soft['n_sink']}/{soft['n_usable']} seeds only"
    parts = [head + "."]
    if no_sink:
        parts.append(f"Without a sink at the end in any seed: {', '.join(no_sink)}.")
    if every:
        parts.append(f"Still with a sink in every seed: {', '.join(every)}.")
    if some:
        parts.append(f"With a sink in some seeds: {', '.join(some)}.")
    if unlearned:
        parts.append(f"Not every seed learned the task for {', '.join(unlearned)}: no sink verdict for them.")
    if soft is not None and soft["n_usable"]:
        parts.append(guo_sentence(soft))
    return " ".join(parts)


GUO_STEPS = {100: 0.03, 300: 0.56, 1000: 0.78}  # Guo et al.'s BOS weight from non-trigger positions


def guo_sentence(soft: dict[str, Any]) -> str:
    """This run's softmax BOS weight at Guo et al.'s steps (those it reached), beside theirs."""
    c = soft["curves"]["bos_other_curve"]
    here = [(st, m) for st, m in zip(c["steps"], c["mean"], strict=True) if st in GUO_STEPS and m is not None]
    last, last_m = c["steps"][-1], c["mean"][-1]
    ours = ", ".join(f"{m:.2f} at step {st}" for st, m in here)
    end = f"{last_m:.2f} at its last step ({last})" if last_m is not None and last not in GUO_STEPS else ""
    theirs = ", ".join(f"{v:g} at step {st:,}" for st, v in GUO_STEPS.items())
    return (f"Softmax's mean weight on BOS from non-trigger positions here: "
            f"{', '.join(x for x in (ours, end) if x)}; Guo et al.'s figure data (a file in their "
            f"repository, not the paper's text) give {theirs} (width 256, sequences of "
            "256, batch 512, learning rate 3e-4; here a smaller model, batch and sequence with a larger "
            "learning rate, so steps are not comparable one for one).")


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
    """:func:`~attncore.training.bbm.train_bbm`, then (unless it diverged or was stopped) the BOS ablation and
    the streaming test with ``sizes`` (default :func:`live_test_sizes`) on ``held_out`` sequences (default
    :func:`held_out_sets`)."""
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


def table_rows(summary: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The printed summary table: per variant, mean ± standard error over seeds as text cells."""
    cols = ["variant", "seeds learned", "sink seeds", "BOS w (non-trigger)", "BOS w (trigger)", "sink share",
            "nowhere (non-trigger)", "value ratio", "ablation Δ (non-trig)", "ablation Δ (trig)",
            "window", "window+BOS", "full", "copy loss", "bigram loss", "bigram entropy", "bigram KL"]
    rows = []
    for s in summary.values():
        rows.append([s["label"], f"{s['n_learned']}/{s['n']}", f"{s['n_sink']}/{s['n']}",
                     _pm(s["bos_other"], 3), _pm(s["bos_trigger"], 3), _pm(s["sink_share"], 2),
                     _pm(s["nowhere_other"], 3), _pm(s["value_ratio"], 3), _signed(s["ablation_bigram"]),
                     _signed(s["ablation_copy"]), _pm(s["window"], 3), _pm(s["window_bos"], 3),
                     _pm(s["full"], 3), _pm(s["copy_loss"], 3), _pm(s["bigram_loss"], 3),
                     _pm(s["bigram_entropy"], 3), _pm(s["bigram_excess"], 3)])
    return cols, rows


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
