"""Verdicts on the sink claims from the sink grid: does softmax form a sink, and does a denominator bias
remove it, at every setting tried, at some (which), or at none?

The cells are (variant x setting), a setting being (position encoding, learning rate, steps): the grid of
:mod:`attncore.training.sink_grid` (``sink_grid.jsonl``, possibly partial: cells with fewer seeds than
planned, or none yet) and the shipped null-attention experiment (``null_attention.json``, every variant at
one setting) as one more setting. Each run is judged by :mod:`attncore.training.sink_stats`' rules (learned,
end weight = the mean of the last few evaluation points, sink above 0.3, transient sink); a cell counts its
seeds. The rules of this module, in order:

* a cell whose usable seeds did not all learn the task says "not learned" and enters no verdict;
* softmax forms a sink at a setting when every usable seed of its cell has a sink, none when no seed has;
* a fix (a denominator-bias variant: softmax1, a sink logit at any start b₀; the grid runs :data:`FIXES`,
  the shipped experiment a sink logit starting at -5 too) keeps the sink at a setting when any of its
  seeds ends with one; it removes the sink there when no seed does *and* softmax forms one at that
  setting (otherwise there was nothing to remove, and the setting does not test the claim);
* the claim's verdict: "every" when the fixes removed the sink at every (fix, setting) pair that tested it,
  "none" when they kept it at every such pair, "some" otherwise (the pairs named), "untested" with none.

Seeds are never pooled across cells; a cell with 1 or 2 of its planned seeds counts with what it has and
says so. Every number a sentence quotes is the cell's.

Shape legend: ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncore.training.bbm import SINK_THRESHOLD, bbm_label
from attncore.training.null_verdicts import MATTERS
from attncore.training.sink_stats import LAST_POINTS, run_facts, t_interval
from attncore.training.verdicts import t_critical

__all__ = [
    "DENOMINATOR",
    "FIXES",
    "RULE_TEXT",
    "SOFTMAX",
    "Cell",
    "ClaimVerdict",
    "Setting",
    "SinkClaims",
    "fix_verdict",
    "grid_cells",
    "interval_text",
    "judge_cells",
    "num_text",
    "sink_claims",
    "softmax_verdict",
    "streaming_claim_sentence",
    "t_interval_of",
]

SOFTMAX = "softmax"
FIXES = ("softmax1", "sink logit b₀=0")  # the grid's fixes: a denominator term with no value behind it
DENOMINATOR = ("softmax1", "sink_logit")  # every variant with such a term (a sink logit at any start)


@dataclass(frozen=True, order=True)
class Setting:
    """Where a cell was trained: position encoding, peak learning rate, steps (the sizes are the
    shipped null-attention ones: 1 layer, 1 head, width 64, sequences of 64, batch 64)."""

    positions: str
    lr: float
    steps: int

    def text(self) -> str:
        """'rotary, lr 0.01, 600 steps'."""
        return f"{self.positions}, lr {self.lr:g}, {self.steps:,} steps"

    def key(self) -> str:
        """'rotary_0.01_600': a name for URLs."""
        return f"{self.positions}_{self.lr:g}_{self.steps}"


@dataclass(frozen=True)
class Cell:
    """One variant at one setting over its seeds.

    Attributes:
        label: the variant's label (``bbm_label``: 'softmax', 'sink logit b₀=0', ...).
        variant: its ``TrainConfig.variant``.
        setting: where it was trained.
        source: ``"grid"`` (sink_grid.jsonl) or ``"shipped"`` (null_attention.json).
        planned: the seeds the experiment plans for the cell.
        seeds: the seeds run so far (diverged ones included).
        n_usable: runs that did not diverge; ``n_learned``: those that learned the task; ``n_sink``: those
            whose end weight is above the threshold; ``n_transient``: those that crossed it and ended at
            or below it.
        end: :func:`~attncore.training.sink_stats.t_interval` of the usable seeds' end weights.
        end_steps: the evaluation steps the end weight averages.
        per_seed: per run: seed, end weight, sink, transient, learned, crossing, diverged_at, and the
            curve (steps, BOS weight from non-trigger positions at the sink head).
    """

    label: str
    variant: str
    setting: Setting
    source: str
    planned: int
    seeds: tuple[int, ...]
    n_usable: int
    n_learned: int
    n_sink: int
    n_transient: int
    end: dict[str, Any]
    end_steps: tuple[int, ...]
    per_seed: tuple[dict[str, Any], ...]

    @property
    def n_run(self) -> int:
        """Seeds run so far."""
        return len(self.seeds)

    @property
    def learned(self) -> bool:
        """Every usable seed learned the task (and there is one)."""
        return self.n_usable > 0 and self.n_learned == self.n_usable

    @property
    def share(self) -> float | None:
        """Share of usable seeds with a sink (None without one)."""
        return self.n_sink / self.n_usable if self.n_usable else None

    @property
    def status(self) -> str:
        """'not run', 'diverged', 'not learned', 'sink' (every seed), 'no sink' (none) or 'mixed'."""
        if not self.seeds:
            return "not run"
        if not self.n_usable:
            return "diverged"
        if not self.learned:
            return "not learned"
        return "sink" if self.n_sink == self.n_usable else "no sink" if self.n_sink == 0 else "mixed"

    def seeds_text(self) -> str:
        """'3 of 3 seeds run' / '1 of 3 seeds run'."""
        return f"{self.n_run} of {self.planned} seed{'s' if self.planned != 1 else ''} run"

    def sinks_text(self) -> str:
        """'a sink in 2 of 3 seeds' / 'no sink in 3 of 3 seeds, a transient sink in 1' / 'a sink in 1 of 1
        seed, 1 of 3 seeds run'."""
        n = self.n_usable
        head = (f"no sink in {n} of {n} seed{'s' if n != 1 else ''}" if self.n_sink == 0 else
                f"a sink in {self.n_sink} of {n} seed{'s' if n != 1 else ''}")
        if self.n_transient:
            head += f", a transient sink in {self.n_transient}"
        if self.n_run < self.planned:
            head += f", {self.seeds_text()}"
        return head


