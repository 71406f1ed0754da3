"""The frame every page runs in: page config, shared sidebar, URL state, error boundary.

A page declares its :class:`~ui.state.Param` list and a ``body`` function and calls
:func:`run_page`. Everything the body raises is caught here and shown as a plain
message: input errors verbatim, anything unexpected as one line with its type,
never a traceback. A part of a page drawn in an ``st.fragment`` reruns without
:func:`run_page`; it gets the same boundary and URL sync from :func:`in_fragment`.
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import streamlit as st
import torch
from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

from attncore.budget import free_gpu_memory
from attncore.device import DeviceUnavailableError, available_devices, describe_device, resolve_device
from attncore.dtypes import DTYPES, sampling_dtype
from attncore.errors import AttnInputError, Cancelled
from ui import admission, export, figures, state, widgets
from ui.margins import fit_margins
from ui.nav import PAGES
from ui.text import plain

__all__ = ["GLOBAL_PARAMS", "PageContext", "in_fragment", "run_page"]

log = logging.getLogger("attnlab")

# Issue 11: a full garbage collection walks every object in the process (torch, plotly, streamlit:
# ~250k objects, 0.5 s on 2 cores). Move what is alive once the app's modules are imported into the
# permanent generation, so Python's own collections skip it (Streamlit's after-every-run collection
# is off in .streamlit/config.toml). Objects die by reference counting as before.
gc.collect()
gc.freeze()

DEVICE = state.Param("device", "auto", options=("auto", *available_devices()))
SEED = state.Param("seed", 0, lo=0, hi=2**31 - 1)
DTYPE = state.Param("dtype", "float32", options=tuple(DTYPES))
PRESENT = state.Param(widgets.PRESENT_KEY, False)
GLOBAL_PARAMS: tuple[state.Param, ...] = (DEVICE, SEED, DTYPE, PRESENT)


# Chart first (issue 11): Streamlit's default 6rem of space above the title and its 2.75rem title
# push the first chart below the fold at 1280x720; a page keeps one sentence and its key formula
# above the first chart and the rest in expanders below it.
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.6rem; }
[data-testid="stMainBlockContainer"] h1 { font-size: 2rem; padding: 0 0 0.25rem 0; }
</style>"""
# Presenter mode: larger page text as well as larger chart text (ui.figures.present), and nothing smaller
# than in normal mode (issue 34): a metric's value is Markdown inside its value <div>, so the paragraph rule
# must not reach it (it made the value 19.2 px against 36 px normally); captions and table text >= 16 px.
PRESENT_CSS = """<style>
[data-testid="stMainBlockContainer"] { font-size: 1.2rem; max-width: 100%; padding-left: 1.5rem;
  padding-right: 1.5rem; }
[data-testid="stMainBlockContainer"] [data-testid="stMarkdownContainer"] p { font-size: 1.2rem; }
[data-testid="stMainBlockContainer"] [data-testid="stMetricValue"],
[data-testid="stMainBlockContainer"] [data-testid="stMetricValue"] [data-testid="stMarkdownContainer"] p {
  font-size: 2.6rem; }
[data-testid="stMainBlockContainer"] [data-testid="stMetricLabel"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMainBlockContainer"] [data-testid="stMetricDelta"] [data-testid="stMarkdownContainer"] p {
  font-size: 1.1rem; }
[data-testid="stMainBlockContainer"] [data-testid="stCaptionContainer"],
[data-testid="stMainBlockContainer"] [data-testid="stCaptionContainer"] p { font-size: 1.05rem; }
[data-testid="stMainBlockContainer"] [data-testid="stTable"] table,
[data-testid="stMainBlockContainer"] [data-testid="stTable"] th,
[data-testid="stMainBlockContainer"] [data-testid="stTable"] td,
[data-testid="stMainBlockContainer"] [data-testid="stTable"] p { font-size: 1.05rem; }
.st-key-attnlab_topnav [data-testid="stMarkdownContainer"] p { font-size: 1rem; }
</style>"""


