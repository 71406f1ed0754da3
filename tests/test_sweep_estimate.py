"""The Entropy page's time estimate is calibrated on the server (issue 34: a sweep of three curves estimated
at 52 s took 25 s): curves run together are priced by timing their probes run together, as the sweep runs
them, so curves on shared draws are not priced as if each drew its own.

Timings are counterfactual: a fake clock and fake sweeps that take a chosen time per unit of work, with a
chosen share of it in drawing the random numbers (done once per stream of shared draws), so the test does
not depend on this machine's speed.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import ui.sweep as sweeps_ui
from attncore.sweeps import SweepSpec, plan, sweep_work
from attncore.sweeps.engine import stream_key

LENGTHS = tuple(1 << k for k in range(4, 21))


class FakeMachine:
    """Seconds = per_unit x (draw share of the work once per stream + the rest for every curve)."""

    def __init__(self, per_unit: float, draw_share: float) -> None:
        self.per_unit, self.draw_share, self.now = per_unit, draw_share, 0.0

    def cost(self, specs: Sequence[SweepSpec]) -> float:
        streams: dict[tuple, int] = {}
        for s in specs:
            streams[stream_key(s)] = max(streams.get(stream_key(s), 0), sweep_work(s, "cpu"))
        work = sum(sweep_work(s, "cpu") for s in specs)
        return self.per_unit * (self.draw_share * sum(streams.values()) + (1 - self.draw_share) * work)

    def clock(self) -> float:
        return self.now

    def run_sweep(self, spec: SweepSpec, **_: object) -> None:
        self.now += self.cost([spec])

    def run_sweep_set(self, specs: Sequence[SweepSpec], **_: object) -> list:
        self.now += self.cost(list(specs))
        return []


@pytest.fixture()
def machine(monkeypatch: pytest.MonkeyPatch):
    def make(per_unit: float, draw_share: float) -> FakeMachine:
        m = FakeMachine(per_unit, draw_share)
        monkeypatch.setattr(sweeps_ui.time, "perf_counter", m.clock)
        monkeypatch.setattr(sweeps_ui, "run_sweep", m.run_sweep)
        monkeypatch.setattr(sweeps_ui, "run_sweep_set", m.run_sweep_set)
        sweeps_ui._rates.clear()
        return m
    yield make
    sweeps_ui._rates.clear()


def curves(shared: bool) -> list[SweepSpec]:
    """Three curves of the page's default comparison (temperatures: shared draws) or at three d."""
    if shared:
        return [SweepSpec(lengths=LENGTHS, temperature=t) for t in (0.5, 1.0, 2.0)]
    return [SweepSpec(lengths=LENGTHS, d=d) for d in (32, 64, 128)]


@pytest.mark.parametrize("shared", [True, False], ids=["shared draws", "own draws"])
@pytest.mark.parametrize(("per_unit", "draw_share"), [(1e-8, 0.8), (3e-9, 0.5), (2e-8, 0.2)])
def test_the_estimate_is_within_2x_of_the_time_taken(machine, shared: bool, per_unit: float,
                                                     draw_share: float) -> None:
    m = machine(per_unit, draw_share)
    specs = curves(shared)
    est = sweeps_ui.estimate_seconds(specs, "cpu")
    taken = m.cost(specs)  # what run_sweep_set of the real specs takes on this machine
    assert taken / 2 <= est <= 2 * taken, (est, taken)
    assert est == pytest.approx(taken, rel=0.35), (est, taken)


def test_single_curve_rates_overprice_shared_draws(machine) -> None:
    """The counterfactual the old estimate fails: draws 80% of the time, three curves on them, summed
    single-curve rates give 3 / (0.8 + 3 * 0.2) = 2.1x the time taken."""
    m = machine(1e-8, 0.8)
    specs = curves(True)
    costs = plan(specs, "cpu")
    summed = sum(w * sweeps_ui._rate(s, "cpu", costs, i) for i, (s, w) in enumerate(zip(specs, costs.work,
                                                                                          strict=True)))
    taken = m.cost(specs)
    assert summed > 2 * taken  # the old way, outside the 2x the issue asks for
    assert sweeps_ui.estimate_seconds(specs, "cpu") <= 2 * taken


def test_the_calibration_is_kept_per_server_and_learns_from_runs(machine) -> None:
    m = machine(1e-8, 0.5)
    specs = curves(True)
    first = sweeps_ui.estimate_seconds(specs, "cpu")
    probes_run = m.now
    assert sweeps_ui.estimate_seconds(specs, "cpu") == first and m.now == probes_run  # no second probe
    costs = plan(specs, "cpu")
    # a real run that took twice the estimate moves the rate halfway towards it
    sweeps_ui._learn(specs[0], costs.engines[0], "cpu", costs.total, 2 * first, specs)
    assert sweeps_ui.estimate_seconds(specs, "cpu") == pytest.approx(1.5 * first)
