"""Does our league's sink-rate ordering agree with a paper's? A rank correlation per seed, a t interval over
the seeds, and a verdict by rule.

For one learning rate and one seed, the variants a reference ordering names are ranked by their sink rate
(:func:`attncore.training.league.sink_rate`) and Kendall's τ-b (:func:`kendall_tau_b`) is taken between our
rates and the reference's ranks (1 = the most sink). τ = +1: our ordering is theirs; -1: it is reversed;
ties (many variants at a sink rate of 0) count as τ-b counts them. Over the seeds, the mean τ and its t
interval (:func:`~attncore.training.sink_stats.t_interval`) decide (:func:`ordering_verdict`):

* **agrees** when the interval lies above 0; **disagrees** when it lies below 0;
* **undecided** when it contains 0; **too few seeds** with fewer than 2 seeds whose τ is defined (τ is not
  defined when every variant has the same rate).

Spearman's ρ (:func:`spearman_rho`, ranks with ties averaged) is reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attncore.citations import REFERENCES
from attncore.training.sink_stats import t_interval

__all__ = [
    "REFERENCE_ORDERINGS",
    "SHIPPED_FILES",
    "OrderingVerdict",
    "ReferenceOrdering",
    "cell_curves",
    "kendall_tau_b",
    "ordering_verdict",
    "ordering_verdicts",
    "ordered_cells",
    "shipped_league",
    "spearman_rho",
]


@dataclass(frozen=True)
class ReferenceOrdering:
    """A paper's ordering of attention variants by sink rate, most sink first.

    Attributes:
        key: a stable id.
        paper: key of :data:`attncore.citations.REFERENCES`.
        where: the table it is read from.
        scale: the paper's model size and training length, as far as it is known.
        order: the league's variant names, most sink first.
        checked: whether the ordering was checked against the paper's own text here.
        note: what was (not) checked.
    """

    key: str
    paper: str
    where: str
    scale: str
    order: tuple[str, ...]
    checked: bool
    note: str


REFERENCE_ORDERINGS: dict[str, ReferenceOrdering] = {
    "zuhri2025.t3": ReferenceOrdering(
        key="zuhri2025.t3", paper="zuhri2025", where="Table 3",
        scale="340M-parameter models (the abstract's size)",
        order=("standard", "softmax1", "sink_logit", "relu", "gated", "softpick"),
        checked=False,
        note=("the order of the variants as issue 43 reads Softpick's Table 3; the table's text could not be "
              "read here, so its numbers are not shown and only the abstract's 0% sink rate for softpick is "
              "checked")),
}
"""The orderings the league is compared with."""


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks of ``values`` ascending, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def kendall_tau_b(x: list[float], y: list[float]) -> float | None:
    """Kendall's τ-b of two equally long lists: (concordant - discordant pairs) / sqrt((n0 - ties in x)
    (n0 - ties in y)), n0 = n(n-1)/2; None when either list is constant or has fewer than 2 entries."""
    if len(x) != len(y):
        raise ValueError("kendall_tau_b needs two lists of one length")
    n = len(x)
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                tx += 1
                ty += 1
            elif dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - tx) * (n0 - ty))
    return (conc - disc) / denom if denom > 0 else None


def spearman_rho(x: list[float], y: list[float]) -> float | None:
    """Spearman's ρ: Pearson's correlation of the average ranks; None when either list is constant."""
    rx, ry = _ranks(x), _ranks(y)
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


@dataclass(frozen=True)
class OrderingVerdict:
    """The league against one reference ordering at one learning rate.

    Attributes:
        reference: the ordering compared with.
        lr: the learning rate.
        taus: per seed, Kendall's τ-b (None where undefined), in seed order.
        rhos: per seed, Spearman's ρ.
        seeds: the seeds with every variant of the ordering in the league and not diverged.
        tau: the t interval of the defined τs (:func:`~attncore.training.sink_stats.t_interval`).
        outcome: ``"agrees"``, ``"disagrees"``, ``"undecided"`` or ``"too few seeds"``.
        text: the verdict as a sentence, from these numbers.
    """

    reference: ReferenceOrdering
    lr: float
    taus: list[float | None]
    rhos: list[float | None]
    seeds: list[int]
    tau: dict[str, Any] = field(default_factory=dict)
    outcome: str = ""
    text: str = ""


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}"


def ordering_verdict(runs: list[dict[str, Any]], reference: ReferenceOrdering, lr: float) -> OrderingVerdict:
    """The rule of the module docstring on the league runs ``runs`` (records of
    :func:`attncore.training.league.league_record`) at learning rate ``lr``."""
    by_seed: dict[int, dict[str, float]] = {}
    for r in runs:
        cfg = r["config"]
        if float(cfg["lr"]) != float(lr) or r.get("diverged_at") is not None or r.get("sink_rate") is None:
            continue
        by_seed.setdefault(int(cfg["seed"]), {}).setdefault(str(cfg["variant"]), float(r["sink_rate"]))
    ref_rank = [float(len(reference.order) - i) for i in range(len(reference.order))]  # high = most sink
    seeds, taus, rhos = [], [], []
    for seed in sorted(by_seed):
        rates = by_seed[seed]
        if not all(v in rates for v in reference.order):
            continue
        ours = [rates[v] for v in reference.order]
        seeds.append(seed)
        taus.append(kendall_tau_b(ours, ref_rank))
        rhos.append(spearman_rho(ours, ref_rank))
    tau = t_interval(taus)
    if tau["lo"] is None:
        outcome = "too few seeds"
    elif tau["lo"] > 0:
        outcome = "agrees"
    elif tau["hi"] < 0:
        outcome = "disagrees"
    else:
        outcome = "undecided"
    n = tau["n"]
    src = f"{REFERENCES[reference.paper].short}, {reference.where}"
    per_seed = ", ".join(f"seed {s}: {_fmt(t)}" for s, t in zip(seeds, taus, strict=True)) or "none"
    if outcome == "too few seeds":
        text = (f"At learning rate {lr:g}, {n} seed(s) have a defined rank correlation with the ordering of "
                f"{src} (Kendall's τ-b per seed: {per_seed}): too few seeds for a verdict, which needs 2.")
    else:
        verb = {"agrees": "agrees with", "disagrees": "disagrees with", "undecided": "is undecided against"}
        text = (f"At learning rate {lr:g}, our sink-rate ordering {verb[outcome]} the order read from {src} "
                f"(issue 43's reading; the table itself not checked here): Kendall's "
                f"τ-b {tau['mean']:+.2f} over {n} seeds, 95% t interval [{tau['lo']:+.2f}, {tau['hi']:+.2f}] "
                f"({per_seed}); the rule: agrees when the interval lies above 0, disagrees when below.")
    return OrderingVerdict(reference, float(lr), taus, rhos, seeds, tau, outcome, text)


def ordering_verdicts(runs: list[dict[str, Any]],
                      reference: ReferenceOrdering | None = None) -> list[OrderingVerdict]:
    """:func:`ordering_verdict` at every learning rate of ``runs``, ascending."""
    ref = reference or REFERENCE_ORDERINGS["zuhri2025.t3"]
    lrs = sorted({float(r["config"]["lr"]) for r in runs})
    return [ordering_verdict(runs, ref, lr) for lr in lrs]


# ---------------------------------------------------------------------------- the league's shipped file


SHIPPED_FILES = ("league.jsonl", "league.partial.jsonl")
"""The league's shipped result files, the complete one first."""