@dataclass(frozen=True)
class PageContext:
    """What the shared sidebar decided, passed to every page body."""

    device: str  # e.g. "cpu", "cuda:0"; plain string so cached functions can hash it
    device_label: str
    seed: int
    dtype: str
    controls: Any  # sidebar container for the page's own controls, below the compute section
    present: bool = False  # presenter mode (?present=1): charts restyled, pages in a row at the top
    title: str = ""  # the page's title (run_page's), for the log line of an unexpected error
    params: tuple[state.Param, ...] = ()  # every Param of the page, the shared ones included (URL sync)
    oom_hint: str = "Lower the sizes."  # run_page's: which limit to lower when the GPU runs out of memory

    @property
    def sample_dtype(self) -> str:
        """The dtype name random samples are drawn in (:func:`attncore.dtypes.sampling_dtype`)."""
        return str(sampling_dtype(self.dtype)).removeprefix("torch.")


def _resolve() -> tuple[torch.device, str | None]:
    try:
        return resolve_device(state.value(DEVICE)), None
    except DeviceUnavailableError as exc:
        return torch.device("cpu"), f"{exc} Using the CPU."


def _sidebar(has_controls: bool, seed_note: str | None = None, *, title: str = "",
             params: tuple[state.Param, ...] = (), oom_hint: str = "Lower the sizes.") -> PageContext:
    """The Compute expander (device, seed, precision) under the navigation."""
    side = st.sidebar
    dev, problem = _resolve()
    label = describe_device(dev)
    seed, dtype = int(state.value(SEED)), str(state.value(DTYPE))
    box = side.expander(f"Compute · {label} · seed {seed} · {dtype}", icon=":material/memory:")
    widgets.select(DEVICE, "Device", where=box, labels={"auto": "auto (CUDA if present)"},
                   help="Where attncore computes. ATTNCORE_DEVICE in the environment overrides it.")
    widgets.number(SEED, "Seed", step=1, where=box,
                   help="Seeds every random draw; the same seed reproduces the same view.")
    if seed_note:
        box.caption(seed_note)
    widgets.select(DTYPE, "Precision", where=box,
                   help="dtype of the inputs. Half types are scored in float32, as fused kernels do.")
    box.caption(f"torch {torch.__version__}")
    admission.sidebar_status(box)  # heavy jobs running / waiting on this server (ui.admission)
    if problem:
        side.warning(plain(problem))
    side.toggle("Presenter mode", key=PRESENT.key, on_change=_present_changed,
                help="For a projector: chart and page text ≥ 16 px, wider charts, high-contrast colour "
                     "scales, the sidebar collapsed with the pages in a row at the top. It stays on for "
                     "this session and in every link (present=1 in the URL) until switched off.")
    present = bool(state.value(PRESENT))
    if present:
        st.html(PRESENT_CSS)
    if has_controls:
        side.divider()
    return PageContext(device=str(dev), device_label=label, seed=seed, dtype=dtype,
                       controls=side.container(), present=present, title=title, params=params,
                       oom_hint=oom_hint)


# Presenter mode is a setting of the session (issue 34): kept under a key of its own, which no page switch
# clears (Streamlit drops a widget's state when another page's script draws it), and carried in the URL of
# every link a page draws (st.page_link, st.switch_page), so a new tab or a full page load keeps it too.
_PRESENT_SESSION = "_attnlab_present"


def _presenting() -> tuple[bool, str | None]:
    """Presenter mode for this run: the URL's ``present=`` when it has one (a link, a bookmark), else the
    session's setting. Written to the toggle's key before the toggle is drawn. Returns the notice for a
    malformed URL value."""
    note = None
    raw = st.query_params.get(PRESENT.key)
    if raw is not None:
        on, note = PRESENT.parse(raw)
        st.session_state[_PRESENT_SESSION] = bool(on)
    on = bool(st.session_state.get(_PRESENT_SESSION, False))
    st.session_state[PRESENT.key] = on
    return on, note


def _present_changed() -> None:
    """The toggle moved: the session's setting and the URL follow it before the page runs."""
    on = bool(st.session_state.get(PRESENT.key))
    st.session_state[_PRESENT_SESSION] = on
    if on:
        st.query_params[PRESENT.key] = "1"
    elif PRESENT.key in st.query_params:
        del st.query_params[PRESENT.key]


def _with_present(query: Any) -> Any:
    """A link's query parameters with ``present=1`` added while this session presents."""
    if not st.session_state.get(_PRESENT_SESSION):
        return query
    if query is None:
        return {PRESENT.key: "1"}
    if isinstance(query, dict):
        return {**query, PRESENT.key: "1"}
    return query  # another form (pairs, a QueryParams object): left as the page wrote it