def num_text(x: float, digits: int = 2) -> str:
    """'0.42', or '3.3e-04' where two decimals would print a non-zero number as 0.00."""
    return f"{x:.{digits}f}" if x == 0 or abs(x) >= 0.5 * 10 ** -digits else f"{x:.1e}"


def interval_text(end: dict[str, Any], digits: int = 2) -> str:
    """The end weight with its interval: '0.42 ± 0.06, a 95% t interval over 3 seeds (t = 4.30)', '0.42, one
    seed: no interval', 'no run'."""
    if end.get("mean") is None:
        return "no run"
    m = num_text(end["mean"], digits)
    if end.get("half") is None:
        return f"{m}, one seed: no interval"
    half = num_text(end['half'], digits)
    return f"{m} ± {half}, a 95% t interval over {end['n']} seeds (t = {end['t']:.2f})"


def _seed_facts(run: dict[str, Any]) -> dict[str, Any]:
    f = run_facts(run)
    return {"seed": int(run["config"]["seed"]), "bos_end": f.get("bos_end"), "sink": bool(f.get("sink")),
            "transient": bool(f.get("transient")), "learned": bool(f.get("learned")),
            "usable": bool(f.get("usable")), "crossing": f.get("crossing"),
            "diverged_at": run.get("diverged_at"), "steps": list(f.get("steps") or []),
            "curve": list(f.get("bos_other_curve") or []), "end_steps": list(f.get("end_steps") or [])}


def _cell(label: str, variant: str, setting: Setting, source: str, planned: int,
          runs: list[dict[str, Any]]) -> Cell:
    first = {int(r["config"]["seed"]): r for r in reversed(runs)}  # a seed counts once: its first run
    facts = sorted((_seed_facts(r) for r in first.values()), key=lambda f: f["seed"])
    ok = [f for f in facts if f["usable"]]
    ends = max((f["end_steps"] for f in ok), key=lambda s: s[-1] if s else -1, default=[])
    return Cell(label=label, variant=variant, setting=setting, source=source, planned=planned,
                seeds=tuple(f["seed"] for f in facts), n_usable=len(ok),
                n_learned=sum(f["learned"] for f in ok), n_sink=sum(f["sink"] for f in ok),
                n_transient=sum(f["transient"] for f in ok), end=t_interval([f["bos_end"] for f in ok]),
                end_steps=tuple(ends), per_seed=tuple(facts))


def _setting_of(config: dict[str, Any]) -> Setting:
    return Setting(str(config.get("positions", "rotary")), float(config["lr"]), int(config["steps"]))


