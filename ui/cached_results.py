"""The cache boundary for the shipped results: experiment result files, the models that learned the
Bigram-Backcopy task, the sink claims judged over the sink grid, and the Evidence page's measurements
(read again when a result file changes: :func:`results_stamp`). Shared helpers in :mod:`ui.cached`.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
import torch

from attncore import evidence as _evidence
from attncore import training as _training
from attncore.errors import AttnInputError
from attncore.training import bbm as _bbm
from attncore.training import induction as _induction
from attncore.training import io as _training_io
from attncore.training import league as _league
from attncore.training import league_verdict as _league_verdict
from attncore.training import null_attention as _null
from attncore.training import sink_grid as _sink_grid
from attncore.training import sink_verdicts as _sink_verdicts
from attncore.training import wd_sweep as _wd_sweep
from ui.admission import admit
from ui.cached import Timed, timed

__all__ = [
    "evidence_measurement",
    "EVIDENCE_SLOW_BYTES",
    "evidence_slow_measured",
    "induction_runs",
    "EVIDENCE_SLOW_SECONDS",
    "league_results",
    "learned_model",
    "learned_task",
    "learned_view",
    "results_stamp",
    "sink_claims",
    "training_result",
    "wd_results",
]



def training_result(name: str) -> dict:
    """A shipped experiment result (:data:`attncore.training.RESULT_NAMES`) as a dict, read again when its
    file changes."""
    path = Path(_training_io.RESULTS_DIR) / f"{name}.json"
    return _training_result(name, str(path), path.stat().st_mtime if path.is_file() else 0.0)


@st.cache_data(max_entries=8, show_spinner=False)
def _training_result(name: str, path: str, mtime: float) -> dict:
    return _training_io.load_result(name, Path(path).parent)


def induction_runs() -> tuple[dict, list[dict]]:
    """The shipped induction run (:mod:`attncore.training.induction`): (header, runs by seed), read again when
    its file changes."""
    path = Path(_training_io.RESULTS_DIR) / _induction.FILE
    return _induction_runs(str(path), path.stat().st_mtime if path.is_file() else 0.0)


@st.cache_data(max_entries=2, show_spinner=False)
def _induction_runs(path: str, mtime: float) -> tuple[dict, list[dict]]:
    return _induction.load_runs(path)


# ------------------------------------------------- the models that learned the Bigram-Backcopy task (Sinks)


def learned_task() -> _bbm.BigramBackcopy:
    """The Bigram-Backcopy task the shipped null_attention models learned."""
    return _learned_task(str(_training_io.RESULTS_DIR))


@st.cache_resource(max_entries=2, show_spinner=False)
def _learned_task(results: str) -> _bbm.BigramBackcopy:
    return _null.shipped_task(results)


@st.cache_resource(max_entries=8, show_spinner=False)
def _learned_model(name: str, device: str, results: str) -> Timed[_training.CharTransformer]:
    return timed(lambda: _null.shipped_model(name, device, results))


def learned_model(name: str, device: str) -> Timed[_training.CharTransformer]:
    """The shipped seed-0 model of one variant (:data:`attncore.training.null_attention.SHIPPED`)."""
    return _learned_model(name, device, str(_training_io.RESULTS_DIR))


def learned_view(name: str, ids: tuple[int, ...], device: str) -> Timed[_bbm.SequenceView]:
    """One shipped model on one sequence of token ids (BOS first)."""
    return _learned_view(name, ids, device, str(_training_io.RESULTS_DIR))


@st.cache_resource(max_entries=16, show_spinner=False)
def _learned_view(name: str, ids: tuple[int, ...], device: str, results: str) -> Timed[_bbm.SequenceView]:
    model = _learned_model(name, device, results).value
    task = _learned_task(results)
    return timed(lambda: _bbm.sequence_view(model, task, torch.tensor(ids, dtype=torch.int64)))


# ---------------------------------------------------------------------------- Evidence page (issue 24)

EVIDENCE_SLOW_BYTES = 512 * 1024**2  # a slower claim's admission estimate: a model or a gradient sweep
EVIDENCE_SLOW_SECONDS = 5.0


@st.cache_data(max_entries=512, show_spinner=False)
def evidence_measurement(key: str, device: str, seed: int, dtype: str,
                         results_stamp: float) -> Timed[_evidence.Measurement]:
    """One claim's test (:mod:`attncore.evidence`) on this device, seed and dtype. ``results_stamp`` (the
    shipped results' latest modification time) makes a rewritten result file count as new input."""
    c = _evidence.claim(key)
    # The slower claims (timings, models, the gradient sweep: seconds each) queue in the server's admission
    # control like sweeps do, so that several sessions measuring them at once do not starve other pages.
    nbytes, seconds = (EVIDENCE_SLOW_BYTES, EVIDENCE_SLOW_SECONDS) if c.slow else (0, 0.0)
    with admit(nbytes, seconds, label=f"the Evidence measurement {key}"):
        return timed(lambda: _evidence.evaluate(c, _evidence.Setting(device, seed, dtype)).measurement)


