"""Predict, then reveal (issue 41, item 3): the Tour's questions, whose answers the numbers decide.

A question is asked from a step's control values alone (:attr:`Asked.ask`), so the worksheet can print it
without computing the step; its options are made from the same values and closed forms as the lesson (√d at
this d, log(n₁/n₀) for these lengths), so they stay true when the control moves. The answer is decided by
the numbers the step measured (:attr:`Asked.key`, from ``Shown.numbers``): a multiple-choice question's
correct option is the one whose prediction is nearest the measurement, a numeric question's answer is the
measured number with a stated tolerance. A question whose options cannot be told apart at these values (every
law of growth gives 1 at d = 1) is not asked.

Plain functions of numbers: no streamlit, so ``tests/test_questions.py`` feeds them counterfactual numbers.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["QUESTIONS", "Asked", "Key", "Question", "ask", "bucket", "buckets", "key", "score"]

CHOICE_LIMIT = 6  # options per question (the class poll's bound too)
NUMBER_LIMIT = 1e12  # a numeric answer beyond this is not a prediction


@dataclass(frozen=True)
class Question:
    """What a student sees before the reveal: the prompt, and its options (none: answer with a number)."""

    step: str
    prompt: str
    options: tuple[str, ...] = ()
    unit: str = ""  # a numeric answer's unit, said next to the box

    @property
    def numeric(self) -> bool:
        return not self.options

    @property
    def qid(self) -> str:
        """One id per question as asked (the step and its wording): answers and class counts are kept by it,
        so moving the step's control asks, and counts, a new question."""
        text = "\x1f".join((self.step, self.prompt, *self.options))
        return f"{self.step}:{hashlib.sha1(text.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Key:
    """The answer the numbers decide: the correct option, or a value and the absolute tolerance around it;
    ``why`` says which measured number decided it."""

    why: str
    correct: int | None = None
    value: float | None = None
    tolerance: float = 0.0


@dataclass(frozen=True)
class Asked:
    """A step's question: ``ask`` from its control values (by URL name), ``key`` from its numbers."""

    ask: Callable[[Mapping[str, Any]], Question | None]
    key: Callable[[Question, Mapping[str, Any], Mapping[str, Any]], Key]  # (question, values, numbers)


def _g(x: float, digits: int = 3) -> str:
    return f"{x:#.{digits}g}".rstrip(".")


def nearest(predictions: list[float], measured: float, *, log: bool = False) -> int:
    """The index of the prediction nearest the measurement (on a log scale with ``log``)."""
    f = (lambda v: math.log(max(v, 1e-300))) if log else (lambda v: v)
    return min(range(len(predictions)), key=lambda i: abs(f(predictions[i]) - f(measured)))


def _distinct(predictions: list[float], rel: float = 0.25) -> bool:
    """Every pair of predictions at least ``rel`` apart (relative), so the measurement can tell them apart."""
    p = sorted(predictions)
    return all(b - a > rel * max(abs(a), abs(b), 1e-12) for a, b in zip(p, p[1:], strict=False))


# ------------------------------------------------------------------------------ 1 · stages


def _ask_stages(v: Mapping[str, Any]) -> Question:
    d = int(v["tour_dk"])
    return Question(
        "stages", f"At d_k = {d}, how many times smaller is the spread (std) of the scaled scores "
                              "q·k/√d_k than the spread of the raw scores q·k?", unit="times")


