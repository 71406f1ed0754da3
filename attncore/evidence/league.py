"""Evidence rows read from the league of normalisers and gates and the weight-decay sweep (issue 43): does our
sink-rate ordering agree with Softpick's Table 3 ordering, and does weight decay change the sink rate (Gu et
al., ICLR 2025)? Both read the shipped files (:mod:`attncore.training.league_verdict`,
:mod:`attncore.training.wd_sweep`) and are judged by rules over seeds, with the run's scale beside the
papers'.
"""

from __future__ import annotations

import math
from typing import Any

from attncore.citations import REFERENCES, quoted
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
)
from attncore.training.bbm import SINK_THRESHOLD
from attncore.training.league import LEAGUE, league_configs, league_table
from attncore.training.league_verdict import REFERENCE_ORDERINGS, ordering_verdicts, shipped_league
from attncore.training.sink_stats import t_interval
from attncore.training.wd_sweep import WD_SWEEP, shipped_sweep

__all__ = ["CLAIMS", "LEAGUE_ORDERING", "NULL_WAYS", "SINKS_WEIGHT_DECAY", "WD_PRECISE", "league_fix_text"]

NULL_WAYS = ("softmax1", "sink_logit", "relu", "gated", "softpick")
"""The league's ways to attend to nothing beside softmax: a denominator term (softmax1, the sink logit),
weights that need not sum to 1 (ReLU attention, softpick) and the sparse output gate."""

WD_PRECISE = 0.25
"""The weight-decay rule's precision: an effect is ruled out when every interval holds 0 and is narrower than
± this share of heads (2 of the model's 8)."""


def _scale(base: dict[str, Any]) -> str:
    return (f"Bigram-Backcopy, {base['n_layer']} layers x {base['n_head']} heads, width {base['d_model']}, "
            f"{base['steps']:,} steps of batch {base['batch']}")


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


# --------------------------------------------------------------------------- the league's ordering


def _league_measure(setting: Setting) -> Measurement:
    name, header, runs = shipped_league()
    if not runs:
        return Measurement(basis=SHIPPED, missing="no league file ships with this app.")
    verdicts = ordering_verdicts(runs)
    vals: dict[str, object] = {"lrs": "|".join(f"{v.lr:g}" for v in verdicts), "runs": len(runs),
                               "planned": len(league_configs())}
    for v in verdicts:
        k = f"{v.lr:g}"
        vals |= {f"tau:{k}": _nan(v.tau["mean"]), f"lo:{k}": _nan(v.tau["lo"]), f"hi:{k}": _nan(v.tau["hi"]),
                 f"n:{k}": v.tau["n"]}
    return Measurement(vals, basis=SHIPPED, scale=_scale(LEAGUE["base"]) + f" ({len(runs)} runs)")


def _lrs(m: Measurement) -> list[str]:
    return [k for k in str(m["lrs"]).split("|") if k]


def _league_describe(m: Measurement) -> str:
    parts = []
    for k in _lrs(m):
        if math.isnan(m.num(f"lo:{k}")):
            parts.append(f"lr {k}: {int(m.num(f'n:{k}'))} seed(s) with a defined τ")
        else:
            parts.append(f"lr {k}: Kendall's τ-b {m.num(f'tau:{k}'):+.2f} [{m.num(f'lo:{k}'):+.2f}, "
                         f"{m.num(f'hi:{k}'):+.2f}] over {int(m.num(f'n:{k}'))} seeds")
    return (f"{int(m.num('runs'))} of the league's {int(m.num('planned'))} runs; against "
            f"the order read from {REFERENCES['zuhri2025'].short}, Table 3 (issue 43's reading; the table "
            "itself not checked here): " + "; ".join(parts) + ".")


