"""Shared fixtures: the real-browser harness (Chromium + `streamlit run`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.browser_utils import CHROMIUM, CHROMIUM_ARGS, streamlit_server

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


def _chromium_missing() -> str | None:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        return f"Chromium not found at {CHROMIUM}"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Browser tests skip without Chromium locally, but fail under CI=true."""
    if "browser" not in item.keywords:
        return
    reason = _chromium_missing()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models: one thread (two OpenMP threads on a busy 2-core machine spin for 100x longer)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """Start `streamlit run app.py` on a free port; yield its base URL."""
    with streamlit_server("streamlit.log", start_timeout_s=90) as url:
        yield url


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """Debian's Chromium with the flags this closed network needs (pytest-playwright hook)."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS,
            "headless": True}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": 1500, "height": 1000}}
