"""AppTest, issue 11 across pages: what every page draws the same way (metric chips, presenter mode)."""

from __future__ import annotations

import pytest
from streamlit.proto.Metric_pb2 import Metric as MetricProto

from tests.chart_data import no_errors, run_app

VIEWS = [
    ("pages/1_Heatmaps.py", {}),
    ("pages/2_Entropy_vs_length.py", {"ent_lo": "6", "ent_hi": "10"}),
    ("pages/3_Saturation_and_gradients.py", {"sat_tab": "Saturation"}),
    ("pages/4_Attention_sinks.py", {}),
]


@pytest.mark.parametrize(("page", "query"), VIEWS, ids=[p for p, _ in VIEWS])
def test_theory_chips_carry_no_arrow(page: str, query: dict[str, str]) -> None:
    """A 'theory 1.000' delta is a reference value, not a change: no up/down arrow, grey."""
    at = run_app(page, **query)
    no_errors(at)
    with_delta = [m for m in at.metric if m.proto.delta]
    assert with_delta, "the page shows theory beside its metrics"
    for m in with_delta:
        assert m.proto.direction == MetricProto.MetricDirection.NONE, (m.label, m.proto.delta)
        assert m.proto.color == MetricProto.MetricColor.GRAY, m.label