def _league_judge(m: Measurement) -> Judgement:
    ref = REFERENCE_ORDERINGS["zuhri2025.t3"]
    agree = [k for k in _lrs(m) if m.num(f"lo:{k}") > 0]
    disagree = [k for k in _lrs(m) if m.num(f"hi:{k}") < 0]
    theirs = f"theirs: {ref.scale}; the order is {ref.note}"
    if agree and not disagree:
        return Judgement(CAVEAT, f"the ordering agrees at lr {', '.join(agree)} ({len(agree)} of "
                                 f"{len(_lrs(m))} learning rates; the interval of τ above 0), on a model far "
                                 f"smaller than theirs ({theirs}).")
    if disagree and not agree:
        return Judgement(FAILS, f"the ordering disagrees at lr {', '.join(disagree)} (the interval of τ "
                                f"below 0) and agrees nowhere ({theirs}).")
    if agree and disagree:
        return Judgement(CAVEAT, f"the ordering agrees at lr {', '.join(agree)} and disagrees at lr "
                                 f"{', '.join(disagree)}: it depends on the learning rate ({theirs}).")
    return Judgement(UNTESTABLE, "no learning rate has 2 seeds whose τ interval lies off 0 yet (too few "
                                 "seeds, or the interval spans 0).")


LEAGUE_ORDERING = Claim(
    key="league_ordering",
    source="notes",
    quote="Softmax forces the weights to sum to 1. A token cannot easily choose to “attend to nothing” …",
    test="The league: softmax and seven ways to attend (softmax1, the gpt-oss sink logit, ReLU attention, "
    "softpick, Qiu et al.'s sigmoid output gate elementwise, per head and its non-sparse control) trained "
    "on Bigram-Backcopy x 2 learning rates x 3 seeds; per seed, Kendall's τ-b between our sink rates and "
    "the order of Softpick's Table 3 (softmax most, softpick least).",
    tolerance=f"a head is a sink when its end weight on BOS from non-trigger positions exceeds "
    f"{SINK_THRESHOLD:g}; “holds with a caveat” when the 95% t interval of τ over seeds lies above 0 at some "
    "learning rate and below 0 at none; “does not hold” when it lies below 0 and nowhere above",
    measure=_league_measure,
    describe=_league_describe,
    judge=_league_judge,
    cites=("zuhri2025",),
)


def league_fix_text() -> str:
    """One sentence for the denominator-bias row: the league's sink rate of softmax against the other ways
    to attend to nothing, at each learning rate ("" without a league file)."""
    _, _, runs = shipped_league()
    if not runs:
        return ""
    parts = []
    table = league_table(runs)
    labels = {c["variant"]: c["label"] for c in table}
    for lr in sorted({float(c["lr"]) for c in table}):
        cells = {c["variant"]: c["sink_rate"] for c in table if float(c["lr"]) == lr}
        if "standard" not in cells or cells["standard"]["mean"] is None:
            continue
        others = ", ".join(f"{labels[v]} {cells[v]['mean']:.2f}" for v in NULL_WAYS
                           if v in cells and cells[v]["mean"] is not None)
        parts.append(f"at lr {lr:g} softmax {cells['standard']['mean']:.2f} ({cells['standard']['n']} "
                     f"seed(s)) against {others}")
    if not parts:
        return ""
    return (f" The league ({len(runs)} of {len(league_configs())} runs) adds further ways to attend to "
            f"nothing; its sink rates: {'; '.join(parts)}.")


# --------------------------------------------------------------------------- weight decay