def _presented_page_link(original: Callable[..., Any]) -> Callable[..., Any]:
    """``page_link`` that keeps presenter mode in the link's URL (an app page, not an external URL)."""
    if getattr(original, "_attnlab_presenter", False):
        return original

    @functools.wraps(original)
    def page_link(self: Any, page: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(page, str) and page.startswith(("http://", "https://", "mailto:"))):
            kwargs["query_params"] = _with_present(kwargs.get("query_params"))
        return original(self, page, *args, **kwargs)

    page_link._attnlab_presenter = True  # type: ignore[attr-defined]
    return page_link


def _presented_switch_page(original: Callable[..., Any]) -> Callable[..., Any]:
    """``st.switch_page`` that keeps presenter mode in the URL of the page it opens."""
    if getattr(original, "_attnlab_presenter", False):
        return original

    @functools.wraps(original)
    def switch_page(page: Any, *, query_params: Any = None) -> Any:
        return original(page, query_params=_with_present(query_params))

    switch_page._attnlab_presenter = True  # type: ignore[attr-defined]
    return switch_page


DeltaGenerator.page_link = _presented_page_link(DeltaGenerator.page_link)  # type: ignore[method-assign]
st.page_link = functools.partial(DeltaGenerator.page_link, st._main)  # type: ignore[attr-defined]
st.switch_page = _presented_switch_page(st.switch_page)


IMAGE_KEY = "chart_image"  # the session's image format for every chart's camera button (not in the URL)
_CHARTS = "_attnlab_charts"  # this run's charts (element key -> figure), for the page's offline HTML file
MAX_CHARTS = 24


def _charts_download(where: Any, title: str) -> None:
    """The sidebar's export: the image format of every chart's camera button, and the page's charts as one
    offline HTML file (built when clicked, from the charts this page drew last)."""
    where.radio("Chart images", options=list(export.FORMATS), key=IMAGE_KEY, horizontal=True,
                format_func=str.upper,
                help=f"The camera button above each chart saves it as this, at "
                     f"{export.PRESENTER_SIZE[0]}×{export.PRESENTER_SIZE[1]} px (made in the browser).")
    charts = st.session_state.get(_CHARTS, {})
    widgets.html_download("Charts as offline HTML", lambda: export.charts_html(list(charts.values()), title),
                          f"{export.filename(go.Figure(), title)}-charts.html", key="attnlab_charts_html",
                          help="This page's charts in one HTML file that opens with no network "
                               "(Plotly inline).", where=where)


def _presented_plotly_chart(original: Callable[..., Any]) -> Callable[..., Any]:
    """``plotly_chart`` that restyles the figure for presenter mode (:func:`ui.figures.present`) and
    asks for the margins the browser would widen it to (:func:`ui.margins.fit_margins`, so Plotly
    draws it once).

    Installed once on Streamlit's ``DeltaGenerator`` (and ``st.plotly_chart``), so every chart of
    every page, present and future, gets both without the page doing anything.
    """
    if getattr(original, "_attnlab_presenter", False):
        return original

    @functools.wraps(original)
    def plotly_chart(self: Any, figure_or_data: Any = None, *args: Any, **kwargs: Any) -> Any:
        # session state, not a flag of the script run: fragments rerun without run_page
        if isinstance(figure_or_data, go.Figure):
            if st.session_state.get(PRESENT.key) is True:
                figure_or_data = figures.present(go.Figure(figure_or_data))
            fit_margins(figure_or_data)
            # issue 41: the modebar shown, its camera button at the presenter size in the session's format
            name = export.filename(figure_or_data)
            kwargs["config"] = {**export.chart_config(str(st.session_state.get(IMAGE_KEY, "png")), name),
                                **(kwargs.get("config") or {})}
            charts = st.session_state.setdefault(_CHARTS, {})
            charts[str(kwargs.get("key") or f"{name}-{len(charts)}")] = figure_or_data
            while len(charts) > MAX_CHARTS:
                charts.pop(next(iter(charts)))
        return original(self, figure_or_data, *args, **kwargs)

    plotly_chart._attnlab_presenter = True  # type: ignore[attr-defined]
    return plotly_chart