@st.cache_resource(show_spinner=False)
def evidence_slow_measured() -> set[tuple[str, int, str, float]]:
    """The settings (device, seed, dtype, results stamp) at which some session of this server has measured
    the slower Evidence claims, so that :func:`evidence_measurement` holds them: a new tab at such a setting
    draws the page once, with every row, not first without them and again with them (issue 34: the chart
    and the 52-row table were sent and drawn twice in every new tab). Shared by all sessions; an entry that
    the measurement cache has since dropped only costs that one run its early draw."""
    return set()



def sink_claims() -> tuple[_sink_verdicts.SinkClaims, dict]:
    """The sink claims judged over settings (the shipped sink grid and null_attention.json) and the grid
    file's header (the command, machine and commit that made it; {} without one), read again when either
    file changes."""
    grid = Path(_training_io.RESULTS_DIR) / _sink_grid.FILE
    null = Path(_training_io.RESULTS_DIR) / "null_attention.json"
    return _sink_claims(str(grid), grid.stat().st_mtime if grid.is_file() else 0.0,
                        null.stat().st_mtime if null.is_file() else 0.0)


@st.cache_resource(max_entries=2, show_spinner=False)
def _sink_claims(grid: str, grid_mtime: float, null_mtime: float) -> tuple[_sink_verdicts.SinkClaims, dict]:
    header, runs = _sink_grid.load_grid(grid)
    try:
        shipped = _training_io.load_result("null_attention")
    except AttnInputError:
        shipped = None
    return _sink_verdicts.sink_claims(header, runs, shipped), header




def results_stamp() -> float:
    """The latest modification time of the shipped result files (a rewritten file is measured again)."""
    return max((p.stat().st_mtime for p in Path(_training_io.RESULTS_DIR).glob("*.json")), default=0.0)


def _stamp(name: str) -> float:
    p = Path(_training_io.RESULTS_DIR) / name
    return p.stat().st_mtime if p.is_file() else 0.0


def league_results() -> tuple[str, dict, list[dict], list[dict], list[_league_verdict.OrderingVerdict]]:
    """The shipped league (:func:`attncore.training.league_verdict.shipped_league`: the complete file, else
    the partial one) as (file name, header, runs, table cells, ordering verdicts per learning rate), read
    again when either file changes."""
    return _league_results(tuple(_stamp(n) for n in _league_verdict.SHIPPED_FILES))


@st.cache_resource(max_entries=2, show_spinner=False)
def _league_results(stamps: tuple[float, ...]) -> tuple[str, dict, list[dict], list[dict], list]:
    name, header, runs = _league_verdict.shipped_league()
    return name, header, runs, _league.league_table(runs), _league_verdict.ordering_verdicts(runs)


def wd_results() -> tuple[dict, list[dict], list[dict]]:
    """The shipped weight-decay sweep as (header, runs, table cells per weight decay); empty when it does not
    ship."""
    return _wd_results(tuple(_stamp(n) for n in _wd_sweep.SHIPPED_FILES))


@st.cache_resource(max_entries=2, show_spinner=False)
def _wd_results(stamps: tuple[float, ...]) -> tuple[dict, list[dict], list[dict]]:
    _, header, runs = _wd_sweep.shipped_sweep()
    return header, runs, _wd_sweep.wd_table(runs)
