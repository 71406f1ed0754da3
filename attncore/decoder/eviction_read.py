"""What an eviction run says: perplexity against budget per policy beside dense, which policy wins at each
budget and by how much, the share of kept slots each policy spends on the first tokens, and the split of a
window's extra loss into the part the kept first tokens recover (the sink) and the part no first token
recovers (context the window lacks), each with a 95% t interval over blocks of the text.

Shape legend as in :mod:`attncore.decoder.eviction`: ``L`` tokens, ``T`` = L - 1 steps, ``Bk`` a budget.

The same numbers are read from a live :class:`~attncore.decoder.eviction.EvictionResult` (the Attention sinks
panel) and from the shipped run (:class:`~attncore.decoder.eviction_run.EvictionRun`, one text at a time):
both become a :class:`PolicyLosses`. Every comparison at a budget ``Bk`` is over the steps ``Bk``..T-1, where
the cache is full and eviction has taken effect (before that every policy equals dense); the uncertainty is a
t interval over consecutive blocks of :data:`~attncore.decoder.streaming.BLOCK` steps (the block means are
nearly independent; the steps within one are not).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attncore.decoder.eviction import SINKS, EvictionResult, EvictionSetting
from attncore.decoder.eviction_run import EvictionRun, run_settings
from attncore.decoder.streaming import BLOCK
from attncore.errors import AttnInputError
from attncore.stats import t_critical

__all__ = [
    "POLICY_NAMES",
    "Interval",
    "PolicyLosses",
    "Split",
    "Winner",
    "block_interval",
    "expected_decodes",
    "first_shares",
    "first_token_sentence",
    "from_result",
    "from_run",
    "nll_stack",
    "run_progress",
    "split",
    "split_sentence",
    "winner",
    "winner_sentence",
]

POLICY_NAMES: dict[str, str] = {"dense": "dense", "window": "window", "streaming": f"window + first {SINKS}",
                                "h2o": "H2O", "tova": "TOVA"}


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% t interval [lo, hi] over ``n`` blocks (NaN bounds with fewer than 2 blocks)."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def above_zero(self) -> bool:
        """The whole interval is above 0."""
        return self.lo > 0

    @property
    def below_zero(self) -> bool:
        """The whole interval is below 0."""
        return self.hi < 0

    def text(self, digits: int = 3) -> str:
        """'0.123 nats/token [0.100, 0.146]' (with fewer than 2 blocks: no interval, said in words)."""
        if math.isnan(self.lo):
            return f"{self.mean:.{digits}f} nats/token (no interval: fewer than 2 blocks of {BLOCK} tokens)"
        return f"{self.mean:.{digits}f} nats/token [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def block_interval(x: Tensor, block: int = BLOCK) -> Interval:
    """Mean of ``x`` (n,) and the 95% t interval of the means of its consecutive blocks of ``block`` values
    (a tail shorter than a block is left out of the interval, not of the mean)."""
    x = x.double()
    n = int(x.numel())
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    m = float(x.mean())
    nb = n // block
    if nb < 2:
        return Interval(m, math.nan, math.nan, nb)
    means = x[: nb * block].view(nb, block).mean(dim=1)
    half = t_critical(nb - 1) * float(means.std(unbiased=True)) / math.sqrt(nb)
    return Interval(m, m - half, m + half, nb)


@dataclass(frozen=True)
class PolicyLosses:
    """One text's per-step losses: ``dense`` (T,), ``rows`` (policy, budget) -> (T,) float64 nats, and
    ``first`` (policy, budget) -> the share of the full cache's slots holding one of the first
    :data:`SINKS` positions (over the recorded layers); ``length`` L; ``text`` its name."""

    text: str
    length: int
    dense: Tensor
    rows: Mapping[tuple[str, int], Tensor]
    first: Mapping[tuple[str, int], float]

    @property
    def budgets(self) -> tuple[int, ...]:
        """The budgets present, ascending."""
        return tuple(sorted({b for _, b in self.rows}))

    def policies(self, budget: int) -> tuple[str, ...]:
        """The policies present at ``budget``, in :data:`POLICY_NAMES`' order."""
        return tuple(p for p in POLICY_NAMES if (p, budget) in self.rows)

    def diff(self, policy: str, budget: int, against: str = "dense") -> Interval:
        """Loss of ``policy`` minus ``against``'s (a policy at the same budget, or dense) past the budget."""
        a = self.dense if against == "dense" else self.rows[(against, budget)]
        return block_interval(self.rows[(policy, budget)][budget:] - a[budget:])

    def ppl(self, policy: str, budget: int) -> float:
        """Perplexity of ``policy`` (or dense) over steps ``budget``..T-1."""
        x = self.dense if policy == "dense" else self.rows[(policy, budget)]
        return math.exp(float(x[budget:].mean()))

    def ratio(self, policy: str, budget: int) -> float:
        """Perplexity over dense's on the same steps (past the budget)."""
        return self.ppl(policy, budget) / self.ppl("dense", budget)


