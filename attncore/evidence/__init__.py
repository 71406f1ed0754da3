"""Every checkable claim of the five source texts, each with its test, measurement and verdict rule.

:data:`CLAIMS` lists them in the order of the sources (the study notes, the "Why √d" tutorial,
d2l's "Attention Scoring Functions", Graphcore's "Almost-scaled dot-product attention", the SDPA
reference page) and, within each, of the text. :func:`evaluate` runs one claim's test on a
:class:`Setting` (device, seed, dtype) and judges it; :data:`VERDICTS` are the five possible verdicts.

The tests live by concept: :mod:`~attncore.evidence.scores` (the spread of q·k, the worked
examples, saturation and gradients), :mod:`~attncore.evidence.length` (long rows, null attention),
:mod:`~attncore.evidence.masking` (masks, row sums, dropout), :mod:`~attncore.evidence.output_scale`
(the output's scale), :mod:`~attncore.evidence.backends` (SDPA's backends) and
:mod:`~attncore.evidence.shipped` (the shipped training results), :mod:`~attncore.evidence.league` (the
league of normalisers and gates, the weight-decay sweep), :mod:`~attncore.evidence.decoder`
(SmolLM2, a real decoder LLM) and :mod:`~attncore.evidence.eviction` (its shipped eviction run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from attncore.errors import AttnInputError
from attncore.evidence import (
    backends,
    decoder,
    eviction,
    league,
    length,
    masking,
    output_scale,
    real_scale,
    scores,
    shipped,
)
from attncore.evidence.records import (
    BASES,
    CAVEAT,
    EXACT,
    FAILS,
    HOLDS,
    LIVE,
    MISPRINT,
    SHIPPED,
    SOURCES,
    UNTESTABLE,
    VERDICTS,
    Claim,
    Judgement,
    Measurement,
    Setting,
    Source,
)

__all__ = [
    "BASES",
    "CAVEAT",
    "CLAIMS",
    "EXACT",
    "FAILS",
    "HOLDS",
    "LIVE",
    "MISPRINT",
    "SHIPPED",
    "SOURCES",
    "UNTESTABLE",
    "VERDICTS",
    "Claim",
    "Judgement",
    "Measurement",
    "Row",
    "Setting",
    "Source",
    "claim",
    "evaluate",
    "judge",
]

_ORDER = (
    # the study notes
    "entropy_grows",
    "sharp_needs_log_n",
    "no_null_attention",
    "sinks_learned",
    "sink_dummy",
    "length_scaling",
    "denominator_bias",
    "bias_removes_sinks",
    "league_ordering",
    "sinks_weight_decay",
    "llm_sinks",
    "llm_value_drain",
    # "Why √d Matters"
    "xy_variance",
    "dot_variance",
    "std_64",
    "peaked_example",
    "unit_any_d",
    "unscaled_example",
    "scaled_scores",
    "scaled_example",
    "random_init",
    "temperature",
    "stable_softmax",
    "gradients_vanish",
    "vanishing_onehot",
    "healthy_gradients",
    "std_512",
    "saturation",
    "scaling_ablation",
    "llm_dot_spread",
    # d2l
    "d2l_outputs",
    "dropout_mean",
    "d2l_pad_zero",
    "d2l_valid_len_zero",
    # Graphcore
    "underscaled",
    "fully_scaled_unit",
    "flat_limit",
    "spike_limit",
    "lognormal_range",
    "fully_scaled_worse",
    "fold_into_projection",
    # the SDPA reference page
    "sqrt_growth",
    "prevents_saturation",
    "llm_unscaled_saturates",
    "rows_sum_to_one",
    "causal_zero",
    "manual_equivalent",
    "unstable_16",
    "dropout_training_only",
    "gqa_same",
    "llm_gqa_same",
    "llm_window",
    "llm_window_2048",
    "llm_sink_recovers",
    "flash_default",
    "flash_speed",
    "flash_memory",
)
_ALL = {c.key: c for mod in (scores, length, masking, output_scale, backends, shipped, league, decoder,
                                real_scale, eviction)
        for c in mod.CLAIMS}
if set(_ALL) != set(_ORDER) or len(_ORDER) != len(set(_ORDER)):
    raise RuntimeError(f"attncore.evidence: claims and their order differ: {sorted(set(_ALL) ^ set(_ORDER))}")
CLAIMS: tuple[Claim, ...] = tuple(_ALL[k] for k in _ORDER)


def claim(key: str) -> Claim:
    """The claim with this key."""
    try:
        return _ALL[key]
    except KeyError:
        raise AttnInputError(f"unknown claim {key!r}.") from None


@dataclass(frozen=True)
class Row:
    """One evaluated claim: its measurement, the sentence describing it, its judgement, its seconds."""

    claim: Claim
    measurement: Measurement
    measured: str
    judgement: Judgement
    seconds: float


def judge(c: Claim, m: Measurement) -> tuple[str, Judgement]:
    """The measured sentence and the judgement for a measurement (a missing one: "not testable here")."""
    if m.missing:
        return "—", Judgement(UNTESTABLE, m.missing)
    return c.describe(m), c.judge(m)


def evaluate(c: Claim, setting: Setting) -> Row:
    """Run the claim's test on ``setting`` and judge it.

    A test that cannot run here (bad request, out of memory, a missing file) gives the verdict
    "not testable here" with the reason.
    """
    t0 = time.perf_counter()
    try:
        m = c.measure(setting)
    except (AttnInputError, RuntimeError, OSError) as exc:
        m = Measurement(missing=f"the test could not run here: {exc}")
    measured, j = judge(c, m)
    return Row(c, m, measured, j, time.perf_counter() - t0)
