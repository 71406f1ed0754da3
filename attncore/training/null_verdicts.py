"""The null-attention experiment in words: per-variant sentences and the overall verdict, each computed by a
stated rule from a :func:`attncore.training.sink_stats.summarise` summary (means with their standard errors
over seeds), and the printed summary table. Used by the command
(:mod:`attncore.training.null_attention`), the Training lab and the Attention sinks page.

Shape legend: ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "GUO_STEPS",
    "MATTERS",
    "ONE_SEED",
    "Z",
    "ablation_sentence",
    "compare_sentence",
    "gate_sentence",
    "guo_sentence",
    "learned_sentence",
    "mean_se_text",
    "nowhere_sentence",
    "overall_sentence",
    "sink_sentence",
    "streaming_sentence",
    "table_rows",
    "value_sentence",
    "verdicts",
]


Z = 2.0  # a difference counts when it exceeds Z standard errors
MATTERS = 0.01  # nats: ... and this much loss


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