def _wd_measure(setting: Setting) -> Measurement:
    _, header, runs = shipped_sweep()
    if not runs:
        return Measurement(basis=SHIPPED, missing="no weight-decay sweep file ships with this app.")
    rate = {(float(r["config"]["weight_decay"]), int(r["config"]["seed"])): r["sink_rate"] for r in runs
            if r.get("diverged_at") is None and r.get("sink_rate") is not None}
    wds = sorted({w for w, _ in rate})
    vals: dict[str, object] = {"wds": "|".join(f"{w:g}" for w in wds if w > 0), "runs": len(runs),
                               "planned": len(league_configs(WD_SWEEP))}
    for w in wds:
        vals[f"rate:{w:g}"] = _nan(t_interval([v for (x, _), v in rate.items() if x == w])["mean"])
        if w == 0:
            continue
        diffs = [rate[(w, s)] - rate[(0.0, s)] for (x, s) in rate if x == w and (0.0, s) in rate]
        d = t_interval(diffs)
        vals |= {f"d:{w:g}": _nan(d["mean"]), f"dlo:{w:g}": _nan(d["lo"]), f"dhi:{w:g}": _nan(d["hi"]),
                 f"dn:{w:g}": d["n"]}
    return Measurement(vals, basis=SHIPPED, scale=_scale(WD_SWEEP["base"]) + f", softmax, lr "
                       f"{WD_SWEEP['lrs'][0]:g} ({len(runs)} runs)")


def _wds(m: Measurement) -> list[str]:
    return [k for k in str(m["wds"]).split("|") if k]


def _wd_describe(m: Measurement) -> str:
    parts = []
    for k in _wds(m):
        if math.isnan(m.num(f"dlo:{k}")):
            parts.append(f"{k}: {int(m.num(f'dn:{k}'))} paired seed(s)")
        else:
            parts.append(f"{k}: {m.num(f'd:{k}'):+.3f} [{m.num(f'dlo:{k}'):+.3f}, {m.num(f'dhi:{k}'):+.3f}]")
    return (f"{int(m.num('runs'))} of the sweep's {int(m.num('planned'))} runs; sink rate at weight decay 0 "
            f"{m.num('rate:0'):.3f}; the change from it per weight decay, paired by seed: "
            + ("; ".join(parts) or "none yet") + ".")


def _wd_judge(m: Measurement) -> Judgement:
    gu = quoted("gu2024.decay.model")
    theirs = f"Gu et al.'s runs: {gu.model}, {gu.setting}"
    tested = [k for k in _wds(m) if not math.isnan(m.num(f"dlo:{k}"))]
    if not tested:
        return Judgement(UNTESTABLE, "no weight decay has 2 seeds paired with weight decay 0 yet.")
    moved = [k for k in tested if m.num(f"dlo:{k}") > 0 or m.num(f"dhi:{k}") < 0]
    if moved:
        words = ", ".join(f"{k} ({'raises' if m.num(f'd:{k}') > 0 else 'lowers'} it)" for k in moved)
        return Judgement(HOLDS, f"weight decay changes the sink rate at {words}, the 95% interval off 0; "
                                f"on a far smaller model than {theirs}.")
    if all((m.num(f"dhi:{k}") - m.num(f"dlo:{k}")) / 2 < WD_PRECISE for k in tested):
        return Judgement(FAILS, f"every interval holds 0 and is narrower than ±{WD_PRECISE:g}: no effect of "
                                f"weight decay on the sink rate at this scale ({theirs}).")
    return Judgement(UNTESTABLE, f"every interval holds 0 but one is wider than ±{WD_PRECISE:g}: too few or "
                                 "too scattered seeds to tell.")


SINKS_WEIGHT_DECAY = Claim(
    key="sinks_weight_decay",
    source="notes",
    quote="… models often learn to dump large amounts of attention weight onto semantically meaningless "
    "tokens (like BOS …)",
    test="How often they learn it as weight decay varies (Gu et al. report that it does): softmax on the "
    "league's task at weight decay 0, 0.1, 0.5, 1 and 5 x 3 seeds; the sink rate's change from weight decay "
    "0, paired by seed, with its t interval.",
    tolerance=f"“holds” when some weight decay's 95% interval lies off 0; “does not hold” when every one "
    f"holds 0 and is narrower than ±{WD_PRECISE:g} (2 of the 8 heads)",
    measure=_wd_measure,
    describe=_wd_describe,
    judge=_wd_judge,
    cites=("gu2024",),
)

CLAIMS: tuple[Claim, ...] = (LEAGUE_ORDERING, SINKS_WEIGHT_DECAY)