def _key_stages(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    ratio = float(n["raw_std"]) / float(n["scaled_std"])
    return Key(
        f"measured: std {_g(n['raw_std'])} raw against {_g(n['scaled_std'])} scaled, {_g(ratio)} times",
               value=ratio, tolerance=0.1 * ratio)


# ------------------------------------------------------------------------------ 2 · q·k spreads like √d

LAWS = (("like d", lambda d: float(d)), ("like √d", lambda d: math.sqrt(d)),
        ("like ∜d", lambda d: d**0.25), ("it does not grow", lambda d: 1.0))  # distinct at every d > 1


def _ask_histograms(v: Mapping[str, Any]) -> Question | None:
    d = int(v["tour_d"])
    preds = [f(d) for _, f in LAWS]
    if not _distinct(preds):  # at d = 1 every law says 1
        return None
    options = tuple(f"{name}: std ≈ {_g(p)} at d = {d}" for (name, _), p in zip(LAWS, preds, strict=True))
    return Question(
        "histograms", f"q and k have {d} entries, each N(0, 1). How does the spread (std) of q·k "
                                  "grow with d?", options)


def _key_histograms(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    d = int(v["tour_d"])
    i = nearest([f(d) for _, f in LAWS], float(n["std_raw"]), log=True)
    return Key(
        f"measured: std {_g(n['std_raw'])} at d = {d}", correct=i)


# ------------------------------------------------------------------------------ 3 · saturation


def _ask_saturation(v: Mapping[str, Any]) -> Question:
    k = int(v["tour_sn"])
    return Question(
        "saturation", f"A row has {k} entries: one score x and {k - 1} zeros. From which x does that "
                                  "one entry take 0.99 of the softmax's weight?", unit="x")


def _key_saturation(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    x = float(n["crossing"])
    return Key(
        f"measured: from x = {x:.2f}", value=x, tolerance=0.1 * x)


# ------------------------------------------------------------------------------ 4 · the Jacobian

JAC_SAME = 1.25  # within this factor either way, "about the same"


def _ask_jacobian(v: Mapping[str, Any]) -> Question:
    k = int(v["tour_keys"])
    return Question(
        "jacobian", f"Rows of {k} scores. Compared with unscaled scores (spread σ = √64 = 8), do scaled "
                    "scores (σ = 1) pass more or less gradient back through the softmax (E‖J‖)?",
                    ("more when scaled", "about the same", "less when scaled"))


def _key_jacobian(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    js, ju = float(n["j_scaled"]), float(n["j_unscaled"])
    ratio = js / ju if ju > 0 else math.inf
    i = 0 if ratio > JAC_SAME else 2 if ratio < 1 / JAC_SAME else 1
    return Key(
        f"measured: E‖J‖ = {js:.3f} scaled against {ju:.3f} unscaled", correct=i)


# ------------------------------------------------------------------------------ 5 · overflow


def _ask_overflow(v: Mapping[str, Any]) -> Question:
    dt = str(v["tour_odt"])
    return Question(
        "overflow", f"In {dt}, softmax([x, 0, 0, 0]) for x up to 10,000: which softmax returns NaN or "
                                "∞ somewhere?", ("only the naive one, eˣ/Σeˣ", "both, naive and stable",
                                                 "neither", "only the stable one (max subtracted first)"))


def _key_overflow(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    naive, stable = n["first_naive"] is not None, bool(n["stable_fails"])
    i = {(True, False): 0, (True, True): 1, (False, False): 2, (False, True): 3}[(naive, stable)]
    first = f"naive first fails at x = {n['first_naive']:.4g}" if naive else "naive stays finite"
    return Key(
        f"measured: {first}; the stable one {'fails' if stable else 'stays finite'}", correct=i)


# ------------------------------------------------------------------------------ 6 · entropy


def _ask_entropy(v: Mapping[str, Any]) -> Question:
    tau = float(v["tour_tau"])
    return Question(
        "entropy", f"At temperature τ = {tau:g}, a row grows from 16 to 16,384 keys. Its entropy…",
                    (f"climbs by about log(16,384 / 16) = {math.log(1024):.2f} nats", "stays about the same",
                     f"falls by about {math.log(1024):.2f} nats"))


def _key_entropy(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    h = list(n["entropy"])
    rise = float(h[-1]) - float(h[0])
    span = math.log(float(n["n"][-1]) / float(n["n"][0]))
    return Key(
        f"measured: {float(h[0]):.2f} → {float(h[-1]):.2f} nats", correct=nearest([span, 0.0, -span], rise))


# ------------------------------------------------------------------------------ 7 · a synthetic sink

SINK_TOLERANCE = 0.05  # of the row


def _ask_sink(v: Mapping[str, Any]) -> Question:
    s = float(v["tour_s"])
    return Question(
        "sink", f"A sink token's logit is {s:g}; the 16 real keys' logits are N(0, 1). What share of "
                            "each row's weight does the sink take (0 to 1)?", unit="of the row")


def _key_sink(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    w = float(n["sink_weight"])
    return Key(
        f"measured: {w:.2f} of the row", value=w, tolerance=SINK_TOLERANCE)


# ------------------------------------------------------------------------------ 9 · the real decoder's sink


def _ask_real_sink(v: Mapping[str, Any]) -> Question:
    return Question("real_sink", "SmolLM2: delete the first token of the text (many heads put most of their "
                                 "weight on it). Where does the sink go?",
                    ("to the new first token (token 1)",
                     "nowhere: the heads spread their weight over the text"))


def _key_real_sink(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    before, second, after = (int(x) for x in n["moved"])
    moved = after >= before / 2  # ui.views.sink_position.sink_moved's rule
    return Key(
        f"measured: {before} sink heads on the first token; token 1: {second} while second, {after} once "
               "first", correct=0 if moved else 1)


# ------------------------------------------------------------------------------ 10 · FlashAttention's memory

FACTORS = (1, 10, 100, 1000, 10_000)


def _ask_memory(v: Mapping[str, Any]) -> Question:
    T = int(v["tour_T"])
    return Question(
        "memory", f"At T = {T:,} tokens, how many times more memory does attention that stores the "
                              "T × T weights need than a fused (flash) kernel?",
                    tuple(f"about {f:,}×" for f in FACTORS))


def _key_memory(q: Question, v: Mapping[str, Any], n: Mapping[str, Any]) -> Key:
    ratio = float(n["materialised"]) / float(n["fused"])
    return Key(
        f"estimated: {ratio:,.0f} times", correct=nearest([float(f) for f in FACTORS], ratio, log=True))


QUESTIONS: dict[str, Asked] = {
    "stages": Asked(_ask_stages, _key_stages),
    "histograms": Asked(_ask_histograms, _key_histograms),
    "saturation": Asked(_ask_saturation, _key_saturation),
    "jacobian": Asked(_ask_jacobian, _key_jacobian),
    "overflow": Asked(_ask_overflow, _key_overflow),
    "entropy": Asked(_ask_entropy, _key_entropy),
    "sink": Asked(_ask_sink, _key_sink),
    "real_sink": Asked(_ask_real_sink, _key_real_sink),
    "memory": Asked(_ask_memory, _key_memory),
}


def ask(step: str, values: Mapping[str, Any]) -> Question | None:
    """The step's question at these control values (None: the step has none, or none at these values)."""
    asked = QUESTIONS.get(step)
    return asked.ask(values) if asked is not None else None


def key(q: Question, values: Mapping[str, Any], numbers: Mapping[str, Any]) -> Key:
    """The answer the step's numbers decide."""
    return QUESTIONS[q.step].key(q, values, numbers)


def _number(response: Any) -> float | None:
    try:
        x = float(response)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and abs(x) <= NUMBER_LIMIT else None


def score(q: Question, k: Key, response: Any) -> bool | None:
    """Right or wrong (None: no answer, or not one of the options / not a number)."""
    if q.numeric:
        x = _number(response)
        if x is None or k.value is None:
            return None
        return abs(x - k.value) <= k.tolerance
    if not isinstance(response, int) or isinstance(response, bool) or not 0 <= response < len(q.options):
        return None
    return response == k.correct


NUMERIC_BUCKETS = ("below", "within the tolerance", "above")


def buckets(q: Question) -> tuple[str, ...]:
    """What the class poll counts: the options, or for a number where it fell against the answer."""
    return q.options if not q.numeric else NUMERIC_BUCKETS


def bucket(q: Question, k: Key, response: Any) -> int | None:
    """The poll's bucket of one answer (an index into :func:`buckets`; None: no valid answer)."""
    if not q.numeric:
        return response if score(q, k, response) is not None else None
    x = _number(response)
    if x is None or k.value is None:
        return None
    return 1 if abs(x - k.value) <= k.tolerance else 0 if x < k.value else 2
