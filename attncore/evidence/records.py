"""The records of the evidence table: sources, claims, measurements and verdicts, and the shared rule pieces.

A :class:`Claim` is a short quote from one of the five source texts with three functions:
``measure(setting)`` returns a :class:`Measurement` (named numbers with their standard errors,
how they were obtained and at what scale), ``describe(measurement)`` the sentence the table shows,
and ``judge(measurement)`` a :class:`Judgement`: one of :data:`VERDICTS` and a one-line caveat, both
computed from the numbers by a rule whose tolerance the claim states (``tolerance``). Nothing in a
verdict is written by hand: feed other numbers and the verdict changes (the tests do).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "BASES",
    "CAVEAT",
    "EXACT",
    "FAILS",
    "HOLDS",
    "K_SE",
    "LIVE",
    "MISPRINT",
    "ROW_SUM_TOL",
    "SHIPPED",
    "SOURCES",
    "UNTESTABLE",
    "VERDICTS",
    "Claim",
    "Judgement",
    "Measurement",
    "Setting",
    "Source",
    "Value",
    "fmt",
    "fmt_pm",
    "fmt_row",
    "printed_half_unit",
    "z_score",
]

HOLDS = "holds"
CAVEAT = "holds with a caveat"
FAILS = "does not hold here"
MISPRINT = "misprint in the source"
UNTESTABLE = "not testable here"
VERDICTS: tuple[str, ...] = (HOLDS, CAVEAT, FAILS, MISPRINT, UNTESTABLE)

LIVE = "live"  # computed by attncore now, on the page's device
EXACT = "exact"  # arithmetic, closed forms or quadrature: the same on every machine
SHIPPED = "shipped"  # read from shipped results (attncore/training/results, attncore/decoder/results)
BASES: tuple[str, ...] = (LIVE, EXACT, SHIPPED)

# A measured value: a number, a name (a backend), a flag, or a structured result a rule reads
# (the Kernels page's probes).
Value = object


@dataclass(frozen=True)
class Source:
    """One of the five source texts.

    Attributes:
        key: short name (the page's URL filter value).
        title: the text's own title.
        kind: what it is (a tutorial, a book chapter, ...).
        short: a label that tells the five apart at a glance (two titles are nearly the same).
        authors: its authors, where the text names them ("" where the copy the app was built from does not).
        year: its year, where known ("").
        published: where it was published, where known ("").
        url: its public address, where known ("").
    """

    key: str
    title: str
    kind: str
    short: str
    authors: str = ""
    year: str = ""
    published: str = ""
    url: str = ""

    @property
    def label(self) -> str:
        """``“Title” (kind)``."""
        return f"“{self.title}” ({self.kind})"

    @property
    def full(self) -> str:
        """The full reference: authors (year). “Title”, kind. Address; and what the copy does not say."""
        who = (f"{self.authors}" + (f" ({self.year})" if self.year else "") + ". ") if self.authors else ""
        known = (("author", self.authors), ("date", self.year), ("address", self.url))
        missing = [w for w, v in known if not v]
        note = (f" The copy the app was built from gives no {', '.join(missing[:-1])}"
                f"{' or ' if len(missing) > 1 else ''}{missing[-1]}." if missing else "")
        where = f"{self.published}." if self.published else f"{self.kind}."
        return (f"{who}“{self.title}”. {where[0].upper()}{where[1:]}" + (f" Address: {self.url} ." if self.url
                                                                         else "") + note)


SOURCES: dict[str, Source] = {
    s.key: s
    for s in (
        Source(
            "notes",
            "Scaled dot product attention",
            "study notes after “Softmax attention is a fluke”",
            "Study notes: softmax, null attention",
        ),
        Source(
            "sqrtd", "Scaled Attention: Why √d Matters", "tutorial, section 5.3", "Why √d Matters (tutorial)"
        ),
        Source(
            "d2l",
            "Attention Scoring Functions",
            "Dive into Deep Learning, JAX edition",
            "d2l: Attention Scoring Functions",
            published="section 11.3 of Dive into Deep Learning, Cambridge University Press; arXiv:2106.11342",
            authors="Aston Zhang, Zachary C. Lipton, Mu Li, Alexander J. Smola",
            year="2023",
            url="https://d2l.ai/chapter_attention-mechanisms-and-transformers/attention-scoring-functions.html",
        ),
        Source(
            "graphcore",
            "Almost-scaled dot-product attention",
            "Graphcore research blog",
            "Graphcore: Almost-scaled attention",
            authors="Graphcore Research",
            url="https://graphcore-research.github.io/unit-scaling/posts/almost_scaled_dot_product_attention",
        ),
        Source(
            "sdpa",
            "Scaled Dot-Product Attention",
            "reference page on F.scaled_dot_product_attention",
            "SDPA reference page",
        ),
    )
}


@dataclass(frozen=True)
class Setting:
    """Where and how the live rows are measured: the page's Compute section (device, seed, input dtype)."""

    device: str = "cpu"
    seed: int = 0
    dtype: str = "float32"


@dataclass(frozen=True)
class Measurement:
    """What one claim's test measured.

    Attributes:
        values: named results: numbers, names (the backend torch chose), or what a rule reads whole
            (the Kernels page's probes).
        se: standard errors of some of ``values`` (same names), where they are random.
        basis: :data:`LIVE`, :data:`EXACT` or :data:`SHIPPED`.
        scale: how, where and at what size it was measured (shown beside the numbers).
        missing: non-empty when the test cannot run here; it says why (the verdict is then
            "not testable here" with this reason).
    """

    values: Mapping[str, Value] = field(default_factory=dict)
    se: Mapping[str, float] = field(default_factory=dict)
    basis: str = LIVE
    scale: str = ""
    missing: str = ""

    def __getitem__(self, name: str) -> Value:
        return self.values[name]

    def num(self, name: str) -> float:
        """``values[name]`` as a float."""
        return float(self.values[name])  # type: ignore[arg-type]

    def err(self, name: str) -> float:
        """The standard error of ``values[name]`` (0 when it is not random)."""
        return float(self.se.get(name, 0.0))

    def with_values(self, **changes: Value) -> Measurement:
        """A copy with some values replaced (how the tests feed counterfactual numbers)."""
        return Measurement({**self.values, **changes}, dict(self.se), self.basis, self.scale, self.missing)


@dataclass(frozen=True)
class Judgement:
    """A verdict (one of :data:`VERDICTS`) and its caveat in one line, generated from the numbers."""

    verdict: str
    caveat: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")


@dataclass(frozen=True)
class Claim:
    """One checkable claim of a source text, with its test, description and rule.

    Attributes:
        key: a stable short id.
        source: key of :data:`SOURCES` where the quote is from.
        quote: the claim, quoted (shortened with … where needed).
        test: what tests it, in plain words.
        tolerance: the rule's tolerance in plain words (generated from the rule's constants).
        measure: runs the test (``Setting`` in, :class:`Measurement` out).
        describe: the table's "measured" sentence, from the measurement's numbers.
        judge: the verdict rule: :class:`Measurement` in, :class:`Judgement` out.
        also: other sources that make the same claim.
        cites: papers the test follows or quotes (keys of :data:`attncore.citations.REFERENCES`).
        slow: measured in the page's second pass, after the table is first drawn (a timing, a memory
            measurement, a model, the gradient sweep).
    """

    key: str
    source: str
    quote: str
    test: str
    tolerance: str
    measure: Callable[[Setting], Measurement]
    describe: Callable[[Measurement], str]
    judge: Callable[[Measurement], Judgement]
    also: tuple[str, ...] = ()
    slow: bool = False
    cites: tuple[str, ...] = ()

    @property
    def sources(self) -> tuple[str, ...]:
        """The source and the others making the same claim."""
        return (self.source, *self.also)


# --------------------------------------------------------------------------- shared rule pieces

K_SE = 3.0  # a measured value agrees with a claimed one when within this many standard errors
ROW_SUM_TOL = 1e-5  # float32 softmax rows sum to 1 within this


def fmt(x: float, digits: int = 3) -> str:
    """``digits`` significant digits, no exponent for everyday sizes ('0.0012', '22.6', '1.2e+06')."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("∞" if x > 0 else "−∞")
    if x == 0:
        return "0"
    if 1e-4 <= abs(x) < 1e6:
        out = f"{x:#.{digits}g}"
        return out.rstrip(".") if "e" not in out else f"{x:.{digits}g}"
    return f"{x:.{digits - 1}e}"


def fmt_pm(x: float, se: float, digits: int = 3) -> str:
    """'8.02 ± 0.04' (the error to two significant digits)."""
    return f"{fmt(x, digits)} ± {se:.2g}"


def fmt_row(xs: Sequence[float], digits: int = 3) -> str:
    """'[0.371, 0.080, 0.353]' with a fixed number of decimals."""
    return "[" + ", ".join(f"{x:.{digits}f}" for x in xs) + "]"


def printed_half_unit(*texts: str) -> float:
    """Half a unit of the last printed digit of numbers as the source prints them ('0.31' -> 0.005); of a
    printed row, the finest entry's ('0.1', '0.25' -> 0.005)."""
    decimals = 0
    for text in texts:
        s = text.strip().lstrip("+-−")
        decimals = max(decimals, len(s.split(".", 1)[1]) if "." in s else 0)
    return 0.5 * 10.0 ** (-decimals)


def z_score(value: float, target: float, se: float) -> float:
    """``(value - target) / se``; infinite when se is 0 and they differ, 0 when they agree exactly."""
    if se > 0:
        return (value - target) / se
    return 0.0 if value == target else math.copysign(math.inf, value - target)
