"""Claims tested by the shipped training experiments (attncore/training/results), read from their raw runs.

Every run record holds its config (variant, learning rate, seed, sizes) and its final losses, so a
cell (one experiment at one setting) is the list of its seeds' values; more seeds simply tighten the
numbers. The cells and their comparisons are :mod:`attncore.training.verdicts`' (the Training lab
judges the same files with them): a comparison is decided only with at least
:data:`~attncore.training.verdicts.MIN_SEEDS` seeds in each cell, and its difference must exceed the
95% margin ``t(0.975, df) · standard error`` (paired over shared seeds, else Welch), otherwise it is
"not distinguishable at this scale". With fewer seeds the direction is reported with the caveat that
no spread is known. A result file or field that is absent makes the row "not testable here", with the
reason.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from typing import Any

from attncore.errors import AttnInputError
from attncore.evidence.league import league_fix_text
from attncore.evidence.records import (
    CAVEAT,
    FAILS,
    HOLDS,
    SHIPPED,
    UNTESTABLE,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
)
from attncore.training.bbm import SINK_THRESHOLD
from attncore.training.io import load_result
from attncore.training.null_attention import summarise
from attncore.training.sink_grid import load_grid
from attncore.training.sink_verdicts import ClaimVerdict, grid_cells, judge_cells
from attncore.training.verdicts import (
    MIN_SEEDS,
    NOT_DISTINGUISHABLE,
    Comparison,
    compare,
    converged,
    lr_sweep_analysis,
    runs_by,
    scaling_analysis,
    seed_of,
    sink_heads,
    stats_of,
)

__all__ = ["CLAIMS", "decide"]

SPIKE = 0.1  # nats: a training loss that rises by more than this between evaluations is a spike
MIN_LRS = 3  # learning rates an instability test needs before "no instability" is a finding


def decide(diff: float, margin: float, seeds: int) -> int | None:
    """:mod:`attncore.training.verdicts`' rule on a difference and its 95% margin (NaN: none), for the numbers
    a row keeps: None with fewer than ``MIN_SEEDS`` seeds in a cell, else +1 / -1 when it is distinguishably
    above / below zero and 0 when it is not."""
    if seeds < MIN_SEEDS or math.isnan(margin):
        return None
    if diff != 0 and abs(diff) > margin:
        return 1 if diff > 0 else -1
    return 0


def _cmp_values(c: Comparison, prefix: str = "") -> dict[str, object]:
    """The numbers of a comparison that its row keeps (and that :func:`decide` reads)."""
    return {
        f"{prefix}diff": c.diff,
        f"{prefix}margin": math.nan if c.margin is None else c.margin,
        f"{prefix}n": min(c.a.n, c.b.n),
        f"{prefix}paired": c.paired,
    }


def _pm(m: Measurement, prefix: str = "") -> str:
    margin = m.num(f"{prefix}margin")
    return f"{m.num(f'{prefix}diff'):+.3f}" + ("" if math.isnan(margin) else f" ± {margin:.3f}")


def _load(name: str) -> dict[str, Any] | str:
    """The result dict, or why it cannot be used."""
    try:
        d = load_result(name)
    except AttnInputError as exc:
        return str(exc)
    if not d.get("runs"):
        return f"{name}.json has no runs."
    return d


# a reader of one result file: its dict in, the row's measurement (or why the file cannot test the claim) out
_Reader = Callable[[dict[str, Any]], Measurement | str]


def _malformed(name: str, exc: Exception) -> str:
    """Why a result file whose fields a reader could not use cannot test the claim."""
    what = f"the field {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else "a field"
    return f"{name}.json lacks {what} this row reads, or holds it in another form ({type(exc).__name__})."


def _reading(name: str) -> Callable[[_Reader], Callable[[Setting], Measurement]]:
    """A row's measure function from a reader of the shipped result ``name``: the reader gets the result dict
    and returns the measurement, or why the file cannot test the claim. A file that cannot be read, lacks a
    field the reader needs, or a reason, makes the row "not testable here" with it."""

    def wrap(read: _Reader) -> Callable[[Setting], Measurement]:
        @functools.wraps(read)
        def measure(setting: Setting) -> Measurement:
            d = _load(name)
            if isinstance(d, str):
                got: Measurement | str = d
            else:
                try:
                    got = read(d)
                except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                    got = _malformed(name, exc)
            return Measurement(basis=SHIPPED, missing=got) if isinstance(got, str) else got

        return measure

    return wrap


def _size_words(cfg: dict[str, Any]) -> str:
    """'3 layers, 4 heads, width 128, 500 steps' from a result's config (what it has of these)."""
    words = (("n_layer", "layer"), ("n_head", "head"), ("d_model", "width"), ("steps", "step"))
    return ", ".join(
        f"width {cfg[k]}" if w == "width" else f"{cfg[k]} {w}{'s' if int(cfg[k]) != 1 else ''}"
        for k, w in words
        if k in cfg
    )


