"""GPU trouble gives plain messages, never a traceback: out of memory anywhere, a GPU asked for but absent.

Tested on the CPU by monkeypatching (an out-of-memory error is raised where the GPU would raise it).
"""

from __future__ import annotations

import pytest
import torch

import ui.sweep
from attncore.budget import oom_to_limit
from attncore.device import DeviceUnavailableError
from attncore.errors import ResourceLimitError
from attncore.sweeps import entropy_vs_length
from tests.chart_data import no_errors, run_app

ENTROPY = "pages/2_Entropy_vs_length.py"
SMALL = {"ent_lo": "4", "ent_hi": "6", "ent_q": "4", "ent_vary": "none"}


def _oom(*_a, **_k):
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_page_turns_a_gpu_out_of_memory_into_a_plain_message(monkeypatch):
    freed = []
    monkeypatch.setattr(ui.sweep, "run_sweep_set", _oom)
    monkeypatch.setattr("ui.page.free_gpu_memory", lambda: freed.append(1))
    at = run_app(ENTROPY, seed="4242", **SMALL)
    assert not at.exception
    msg = " ".join(e.value for e in at.error)
    assert "GPU ran out of memory" in msg and "memory was freed" in msg and "Lower the query rows" in msg
    assert "Traceback" not in msg and freed == [1]


def test_attncore_turns_a_gpu_out_of_memory_into_a_limit_error(monkeypatch):
    monkeypatch.setattr("attncore.budget.free_gpu_memory", lambda: None)
    with pytest.raises(ResourceLimitError, match="ran out of memory for the test.*Lower d"):
        oom_to_limit(_oom, "the test", "Lower d.")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_without_a_gpu(monkeypatch):
    monkeypatch.setenv("ATTNCORE_DEVICE", "cuda")
    with pytest.raises(DeviceUnavailableError, match="no CUDA GPU is available; usable devices: cpu"):
        entropy_vs_length([16], queries=2)
    at = run_app(ENTROPY, **SMALL)
    no_errors(at)
    notes = " ".join(w.value for w in at.sidebar.warning)
    assert "CUDA was requested" in notes and "Using the CPU" in notes


def test_bench_cuda_says_so_in_one_line_without_a_gpu(monkeypatch, capsys):
    from bench import entropy

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    entropy.main(["--device", "cuda"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "no CUDA GPU" in out[0]
