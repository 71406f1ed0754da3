"""The frame every page runs in: page config, shared sidebar, URL state, error boundary.

A page declares its :class:`~ui.state.Param` list and a ``body`` function and calls
:func:`run_page`. Everything the body raises is caught here and shown as a plain
message: input errors verbatim, anything unexpected as one line with its type,
never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st
import torch
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

from attncore.budget import free_gpu_memory
from attncore.device import DeviceUnavailableError, available_devices, describe_device, resolve_device
from attncore.dtypes import DTYPES, sampling_dtype
from attncore.errors import AttnInputError, Cancelled
from ui import admission, state, widgets
from ui.nav import PAGES
from ui.text import plain

__all__ = ["GLOBAL_PARAMS", "PageContext", "run_page"]

log = logging.getLogger("attnlab")

# Denormal floats (e.g. the tails of a saturated softmax) make CPU matmuls up to 30x
# slower; flushing them to zero changes no value the app shows.
torch.set_flush_denormal(True)

DEVICE = state.Param("device", "auto", options=("auto", *available_devices()))
SEED = state.Param("seed", 0, lo=0, hi=2**31 - 1)
DTYPE = state.Param("dtype", "float32", options=tuple(DTYPES))
GLOBAL_PARAMS: tuple[state.Param, ...] = (DEVICE, SEED, DTYPE)


@dataclass(frozen=True)
class PageContext:
    """What the shared sidebar decided, passed to every page body."""

    device: str  # e.g. "cpu", "cuda:0"; plain string so cached functions can hash it
    device_label: str
    seed: int
    dtype: str
    controls: Any  # sidebar container for the page's own controls, below the compute section

    @property
    def sample_dtype(self) -> str:
        """The dtype name random samples are drawn in (:func:`attncore.dtypes.sampling_dtype`)."""
        return str(sampling_dtype(self.dtype)).removeprefix("torch.")


def _resolve() -> tuple[torch.device, str | None]:
    try:
        return resolve_device(state.value(DEVICE)), None
    except DeviceUnavailableError as exc:
        return torch.device("cpu"), f"{exc} Using the CPU."


def _sidebar(has_controls: bool, seed_note: str | None = None) -> PageContext:
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
    if has_controls:
        side.divider()
    return PageContext(device=str(dev), device_label=label, seed=seed, dtype=dtype,
                       controls=side.container())


def _nav() -> None:
    side = st.sidebar
    side.page_link("app.py", label="Home", icon=":material/home:")
    for entry in PAGES:
        side.page_link(entry.path, label=entry.label, icon=entry.icon)


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
    st.set_page_config(page_title=f"{title} · Attention Lab", page_icon=icon, layout="wide")
    all_params = (*GLOBAL_PARAMS, *params)
    notices = state.init(all_params)
    gpu_oom = False
    try:
        _nav()
        ctx = _sidebar(bool(params), seed_note)
        for note in notices:
            st.warning(plain(note), icon=":material/link:")
        body(ctx)
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
        state.sync_url(all_params)
    if gpu_oom:
        free_gpu_memory()
        st.error(f"The GPU ran out of memory for this view; its memory was freed. {oom_hint}",
                 icon=":material/memory:")