def _scale(d: dict[str, Any]) -> str:
    cfg = (d.get("sizes") or {}).get("config") or {}
    seeds = sorted({seed_of(r) for r in d["runs"]})
    machine = (d.get("machine") or {}).get("device", "?")
    return (
        f"{d['experiment']}.json: {_size_words(cfg)}, {len(d['runs'])} runs, seeds "
        f"{', '.join(map(str, seeds))}, trained on {machine}"
    )


# --------------------------------------------------------------------------- fully scaled trains worse


@_reading("lr_sweep")
def _lr_sweep(d: dict[str, Any]) -> Measurement | str:
    a = lr_sweep_analysis(d)
    c = a.comparisons.get("fully_scaled vs standard")
    if c is None:
        return "lr_sweep.json lacks a standard or a fully scaled learning rate that every seed finished."
    return Measurement(
        {
            "standard": c.a.mean,
            "fully_scaled": c.b.mean,
            "lr_standard": a.best["standard"][0],
            "lr_fully_scaled": a.best["fully_scaled"][0],
            **_cmp_values(c),
        },
        basis=SHIPPED,
        scale=_scale(d),
    )


def _worse_judge(m: Measurement) -> Judgement:
    diff, margin, n = m.num("diff"), m.num("margin"), int(m.num("n"))
    seeds = f"{n} seed{'s' if n != 1 else ''} per cell"
    scale = (
        f"losses {m.num('standard'):.2f} vs {m.num('fully_scaled'):.2f} here against the post's 1.2 vs 1.4"
    )
    sign = decide(diff, margin, n)
    if sign == 1:
        return Judgement(HOLDS, f"gap {_pm(m)} (95%, {seeds}); {scale}, a smaller model and run.")
    if sign == -1:
        return Judgement(FAILS, f"fully scaled trained better here: {_pm(m)} ({seeds}).")
    if sign == 0:
        return Judgement(FAILS, f"{NOT_DISTINGUISHABLE}: {_pm(m)} ({seeds}).")
    if diff > 0:
        return Judgement(
            CAVEAT,
            f"the ordering is the post's, but with {seeds} no seed-to-seed spread is known (need "
            f"{MIN_SEEDS}); {scale}.",
        )
    return Judgement(FAILS, f"fully scaled trained no worse ({diff:+.3f}, {seeds}).")


FULLY_SCALED_WORSE = Claim(
    key="fully_scaled_worse",
    source="graphcore",
    quote="Fully scaled attention behaves worse than the baseline (final training loss 1.2 for baseline, 1.4 "
    "for fully scaled)",
    test="The shipped learning-rate sweep on tiny Shakespeare: final training loss of standard and fully "
    "scaled attention, each at its best learning rate (the lowest mean over seeds among rates every seed "
    "finished), as the Training lab judges it.",
    tolerance=f"with ≥ {MIN_SEEDS} seeds per cell the gap must exceed its 95% margin (t × standard error)",
    measure=_lr_sweep,
    describe=lambda m: (
        f"best: standard {m.num('standard'):.3f} (lr {m.num('lr_standard'):.3g}), fully scaled "
        f"{m.num('fully_scaled'):.3f} (lr {m.num('lr_fully_scaled'):.3g}); gap {_pm(m)}; {int(m.num('n'))} "
        "seed(s) per cell."
    ),
    judge=_worse_judge,
)


# --------------------------------------------------------------------------- the scaling ablation


