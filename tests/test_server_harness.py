"""Issue 44, item 13: a harness that starts a server must drain or redirect its output. bench.load's
Server gave `serve.py` a stderr pipe it never read: with 40 sessions logging a traceback per render the
64 KB pipe filled, the thread writing the next line blocked holding the logging lock, every other thread
waited on it, and the server stopped answering. A stand-in server (tests/noisy_server.py) that logs 128 KB
per request must keep answering through every harness that starts one, past 1 MB of output."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bench.load import HOST, Server, _free_port
from tests.browser_utils import ARTIFACTS, streamlit_server
from tests.chart_data import ROOT

NOISY = ("tests/noisy_server.py",)
REQUESTS = 12  # x 128 KB logged each: 1.5 MB, far past a pipe's 64 KB


def get(url: str, timeout: float = 30.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        r.read()
        return int(r.status)


def test_bench_load_server_keeps_answering_while_it_logs_megabytes(tmp_path: Path) -> None:
    server = Server(NOISY, log=tmp_path / "server.log")
    try:
        server.start(timeout=60)
        assert [get(f"http://{HOST}:{server.port}/_stcore/health") for _ in range(REQUESTS)] == [200] * REQUESTS
        assert server.proc.poll() is None
    finally:
        server.stop()
    assert server.log.stat().st_size > 1_000_000  # all of it reached the file


def test_the_browser_tests_server_keeps_answering_while_it_logs_megabytes() -> None:
    with streamlit_server("noisy-server.log", start_timeout_s=60, command=NOISY) as url:
        assert [get(f"{url}/_stcore/health") for _ in range(REQUESTS)] == [200] * REQUESTS
    assert (ARTIFACTS / "noisy-server.log").stat().st_size > 1_000_000


def test_the_check_can_fail_an_unread_pipe_stops_the_server() -> None:
    """The old harness, for contrast: the same server on a stderr pipe nobody reads stops answering at its
    first request (whose 128 KB fill the pipe: the thread that writes them blocks)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, *NOISY, "--server.address", HOST, "--server.port", str(port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):  # until it listens (or exits)
            with socket.socket() as s:
                if s.connect_ex((HOST, port)) == 0 or proc.poll() is not None:
                    break
            time.sleep(0.1)
        assert proc.poll() is None
        with pytest.raises(OSError):  # the request times out: no answer
            get(f"http://{HOST}:{port}/_stcore/health", timeout=10)
    finally:
        proc.kill()
        proc.wait(10)