def from_result(r: EvictionResult, text: str) -> PolicyLosses:
    """A live result with a dense row as :class:`PolicyLosses`."""
    dense = EvictionSetting("dense")
    if dense not in r.settings:
        raise AttnInputError("the comparison needs the dense decode; it has not run yet.")
    rows = {(s.policy, int(s.budget)): r.nll[r.index(s)].double() for s in r.settings
            if s.policy != "dense" and s.budget is not None}
    first = {(s.policy, int(s.budget)): r.first_share(s) for s in r.settings
             if s.policy != "dense" and s.budget is not None}
    return PolicyLosses(text, r.length, r.nll[r.index(dense)].double(), rows, first)


def _mean_share(per_layer: Sequence[float]) -> float:
    vals = [float(v) for v in per_layer if v >= 0]
    return sum(vals) / len(vals) if vals else math.nan


def from_run(run: EvictionRun, text: str) -> PolicyLosses:
    """One text of the shipped run as :class:`PolicyLosses` (:class:`AttnInputError` without its dense
    row)."""
    if (text, "dense", None) not in run.rows:
        raise AttnInputError(f"the run has no dense decode of the {text} text yet.")
    rows = {(p, int(b)): run.nll(t, p, b) for (t, p, b) in run.rows if t == text and b is not None}
    first = {(p, int(b)): _mean_share(r["first_share"][str(SINKS)]) for (t, p, b), r in run.rows.items()
             if t == text and b is not None}
    return PolicyLosses(run.header.get("texts", {}).get(text, {}).get("name", text),
                        int(run.header["length"]), run.nll(text, "dense", None), rows, first)


def expected_decodes(run: EvictionRun) -> int:
    """Decodes a complete run holds: every text under every setting (34 at 2,048 tokens, two texts)."""
    return len(run.header.get("texts", {})) * len(run_settings(int(run.header["length"])))


def run_progress(run: EvictionRun) -> str:
    """'4 of 34 decodes; the rest still to be computed.' (or 'all 34 decodes.')."""
    n, total = len(run.rows), expected_decodes(run)
    if n >= total:
        return f"all {total} decodes."
    return f"{n} of {total} decodes; the rest still to be computed."


def first_shares(pl: PolicyLosses) -> dict[tuple[str, int], float]:
    """(policy, budget) -> share of kept slots on the first :data:`SINKS` positions (StreamingLLM's is
    SINKS / budget by construction)."""
    return dict(pl.first)


@dataclass(frozen=True)
class Winner:
    """At one ``budget``: the ``best`` policy (lowest loss past the budget), its perplexity ratio to dense,
    the ``second`` policy, and ``gap`` = second - best (nats/token, t interval; None with one policy)."""

    budget: int
    best: str
    ratio: float
    second: str | None
    gap: Interval | None


def winner(pl: PolicyLosses, budget: int) -> Winner:
    """The :class:`Winner` at ``budget``."""
    ps = sorted(pl.policies(budget), key=lambda p: float(pl.rows[(p, budget)][budget:].mean()))
    if not ps:
        raise AttnInputError(f"no policy ran at a budget of {budget}.")
    best = ps[0]
    second = ps[1] if len(ps) > 1 else None
    gap = pl.diff(second, budget, against=best) if second is not None else None
    return Winner(budget, best, pl.ratio(best, budget), second, gap)


def winner_sentence(pl: PolicyLosses, budgets: Sequence[int] | None = None) -> str:
    """Which policy wins at which budget (every budget of ``pl``, or ``budgets``) and by how much, from the
    numbers; a lead whose t interval includes 0 is called a tie within noise."""
    parts = []
    for b in pl.budgets if budgets is None else budgets:
        w = winner(pl, b)
        head = f"at {b:,} keys {POLICY_NAMES[w.best]} is lowest ({w.ratio:.3f}× dense perplexity)"
        if w.second is None or w.gap is None:
            parts.append(head)
        elif w.gap.above_zero:
            parts.append(f"{head}, {w.gap.mean:.3f} nats/token below {POLICY_NAMES[w.second]} (95% t "
                         "interval "
                         f"[{w.gap.lo:.3f}, {w.gap.hi:.3f}] over {w.gap.n} blocks of {BLOCK} tokens)")
        elif math.isnan(w.gap.lo):
            parts.append(f"{head}, {w.gap.mean:.3f} nats/token below {POLICY_NAMES[w.second]} (too few "
                         "tokens "
                         f"past the budget for an interval)")
        else:
            parts.append(f"{head}, but within noise of {POLICY_NAMES[w.second]} ({w.gap.mean:.3f} "
                         "nats/token, "
                         f"95% t interval [{w.gap.lo:.3f}, {w.gap.hi:.3f}])")
    if not parts:
        return "No policy has run yet."
    s = "; ".join(parts)
    return s[0].upper() + s[1:] + "."