@_reading("scaling")
def _scaling(d: dict[str, Any]) -> Measurement | str:
    a = scaling_analysis(d)
    heads = [h for h in a.d_heads if a.loss.get(h) is not None]
    if len(heads) < 2:
        return "scaling.json lacks standard and unscaled runs at two head dims."
    vals: dict[str, object] = {"heads": ", ".join(map(str, heads)), "d_lo": heads[0], "d_hi": heads[-1]}
    for h in heads:
        vals.update(_cmp_values(a.loss[h], f"gap{h}_"))  # type: ignore[arg-type]
        vals[f"std_{h}"] = a.loss[h].a.mean  # type: ignore[union-attr]
    steps = [f"{x}->{y}" for x, y in zip(heads, heads[1:], strict=False)]
    vals["steps"] = "|".join(steps)
    for st in steps:
        c = a.gap_growth.get(st)
        vals.update(_cmp_values(c, f"step{st}_") if c is not None else {f"step{st}_n": 0})

    # the growth over the whole range, from the per-seed gaps at the smallest and largest head dim
    def final(variant: str, h: int) -> dict[int, float]:
        return {seed_of(r): r["final_val_loss"] for r in converged(a.cells.get((variant, h), []))}

    per: dict[int, dict[int, float]] = {}
    for h in (heads[0], heads[-1]):
        unscaled, standard = final("unscaled", h), final("standard", h)
        per[h] = {k: unscaled[k] - standard[k] for k in sorted(set(unscaled) & set(standard))}
    lo, hi = per[heads[0]], per[heads[-1]]
    whole = compare(list(lo.values()), list(hi.values()), seeds_a=list(lo), seeds_b=list(hi))
    vals.update(_cmp_values(whole, "whole_"))
    return Measurement(vals, basis=SHIPPED, scale=_scale(d))


def _gap_text(m: Measurement) -> str:
    return "; ".join(f"d_head {h}: {_pm(m, f'gap{h}_')}" for h in str(m["heads"]).split(", "))


def _ablation_judge(m: Measurement) -> Judgement:
    lo, hi = int(m.num("d_lo")), int(m.num("d_hi"))
    drift = m.num(f"std_{hi}") - m.num(f"std_{lo}")
    note = (
        f"standard's own loss also moves {drift:+.3f} from d_head {lo} to {hi} (fewer, wider heads at a "
        "fixed width)"
    )
    steps = str(m["steps"]).split("|")
    signs = [
        decide(m.num(f"step{st}_diff"), m.num(f"step{st}_margin"), int(m.num(f"step{st}_n")))
        if f"step{st}_diff" in m.values
        else None
        for st in steps
    ]
    whole = decide(m.num("whole_diff"), m.num("whole_margin"), int(m.num("whole_n")))
    if all(x == 1 for x in signs):
        return Judgement(
            HOLDS,
            f"the unscaled penalty grows at every step up in d_head ({lo} to {hi}: {_pm(m, 'whole_')}); "
            f"{note}.",
        )
    if any(x == -1 for x in signs) or whole == -1:
        return Judgement(
            FAILS, f"the unscaled penalty shrinks from one head dim to a larger one here; {note}."
        )
    if whole == 1:
        flat = [st.replace("->", " to ") for st, x in zip(steps, signs, strict=True) if x != 1]
        return Judgement(
            CAVEAT,
            f"the penalty grows from d_head {lo} to {hi} ({_pm(m, 'whole_')}) but not distinguishably from "
            f"{', '.join(flat)}; {note}.",
        )
    if whole == 0:
        return Judgement(
            FAILS,
            f"the penalty's growth from d_head {lo} to {hi} is {NOT_DISTINGUISHABLE} ({_pm(m, 'whole_')}).",
        )
    if m.num("whole_diff") > 0:
        return Judgement(
            CAVEAT,
            f"the unscaled penalty grows with d_head, but with {int(m.num('whole_n'))} seed(s) no spread is "
            f"known (need {MIN_SEEDS}); {note}.",
        )
    return Judgement(FAILS, f"the unscaled penalty does not grow with d_head ({m.num('whole_diff'):+.3f}).")


