"""Every chart with a legend keeps its plot area (issue 41: the shipped 2,048-token StreamingLLM chart's 16-entry
legend took the whole 360 px figure): the plot keeps at least half the figure's height, measured on the figures
the pages send (tests/plot_area.py). The pages' default views are checked where they are already run
(tests/test_payload.py, normal mode; tests/test_apptest_presentation.py, presenter mode), every Tour step in
normal mode by tests/test_apptest_tour.py, and here in presenter mode, where legends are largest."""

from __future__ import annotations

import numpy as np
import pytest

from tests.chart_data import figures, no_errors, run_app
from tests.plot_area import assert_plot_areas, plot_fraction
from tests.test_apptest_tour import SLOW
from ui import figures as uf
from ui.margins import fit_margins
from ui.tour import STEPS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _many(n: int, height: int = 360) -> uf.go.Figure:
    x = np.arange(10.0)
    return uf.line_chart([uf.Curve(f"window {k} with the first {k} tokens", x, x * k) for k in range(n)],
                         x_title="position", y_title="loss", height=height)


def test_a_sixteen_entry_legend_below_a_short_chart_fails_and_beside_it_passes() -> None:
    below = uf.legend_below(_many(16))
    below.update_layout(margin={"t": 16, "b": 300})  # what the 2,048-token chart had: 16 rows under 360 px
    assert plot_fraction(below.to_plotly_json()) < 0.5
    with pytest.raises(AssertionError, match="plot fraction"):
        assert_plot_areas([below.to_plotly_json()], "test")
    beside = _many(16)
    beside.update_layout(legend={"orientation": "v", "x": 1.02, "y": 1.0, "yanchor": "top"})
    beside = fit_margins(beside).to_plotly_json()
    assert plot_fraction(beside) >= 0.5
    assert_plot_areas([beside], "test")


def test_fit_margins_gives_a_chart_under_a_long_legend_a_minimum_plot_height() -> None:
    """ui.margins.fit_margins makes the figure taller rather than leave its plot a strip (issue 41)."""
    fig = fit_margins(uf.legend_below(_many(16)))
    lay = fig.layout
    assert lay.height > 360 and lay.margin.b > 180
    assert plot_fraction(fig.to_plotly_json()) >= 0.5
    assert lay.height - lay.margin.t - lay.margin.b >= 0.5 * lay.height - 1
    short = fit_margins(uf.legend_below(_many(3)))  # a legend that leaves room: the height stays
    assert short.layout.height == 360


def test_a_legend_drawn_on_the_plot_counts_against_it() -> None:
    fig = _many(12, height=300)
    fig.update_layout(legend={"orientation": "h", "x": 0.0, "y": 0.98, "yanchor": "top"}, margin={"t": 10, "b": 40})
    d = fig.to_plotly_json()
    assert plot_fraction(d) == pytest.approx((300 - 10 - 40 - 4 * 19) / 300)
    one = _many(1, height=300).to_plotly_json()  # no legend: nothing to check
    assert_plot_areas([one], "test")


@pytest.mark.parametrize("key", [pytest.param(s.key, marks=pytest.mark.slow) if s.key in SLOW else s.key
                                 for s in STEPS])
def test_every_tour_step_keeps_its_plot_area_in_presenter_mode(key: str) -> None:
    i = [s.key for s in STEPS].index(key) + 1
    at = run_app("pages/0_Tour.py", timeout=900, tour=str(i), present="1")
    no_errors(at)
    figs = figures(at)
    assert figs and all(f["layout"]["meta"].get("present") for f in figs)
    assert_plot_areas(figs, f"Tour step {i} ({key}), presenter mode")