@dataclass(frozen=True)
class Split:
    """A window's extra loss at one budget on one text, split (nats/token past the budget, t intervals):

    ``window`` window - dense; ``sink`` window - (window + first k), what the first tokens recover;
    ``lacks`` (window + first k) - dense, context the window lacks beyond the sink; ``best`` the best
    policy - dense (``best_policy``); ``most`` (window - (window + first k)) - (window - dense) / 2, above 0
    when the first tokens recover more than half of the window's loss; ``explained`` sink / window means.
    """

    budget: int
    window: Interval
    sink: Interval
    lacks: Interval
    best: Interval
    best_policy: str
    most: Interval
    explained: float


def split(pl: PolicyLosses, budget: int) -> Split:
    """:class:`Split` at ``budget`` (needs the window and StreamingLLM rows there)."""
    if ("window", budget) not in pl.rows or ("streaming", budget) not in pl.rows:
        raise AttnInputError(f"the split needs the window and StreamingLLM decodes at {budget} keys.")
    d = pl.dense[budget:]
    w = pl.rows[("window", budget)][budget:]
    s = pl.rows[("streaming", budget)][budget:]
    best = winner(pl, budget).best
    b = pl.rows[(best, budget)][budget:]
    win = block_interval(w - d)
    sink = block_interval(w - s)
    explained = sink.mean / win.mean if win.mean else math.nan
    return Split(budget, win, sink, block_interval(s - d), block_interval(b - d), best,
                 block_interval((w - s) - 0.5 * (w - d)), explained)


def split_sentence(sp: Split, text: str) -> str:
    """One text's split at one budget, in words from the numbers (no verdict words without an interval)."""
    if math.isnan(sp.window.lo):
        return (f"{text}, {sp.budget:,} keys: the window loses {sp.window.text()}; the first {SINKS} tokens "
                f"recover {sp.sink.mean:.3f} of it, {sp.lacks.mean:.3f} stays above dense: too few tokens "
                "past the budget to tell the sink from the context it lacks.")
    if not sp.window.above_zero:
        return (f"{text}, {sp.budget:,} keys: the window alone is within noise of dense "
                f"({sp.window.text()}), so there is nothing for the first tokens to recover.")
    lacks = (f"the remaining {sp.lacks.text()} is context the window lacks" if sp.lacks.above_zero else
             f"what remains ({sp.lacks.text()}) is within noise of dense")
    best = ("" if sp.best_policy == "streaming" else
            f"; the best policy, {POLICY_NAMES[sp.best_policy]}, stays {sp.best.text()} above dense")
    return (f"{text}, {sp.budget:,} keys: the window loses {sp.window.text()}; keeping the first {SINKS} "
            "tokens "
            f"recovers {sp.sink.text()} ({sp.explained:.0%}); {lacks}{best}.")



def first_token_sentence(pl: PolicyLosses) -> str:
    """The share of kept slots each policy spends on the first tokens, at the smallest budget present."""
    if not pl.budgets:
        return ""
    b = pl.budgets[0]
    bits = [f"{POLICY_NAMES[p]} {pl.first[(p, b)]:.1%}" for p in pl.policies(b)
            if (p, b) in pl.first and not math.isnan(pl.first[(p, b)])]
    if not bits:
        return ""
    return (f"Share of the full cache's slots holding one of the first {SINKS} tokens at {b:,} keys (keeping "
            f"them costs {SINKS} of {b:,} slots, {SINKS / b:.1%}): " + ", ".join(bits) + ".")



def nll_stack(pl: PolicyLosses, budget: int) -> tuple[tuple[str, ...], Tensor]:
    """(names, (P + 1, T) losses): dense then each policy at ``budget``."""
    ps = pl.policies(budget)
    return ("dense", *ps), torch.stack([pl.dense, *(pl.rows[(p, budget)] for p in ps)])