SCALING_ABLATION = Claim(
    key="scaling_ablation",
    source="sqrtd",
    quote="When Scaling Matters Most … High d_k | Larger variance | Critical … Low d_k | Smaller variance | "
    "Less critical",
    test="The tutorial's exercise (“Train attention with and without scaling. Compare learning curves.”) as "
    "the shipped scaling experiment: final validation loss, unscaled minus standard, at d_head 16, 64 "
    "and 256 (same total width), and whether that penalty grows at each step up in head dim, paired over "
    "seeds, as the Training lab judges it.",
    tolerance=f"with ≥ {MIN_SEEDS} seeds every step's growth must exceed its 95% margin (paired over seeds)",
    measure=_scaling,
    describe=lambda m: "unscaled − standard, final val loss: " + _gap_text(m) + ".",
    judge=_ablation_judge,
)


# --------------------------------------------------------------------------- "unstable for d_k > ~16"


def _d_head(r: dict[str, Any]) -> int:
    cfg = r["config"]
    return int(cfg["d_model"]) // int(cfg["n_head"])


@_reading("scaling")
def _stability(d: dict[str, Any]) -> Measurement | str:
    runs = [r for r in d["runs"] if r["config"]["variant"] == "unscaled" and _d_head(r) > 16]
    if not runs:
        return "scaling.json has no unscaled run with d_head above 16."
    diverged = len(runs) - len(converged(runs))
    spikes, worst = 0, -math.inf
    for r in runs:
        losses = [x for x in (r.get("train_loss") or []) if x is not None]
        rises = [b - a for a, b in zip(losses, losses[1:], strict=False)]
        worst = max([worst, *rises])
        spikes += any(x > SPIKE for x in rises)
    cells = runs_by(d["runs"], "variant", "d_head")
    heads = sorted({_d_head(r) for r in runs})
    gaps = {}
    for h in heads:
        u, s = (
            stats_of(cells.get(("unscaled", h), []), "final_val_loss"),
            stats_of(cells.get(("standard", h), []), "final_val_loss"),
        )
        if u is not None and s is not None:
            gaps[f"gap_{h}"] = u.mean - s.mean
    lrs = sorted({float(r["config"]["lr"]) for r in runs})
    return Measurement(
        {
            "runs": len(runs),
            "diverged": diverged,
            "spikes": spikes,
            "worst_rise": worst,
            "heads": ", ".join(map(str, heads)),
            "steps": int(runs[0]["config"]["steps"]),
            "lr": lrs[0],
            "lrs": len(lrs),
            "eval_every": max(int(r["config"].get("eval_every") or 1) for r in runs),
            **gaps,
        },
        basis=SHIPPED,
        scale=_scale(d),
    )


def _detects_instability(m: Measurement) -> bool:
    """Whether the runs could show the claimed instability: a range of learning rates (instability is a
    matter of the rate) and the loss of every step (a spike between readings is invisible)."""
    return m.num("lrs") >= MIN_LRS and m.num("eval_every") <= 1


def _stability_judge(m: Measurement) -> Judgement:
    if m.num("diverged") or m.num("spikes"):
        return Judgement(
            HOLDS,
            f"{int(m.num('diverged'))} of {int(m.num('runs'))} unscaled runs diverged and "
            f"{int(m.num('spikes'))} had a loss spike above {SPIKE:g} nats.",
        )
    heads = [int(h) for h in str(m["heads"]).split(", ")]
    slower = ", ".join(f"{m.num(f'gap_{h}'):+.2f} at d_head {h}" for h in heads if f"gap_{h}" in m.values)
    if not _detects_instability(m):
        n = int(m.num("lrs"))
        rates = f"one learning rate ({m.num('lr'):g})" if n == 1 else f"{n} learning rates"
        return Judgement(
            UNTESTABLE,
            f"{rates}, {int(m.num('steps'))} steps and the loss read every {int(m.num('eval_every'))} "
            "steps cannot show the claimed instability (it shows at some learning rates and not at "
            "others, and a spike between readings is unseen); what was seen: no divergence, slower "
            f"training ({slower} nats in final val loss). The run that would test it: unscaled against "
            f"scaled at d_head 16, 64 and 256 over at least {MIN_LRS} learning rates up to the scaled "
            "model's largest stable one, the loss logged at every step, 3 seeds.",
        )
    return Judgement(
        FAILS,
        f"no unscaled run diverged or spiked ({int(m.num('runs'))} runs over {int(m.num('lrs'))} learning "
        f"rates, every step's loss); they trained slower ({slower} nats in final val loss), not unstably.",
    )