def shipped_league(results_dir: str | Path | None = None) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """(file name, header, runs) of the shipped league: the complete file when it ships, else the partial
    one; ("", {}, []) when neither does."""
    from attncore.training.io import RESULTS_DIR
    from attncore.training.league import load_league

    base = Path(results_dir) if results_dir is not None else RESULTS_DIR
    for name in SHIPPED_FILES:
        if (base / name).is_file():
            header, runs = load_league(base / name)
            return name, header, runs
    return "", {}, []


def ordered_cells(table: list[dict[str, Any]], lr: float) -> list[dict[str, Any]]:
    """The league table's cells at learning rate ``lr`` (:func:`attncore.training.league.league_table`),
    most sink first: by mean sink rate descending, cells without one last, ties in the table's order."""
    cells = [c for c in table if float(c["lr"]) == float(lr)]
    return sorted(cells, key=lambda c: (c["sink_rate"]["mean"] is None, -(c["sink_rate"]["mean"] or 0.0)))


def cell_curves(runs: list[dict[str, Any]], variant: str, lr: float) -> list[dict[str, Any]]:
    """One cell's evaluation series, per seed (ascending): ``steps``, ``bos`` (the mean over the N x H heads
    of the weight on BOS from non-trigger positions), ``nowhere`` (the same mean of the weight sent nowhere)
    and ``loss`` (held-out loss) at each evaluation point, and the run's ``sink_rate``."""
    out = []
    for r in sorted((r for r in runs if r["config"]["variant"] == variant and float(r["config"]["lr"]) == lr),
                    key=lambda r: r["config"]["seed"]):
        if any(o["seed"] == r["config"]["seed"] for o in out):
            continue

        def head_mean(p: dict[str, Any], key: str) -> float | None:
            vals = [v for row in (p.get(key) or []) if row for v in row if v is not None]
            return sum(vals) / len(vals) if vals else None

        curves = r.get("curves") or []
        out.append({"seed": int(r["config"]["seed"]), "steps": list(r.get("steps") or [])[:len(curves)],
                    "bos": [head_mean(p, "bos_other") for p in curves],
                    "nowhere": [head_mean(p, "nowhere_other") for p in curves],
                    "loss": [p.get("loss") for p in curves], "sink_rate": r.get("sink_rate")})
    return out