def grid_cells(header: dict[str, Any], runs: list[dict[str, Any]],
               shipped: dict[str, Any] | None = None) -> tuple[Cell, ...]:
    """Every cell of the grid (the header's planned cells, run or not, then any other setting its runs
    used) and, given the shipped null-attention result, every variant at its setting; ordered by
    setting (positions, rate, steps), then the grid's variant order."""
    plan = header.get("grid") or {}
    planned_seeds = len(plan.get("seeds") or []) or 1
    groups: dict[tuple[str, Setting], list[dict[str, Any]]] = {}
    variant_of: dict[str, str] = {}
    order: list[str] = []
    if plan:
        steps = int(plan["base"]["steps"])
        for v in plan.get("variants") or []:
            label = bbm_label({"seed": 0, **v}, with_seed=False)
            variant_of[label] = v["variant"]
            order.append(label)
            for pos in plan.get("positions") or []:
                for lr in plan.get("lrs") or []:
                    groups.setdefault((label, Setting(str(pos), float(lr), steps)), [])
    for r in runs:
        label = bbm_label(r["config"], with_seed=False)
        variant_of.setdefault(label, r["config"]["variant"])
        if label not in order:
            order.append(label)
        groups.setdefault((label, _setting_of(r["config"])), []).append(r)
    cells = [_cell(label, variant_of[label], setting, "grid", planned_seeds, rs)
             for (label, setting), rs in groups.items()]
    if shipped and shipped.get("runs"):
        sh: dict[tuple[str, Setting], list[dict[str, Any]]] = {}
        for r in shipped["runs"]:
            label = bbm_label(r["config"], with_seed=False)
            variant_of.setdefault(label, r["config"]["variant"])
            if label not in order:
                order.append(label)
            sh.setdefault((label, _setting_of(r["config"])), []).append(r)
        n_planned = int((shipped.get("sizes") or {}).get("seeds") or 0)
        cells += [_cell(label, variant_of[label], setting, "shipped", max(n_planned, len(rs)), rs)
                  for (label, setting), rs in sh.items()]
    rank = {label: i for i, label in enumerate(order)}
    return tuple(sorted(cells, key=lambda c: (c.setting, rank[c.label], c.source)))


# ---------------------------------------------------------------------------- the verdicts


@dataclass(frozen=True)
class ClaimVerdict:
    """A claim judged over the settings.

    Attributes:
        kind: ``"every"``, ``"some"``, ``"none"`` or ``"untested"``.
        text: the verdict as a sentence, with the settings named and their numbers.
        held: the (label, setting) pairs where the claim held; ``failed``: where it did not;
        skipped: (label, setting, why) of the cells that entered no verdict.
        headline: the verdict alone, one sentence ('… removes the sink at some settings only.').
    """

    kind: str
    text: str
    held: tuple[tuple[str, Setting], ...]
    failed: tuple[tuple[str, Setting], ...]
    skipped: tuple[tuple[str, Setting, str], ...]
    headline: str = ""


@dataclass(frozen=True)
class SinkClaims:
    """The two sink claims judged from the same cells: ``sinks`` (softmax learns a sink) and ``fixes`` (a
    denominator bias removes it), and the cells themselves."""

    sinks: ClaimVerdict
    fixes: ClaimVerdict
    cells: tuple[Cell, ...]


def _by(cells: tuple[Cell, ...] | list[Cell], label: str) -> dict[Setting, Cell]:
    return {c.setting: c for c in cells if c.label == label}


def _partial(cells: tuple[Cell, ...] | list[Cell], labels: tuple[str, ...]) -> str:
    """' The grid is partial: …' for these variants' grid cells ('' when complete)."""
    grid = [c for c in cells if c.source == "grid" and c.label in labels]
    runs, planned = sum(c.n_run for c in grid), sum(c.planned for c in grid)
    if not grid or runs >= planned:
        return ""
    unrun = sum(1 for c in grid if not c.seeds)
    short = sum(1 for c in grid if 0 < c.n_run < c.planned)
    parts = [f"{runs} of the {planned} runs of {', '.join(dict.fromkeys(c.label for c in grid))} so far"]
    if short:
        parts.append(f"{short} cell{'s' if short != 1 else ''} with fewer seeds than planned")
    if unrun:
        parts.append(f"{unrun} of {len(grid)} cells not run yet")
    return " The grid is partial: " + ", ".join(parts) + "; a verdict covers only what was run."


def _so_far(cells: tuple[Cell, ...] | list[Cell], labels: tuple[str, ...]) -> str:
    """' (the grid so far: 12 of its 54 runs)' for a headline ('' when the grid is complete)."""
    grid = [c for c in cells if c.source == "grid" and c.label in labels]
    runs, planned = sum(c.n_run for c in grid), sum(c.planned for c in grid)
    return f" (the grid so far: {runs} of its {planned} runs)" if grid and runs < planned else ""


def _skipped_text(skipped: list[tuple[str, Setting, str]]) -> str:
    if not skipped:
        return ""
    return " No verdict from " + "; ".join(f"{label} at {s.text()} ({why})" for label, s, why in skipped) \
        + "."