UNSTABLE_16 = Claim(
    key="unstable_16",
    source="sdpa",
    quote="NEVER forget the scaling — without it, training will be unstable for d_k > ~16.",
    test="The shipped scaling experiment's unscaled runs at d_head > 16: divergence, the largest rise of the "
    "training loss between readings, and whether the runs could show instability at all (learning rates "
    "tried, how often the loss was read).",
    tolerance=f"“unstable”: a run diverged or its loss rose by more than {SPIKE:g} nats between readings; "
    f"“does not hold” needs at least {MIN_LRS} learning rates and the loss of every step, else not testable",
    measure=_stability,
    describe=lambda m: (
        f"{int(m.num('runs'))} unscaled runs at d_head {m['heads']} (lr {m.num('lr'):g}"
        + (f" and {int(m.num('lrs')) - 1} more" if m.num("lrs") > 1 else "")
        + f", {int(m.num('steps'))} steps, loss read every {int(m.num('eval_every'))}): "
        f"{int(m.num('diverged'))} diverged, {int(m.num('spikes'))} spiked; "
        + (
            f"the training loss fell at every reading (largest change {m.num('worst_rise'):+.3f} nats)."
            if m.num("worst_rise") <= 0
            else f"largest rise between readings {m.num('worst_rise'):+.3f} nats."
        )
    ),
    judge=_stability_judge,
)


# --------------------------------------------------------------------------- sinks in trained models
# The null-attention experiment trains a task that needs a head to do nothing at most positions (Guo et
# al.'s Bigram-Backcopy); :func:`attncore.training.null_attention.summarise` gives each variant's numbers
# over seeds, read at each run's sink head. Both sink rows are judged by one verdict over settings,
# :func:`sink_verdict` (the sink grid and the shipped run as cells: attncore.training.sink_verdicts), the one
# the Training lab and the Attention sinks page show. The character model of sinks.json (tiny Shakespeare)
# is quoted beside it.

DENOMINATOR = ("softmax1", "sink_logit")  # the variants with a denominator term and no value behind it


def _lm_sink_heads(d: dict[str, Any] | str) -> tuple[int, int] | None:
    """(sink heads, heads) over the softmax character models of sinks.json (None when absent)."""
    if isinstance(d, str):
        return None
    runs = [
        r
        for r in d["runs"]
        if (r.get("label") or r["config"]["variant"]) in ("softmax", "standard") and r.get("sink_alpha")
    ]
    if not runs:
        return None
    return sum(sink_heads(r) for r in runs), sum(len(row) for r in runs for row in r["sink_alpha"])


@_reading("null_attention")
def _sinks(d: dict[str, Any]) -> Measurement | str:
    summary = summarise(d["runs"])
    soft = [s for s in summary.values() if s["variant"] == "standard"]
    if not soft:
        return "null_attention.json has no softmax run."
    vals: dict[str, object] = {"labels": "|".join(summary), "eps": SINK_THRESHOLD}
    for label, s in summary.items():
        bos, nowhere = s["bos_end"], s["nowhere_other"]  # bos: the end weight the sink rule reads
        vals.update(
            {
                f"variant:{label}": s["variant"],
                f"n:{label}": s["n_usable"],
                f"learned:{label}": s["n_learned"],
                f"sinks:{label}": s["n_sink"],
                f"bos:{label}": math.nan if bos["mean"] is None else bos["mean"],
                f"nowhere:{label}": math.nan if nowhere["mean"] is None else nowhere["mean"],
            }
        )
    lm = _lm_sink_heads(_load("sinks"))
    vals["lm_sinks"], vals["lm_heads"] = lm if lm is not None else (-1, 0)
    vals["size"] = _size_words(
        {k: v for k, v in ((d.get("sizes") or {}).get("config") or {}).items() if k != "steps"}
    )
    se = {f"bos:{label}": s["bos_end"]["se"] or 0.0 for label, s in summary.items()}
    header, grid = load_grid()
    vals["cells"] = grid_cells(header, grid, d)  # every (variant, setting) cell, read whole by sink_verdict
    vals["league"] = league_fix_text()  # the league's further ways to attend to nothing (a sentence)
    return Measurement(vals, se, basis=SHIPPED, scale=_scale(d) + " (the Bigram-Backcopy task)")