DeltaGenerator.plotly_chart = _presented_plotly_chart(DeltaGenerator.plotly_chart)  # type: ignore[method-assign]
st.plotly_chart = functools.partial(DeltaGenerator.plotly_chart, st._main)  # type: ignore[attr-defined]


def _nav(present: bool) -> None:
    """The page links in the sidebar and, in presenter mode (sidebar collapsed), in a row at the top of
    the page, so moving to another page stays one click."""
    rows = [st.sidebar]
    if present:
        rows.append(st.container(horizontal=True, gap="small", key="attnlab_topnav"))
    for where in rows:
        where.page_link("app.py", label="Home", icon=":material/home:")
        for entry in PAGES:
            where.page_link(entry.path, label=entry.label, icon=entry.icon)


def run_page(
    *,
    title: str,
    icon: str,
    params: Sequence[state.Param],
    body: Callable[[PageContext], None],
    seed_note: str | None = None,
    oom_hint: str = "Lower the sizes.",
) -> None:
    """Render one page: config, sidebar, URL-restored controls, then ``body`` inside a boundary.

    ``seed_note``: a line under the seed (e.g. that this page's Monte Carlo draws happen on the
    device, so a GPU shows other draws than a CPU). ``oom_hint``: which limit to lower when the
    GPU runs out of memory (the memory is freed and the page says so, never a traceback).
    """
    # Denormal floats (e.g. the tails of a saturated softmax) make CPU matmuls up to 30x slower;
    # flushing them to zero changes no value the app shows. The setting belongs to a thread, and
    # every session runs its script in a thread of its own, so it is made on every run.
    torch.set_flush_denormal(True)
    presenting, present_note = _presenting()
    st.set_page_config(page_title=f"{title} · Attention Lab", page_icon=icon, layout="wide",
                       initial_sidebar_state="collapsed" if presenting else "auto")
    all_params = (*GLOBAL_PARAMS, *params)
    notices = ([present_note] if present_note else []) + state.init(all_params)

    def page() -> None:
        st.html(COMPACT_CSS)
        _nav(presenting)
        st.session_state[_CHARTS] = {}
        exports = st.sidebar.expander("Export charts", icon=":material/download:")
        ctx = _sidebar(bool(params), seed_note, title=title, params=all_params, oom_hint=oom_hint)
        for note in notices:
            st.warning(plain(note), icon=":material/link:")
        body(ctx)
        _charts_download(exports, title)

    _guarded(page, title=title, params=all_params, oom_hint=oom_hint)


def in_fragment(ctx: PageContext, run: Callable[[], None]) -> None:
    """``run()`` as :func:`run_page` runs a body, for the body of an ``st.fragment``: a fragment's own rerun
    (a click or a widget inside it) skips :func:`run_page`, so this gives it the same error boundary and
    URL sync. State missing from this session is filled in first, as at the start of a page run (URL >
    last value > default), so the URL written afterwards keeps every parameter the page's last run had.
    """
    state.init(ctx.params)
    _guarded(run, title=ctx.title, params=ctx.params, oom_hint=ctx.oom_hint)


def _guarded(run: Callable[[], None], *, title: str, params: Sequence[state.Param], oom_hint: str) -> None:
    """The error boundary: ``run()``, its errors as plain messages (never a traceback), then the URL sync."""
    gpu_oom = False
    try:
        run()
    except ScriptControlException:
        raise
    except AttnInputError as exc:
        st.error(plain(exc), icon=":material/block:")
    except Cancelled:
        st.info("Stopped: the view is being redrawn with the new settings.", icon=":material/stop:")
    except MemoryError:
        st.error("That request needs more memory than this machine has; reduce the sizes.",
                 icon=":material/memory:")
    except torch.cuda.OutOfMemoryError:
        gpu_oom = True  # handled below, once this frame has let go of the error and its tensors
    except Exception as exc:  # the page boundary: never show a traceback
        log.exception("page %s failed", title)
        st.error(plain(f"Something went wrong while computing this view ({type(exc).__name__}: {exc}). "
                       "Try other settings; the message has been logged."), icon=":material/error:")
    finally:
        state.sync_url(params)
    if gpu_oom:
        free_gpu_memory()
        st.error(f"The GPU ran out of memory for this view; its memory was freed. {oom_hint}",
                 icon=":material/memory:")