def _skip_reason(c: Cell) -> str | None:
    if c.status == "not run":
        return None  # counted in the partial-grid note
    if c.status == "diverged":
        return f"every seed diverged, {c.seeds_text()}"
    if c.status == "not learned":
        seeds = f"seed{'s' if c.n_usable != 1 else ''}"
        return f"not learned: {c.n_learned} of {c.n_usable} {seeds} learned the task"
    return None


def softmax_verdict(cells: tuple[Cell, ...] | list[Cell]) -> ClaimVerdict:
    """Does softmax form a sink at every setting tried, at some, or at none (rules: module docstring)."""
    held, failed, skipped, mixed = [], [], [], []
    for s, c in sorted(_by(cells, SOFTMAX).items()):
        why = _skip_reason(c)
        if why:
            skipped.append((SOFTMAX, s, why))
        elif c.status == "sink":
            held.append(c)
        elif c.status == "no sink":
            failed.append(c)
        elif c.status == "mixed":
            mixed.append(c)

    def items(cs: list[Cell]) -> str:
        return "; ".join(f"{c.setting.text()} ({c.sinks_text()}; end weight {interval_text(c.end)})"
                         for c in cs)

    # "every setting tried" only where every setting tried entered the verdict; else the settings judged
    judged = len(held) + len(failed) + len(mixed)
    where = "" if not skipped else (
        f" where it learned the task ({judged} of the {judged + len(skipped)} settings tried)")
    every, none = (("setting tried", "the settings tried") if not where else
                   ("setting" + where, "the settings" + where))
    if not held and not failed and not mixed:
        kind = "untested"
        text = "No softmax cell learned the task yet, so no setting tests whether a sink forms."
    elif held and not failed and not mixed:
        kind, text = "every", f"Softmax forms a sink at every {every}: {items(held)}."
    elif not held and not mixed:
        kind, text = "none", f"Softmax forms a sink at none of {none}: {items(failed)}."
    else:
        kind = "some"
        parts = [f"Softmax forms a sink at some settings only: in every seed at {items(held)}" if held else
                 "Softmax forms a sink in every seed at no setting"]
        if mixed:
            parts.append(f"in some seeds at {items(mixed)}")
        if failed:
            parts.append(f"in none at {items(failed)}")
        text = "; ".join(parts) + "."
    headline = {"every": f"Softmax forms a sink at every {every}.",
                "none": f"Softmax forms a sink at none of {none}.",
                "some": "Softmax forms a sink at some settings only."}.get(kind, text)
    headline = headline[:-1] + _so_far(cells, (SOFTMAX,)) + "." if kind != "untested" else headline
    text += _skipped_text(skipped) + _partial(cells, (SOFTMAX,))
    return ClaimVerdict(kind, text, tuple((SOFTMAX, c.setting) for c in held),
                        tuple((SOFTMAX, c.setting) for c in failed + mixed), tuple(skipped), headline)


def fix_verdict(cells: tuple[Cell, ...] | list[Cell], fixes: tuple[str, ...] | None = None) -> ClaimVerdict:
    """Does a denominator bias remove the sink at every setting tried, at some, or at none (rules: module
    docstring)? ``fixes``: the labels judged (default: every :data:`DENOMINATOR` variant in the cells, a
    sink logit's start b₀ being part of its setting)."""
    if fixes is None:
        fixes = tuple(dict.fromkeys(c.label for c in cells if c.variant in DENOMINATOR))
    soft = _by(cells, SOFTMAX)
    removed: list[Cell] = []
    kept: list[Cell] = []
    skipped: list[tuple[str, Setting, str]] = []
    for fix in fixes:
        for s, c in sorted(_by(cells, fix).items()):
            why = _skip_reason(c)
            if c.status == "not run":
                continue
            if why:
                skipped.append((fix, s, why))
            elif c.n_sink > 0:
                kept.append(c)
            elif s in soft and soft[s].status == "sink":
                removed.append(c)
            else:
                sc = soft.get(s)
                state = ("softmax not run there yet" if sc is None or sc.status == "not run" else
                         f"softmax {sc.sinks_text()} there" if sc.learned else f"softmax {sc.status} there")
                skipped.append((fix, s, f"no sink, but nothing to remove: {state}"))

    def items(cs: list[Cell]) -> str:
        return "; ".join(f"{c.label} at {c.setting.text()} ({c.sinks_text()}; end weight "
                         f"{interval_text(c.end)})" for c in cs)

    name = "A denominator bias (" + ", ".join(fixes) + ")"
    if not removed and not kept:
        kind, text = "untested", f"No setting has tested whether {name[2:]} removes the sink yet."
    elif removed and not kept:
        kind, text = "every", f"{name} removes the sink at every setting tried: {items(removed)}."
    elif kept and not removed:
        kind = "none"
        text = f"{name} removes the sink at none of the settings tried: it kept one at {items(kept)}."
    else:
        kind = "some"
        text = (f"{name} removes the sink at some settings only. Removed: {items(removed)}. Kept: "
                f"{items(kept)}.")
    headline = {"every": f"{name} removes the sink at every setting tried.",
                "none": f"{name} removes the sink at none of the settings tried.",
                "some": f"{name} removes the sink at some settings only."}.get(kind, text)
    headline = headline[:-1] + _so_far(cells, (SOFTMAX, *fixes)) + "." if kind != "untested" else headline
    text += _skipped_text(skipped) + _partial(cells, (SOFTMAX, *fixes))
    return ClaimVerdict(kind, text, tuple((c.label, c.setting) for c in removed),
                        tuple((c.label, c.setting) for c in kept), tuple(skipped), headline)