def sink_verdict(m: Measurement, claim: str) -> ClaimVerdict:
    """The one sink verdict over settings (``claim``: "sinks" or "fixes") from a row's cells."""
    return getattr(judge_cells(m["cells"]), claim)  # type: ignore[arg-type]


def _labels(m: Measurement, *variants: str) -> list[str]:
    return [lab for lab in str(m["labels"]).split("|") if not variants or m[f"variant:{lab}"] in variants]


def _sink_text(m: Measurement, labels: Iterable[str]) -> str:
    """'softmax 3/3 seeds, BOS weight 0.90; softmax1 0/3 seeds, …' for these variants."""
    return "; ".join(
        f"{label} {int(m.num(f'sinks:{label}'))}/{int(m.num(f'n:{label}'))} seeds, BOS weight "
        f"{fmt(m.num(f'bos:{label}'), 2)}"
        for label in labels
    )


def _lm_text(m: Measurement) -> str:
    if m.num("lm_sinks") < 0:
        return ""
    return (
        "; the tiny-Shakespeare character model (sinks.json) grew "
        f"{int(m.num('lm_sinks'))}/{int(m.num('lm_heads'))} sink heads"
    )


def _learned_judge(m: Measurement) -> Judgement:
    v = sink_verdict(m, "sinks")
    if v.kind == "untested":
        return Judgement(UNTESTABLE, v.text)
    lm = _lm_text(m).removeprefix("; the ")
    lm = f" The {lm}." if lm else ""
    if v.kind == "none":
        return Judgement(FAILS, v.text + lm)
    return Judgement(CAVEAT, f"on a task built to need null attention ({m['size']}): {v.text}{lm}")


SINKS_LEARNED = Claim(
    key="sinks_learned",
    source="notes",
    quote="As a maladaptive workaround for the lack of true null attention, models often learn to dump large "
    "amounts of attention weight onto semantically meaningless tokens (like BOS …)",
    test="The shipped null-attention experiment and the sink grid over learning rate x positions (Guo et "
    "al.'s Bigram-Backcopy task: a head is needed only after a trigger): the softmax model's mean weight on "
    "BOS from the other positions, over seeds, at its sink head.",
    tolerance=f"a sink: the weight non-trigger positions put on BOS, averaged over the last evaluation "
    f"points, above ε = {SINK_THRESHOLD:g} (not Gu et al.'s metric, which averages over every query) in "
    "every seed, at every setting of the sink grid and the shipped run",
    measure=_sinks,
    describe=lambda m: _sink_text(m, _labels(m)) + ".",
    judge=_learned_judge,
    cites=("guo2024", "gu2024"),
)


def _fix_judge(m: Measurement) -> Judgement:
    v = sink_verdict(m, "fixes")
    kind = {"every": HOLDS, "some": CAVEAT, "none": FAILS, "untested": UNTESTABLE}[v.kind]
    gone = [lab for lab in _labels(m, *DENOMINATOR) if int(m.num(f"sinks:{lab}")) == 0]
    where = ", ".join(f"{lab}: weight {m.num(f'nowhere:{lab}'):.4f} on nothing" for lab in gone)
    tail = (f" At the shipped setting the head without a sink spends its weight on nothing instead ({where})."
            if where and kind in (HOLDS, CAVEAT) else "")
    return Judgement(kind, v.text + tail + str(m.values.get("league", "")))


BIAS_REMOVES_SINKS = Claim(
    key="bias_removes_sinks",
    source="notes",
    quote="Denominator Bias … allowing for true “null attention” or partial attention … This removes the "
    "need for attention sinks.",
    test="The same experiment's softmax1 and learned-sink-logit models (the logit starting at 0 and at −5), "
    "and the sink grid's softmax1 and sink logit at 0 over learning rate x positions: seeds with a sink per "
    "setting, and the weight they put on nothing.",
    tolerance="every denominator-bias model free of sinks in every seed, at every setting where softmax "
    "forms one (the sink grid and the shipped run)",
    measure=_sinks,
    describe=lambda m: _sink_text(m, _labels(m, "standard", *DENOMINATOR)) + ".",
    judge=_fix_judge,
    cites=("guo2024",),
)


CLAIMS: tuple[Claim, ...] = (
    FULLY_SCALED_WORSE,
    SCALING_ABLATION,
    UNSTABLE_16,
    SINKS_LEARNED,
    BIAS_REMOVES_SINKS,
)