def sink_claims(header: dict[str, Any], runs: list[dict[str, Any]],
                shipped: dict[str, Any] | None = None) -> SinkClaims:
    """Both sink claims judged from the grid (its header and runs) and the shipped null-attention result:
    the one verdict the Training lab, the Attention sinks page and the Evidence page read."""
    return judge_cells(grid_cells(header, runs, shipped))


def judge_cells(cells: tuple[Cell, ...]) -> SinkClaims:
    """Both sink claims judged from these cells (:func:`grid_cells`; a test may change them)."""
    return SinkClaims(softmax_verdict(cells), fix_verdict(cells), tuple(cells))


RULE_TEXT = (
    f"A run has a sink when non-trigger positions put more than {SINK_THRESHOLD:g} of their weight on BOS, "
    f"averaged over its last {LAST_POINTS} evaluation points (a transient sink: it crossed "
    f"{SINK_THRESHOLD:g} earlier and ended at or below it); a cell's interval "
    "is its mean ± t(0.975, n − 1) standard errors over "
    f"its n seeds (t = {t_critical(2):.2f} at 3 seeds, {t_critical(1):.2f} at 2; none from 1 seed)."
)
"""The rules in one paragraph, for the pages (numbers from the constants)."""


# ---------------------------------------------------------------------------- StreamingLLM in the toy


def streaming_claim_sentence(soft: dict[str, Any], window: int | None = None) -> str:
    """Does the toy reproduce StreamingLLM's claim (a sliding window fails once the sink is evicted)?
    From softmax's summary (:func:`~attncore.training.sink_stats.summarise`): the loss change at
    non-trigger positions when BOS is evicted from the window (``evict_bigram``) and when it is hidden from
    every query (``ablation_bigram``). Rule: reproduced when evicting costs more than :data:`MATTERS` nats
    and its 95% t interval lies above 0; else the sentence says plainly that the toy does not reproduce it."""
    e, a = soft.get("evict_bigram") or {}, soft.get("ablation_bigram") or {}
    if e.get("mean") is None:
        return "No streaming test ran for softmax here, so the toy says nothing about StreamingLLM's claim."
    ei, ai = t_interval_of(e), t_interval_of(a)
    w = f" of {window} tokens" if window else ""

    def num(s: dict[str, Any]) -> str:
        if s.get("mean") is None:
            return "not measured"
        iv = f" (95% t interval {s['lo']:+.4f} to {s['hi']:+.4f}, {s['n']} seeds)" if s.get("half") else ""
        return f"{s['mean']:+.4f} nats{iv}"

    nums = (f"for softmax, evicting BOS from a sliding window{w} changes the loss at non-trigger "
            "positions by "
            f"{num(ei)}, and hiding BOS from every query by {num(ai)}")
    if ei["mean"] > MATTERS and ei.get("lo") is not None and ei["lo"] > 0:
        return f"The toy reproduces StreamingLLM's claim: {nums}."
    return (f"The toy does not reproduce StreamingLLM's claim that a window fails once the sink is evicted: "
            f"{nums}; this page counts a change as mattering from {MATTERS:g} nats. The claim is about large "
            "language models, and a test on one is where it lives.")


def t_interval_of(s: dict[str, Any]) -> dict[str, Any]:
    """A :func:`~attncore.training.sink_stats.mean_se` entry with its 95% t interval added (none from one
    value)."""
    n, se = s.get("n") or 0, s.get("se")
    if s.get("mean") is None or n < 2 or se is None:
        return {**s, "t": None, "half": None, "lo": None, "hi": None}
    t = t_critical(n - 1)
    return {**s, "t": t, "half": t * se, "lo": s["mean"] - t * se, "hi": s["mean"] + t * se}
