"""attncore.kernels: the SDPA backend table, parity with the float64 reference, budgets, sweeps."""

from __future__ import annotations

import gc
import math
import mmap
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from attncore.attention import attention
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.kernels import (
    BACKENDS,
    BASELINES,
    MASK_KINDS,
    SDPA_BACKENDS,
    KernelSpec,
    fully_masked_rows,
    make_inputs,
    materialised_bytes,
    notebook_attention,
    probe,
    reference_error,
    sweep,
    sweep_flops,
    tolerance,
)

CPU = torch.device("cpu")
SMALL = KernelSpec(heads=4, groups=2, head_dim=32)


def accepts_directly(spec: KernelSpec, T: int, name: str) -> tuple[bool, list[str]]:
    """Ask torch itself, without attncore.kernels: does backend ``name`` run this call?"""
    x = make_inputs(spec, T, T, CPU)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(SDPA_BACKENDS[name]):
                F.scaled_dot_product_attention(x.query, x.key, x.value, attn_mask=x.attn_mask,
                                               dropout_p=spec.dropout, is_causal=x.is_causal,
                                               enable_gqa=x.enable_gqa)
            return True, []
        except RuntimeError:
            return False, [str(w.message) for w in caught]


# ---------------------------------------------------------------------------- the CPU backend table


@pytest.mark.parametrize("mask", MASK_KINDS)
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_cpu_backend_table_matches_what_torch_itself_accepts(mask: str, dropout: float) -> None:
    spec = KernelSpec(heads=4, groups=2, head_dim=32, mask=mask, dropout=dropout)
    res = probe(spec, 64, CPU, repeats=1, measure_memory=False)
    assert [r.name for r in res.rows] == [*BACKENDS, "default", *BASELINES]
    for name in BACKENDS:
        row = res.row(name)
        ok, said = accepts_directly(spec, 64, name)
        assert row.accepted is ok, (name, row)
        if not ok:
            assert row.status == "refused" and row.reason, row
            for w in said:  # torch's own explanation is carried over (minus the source location)
                assert w.split(" (Triggered")[0].strip() in row.reason
    # The math path accepts everything; the CPU build has no cutlass or cuDNN kernels.
    assert res.row("math").status == "ran"
    assert res.row("efficient").status == "refused" and res.row("cudnn").status == "refused"
    assert res.row("default").status == "ran"
    for name in BASELINES:
        assert res.row(name).status == "ran"


def test_cpu_flash_refuses_dropout_with_torchs_reason_and_default_falls_back_to_math() -> None:
    res = probe(KernelSpec(heads=4, head_dim=32, dropout=0.1), 64, CPU, repeats=1, measure_memory=False)
    flash = res.row("flash")
    assert flash.status == "refused"
    assert "dropout" in flash.reason.lower()
    assert "Triggered internally" not in flash.reason
    assert res.default_backend == "math" and res.row("math").chosen
    # Dropout makes the output random: no error against the reference is claimed.
    assert res.row("math").max_err is None


def test_default_dispatch_is_named_and_matches_that_backend_bit_for_bit() -> None:
    res = probe(SMALL, 128, CPU, repeats=1, measure_memory=False)
    assert res.choice_source == "torch._fused_sdp_choice"
    assert res.default_backend in BACKENDS
    chosen = res.row(res.default_backend)
    assert chosen.chosen and chosen.same_as_default is True
    assert sum(r.chosen for r in res.rows) == 1
    # torch's CPU dispatch picks its flash kernel when nothing forbids it.
    assert res.default_backend == "flash"


# ---------------------------------------------------------------------------- parity


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("mask", MASK_KINDS)
def test_every_accepted_backend_matches_the_float64_reference(dtype: str, mask: str) -> None:
    spec = KernelSpec(heads=4, groups=2, head_dim=32, mask=mask, dtype=dtype, seed=3)
    res = probe(spec, 80, CPU, repeats=1, measure_memory=False)
    ran = [r for r in res.rows if r.status == "ran"]
    assert {r.name for r in ran} >= {"math", "default", "attncore", "notebook"}
    for r in ran:
        assert r.rows_compared == 80
        # The notebook version computes in the input dtype (no float32 accumulation).
        tol = tolerance(dtype) * (4 if r.name == "notebook" else 1)
        assert r.max_err is not None and r.max_err <= tol, (r.name, r.max_err, tol)


def test_error_column_can_fail_a_wrong_output() -> None:
    x = make_inputs(SMALL, 64, 64, CPU)
    good = F.scaled_dot_product_attention(x.query.double(), x.key.double(), x.value.double(),
                                          enable_gqa=True)
    err, masked, bad, n = reference_error(good, x)
    assert err < 1e-12 and masked is None and bad == 0 and n == 64
    wrong = good.clone()
    wrong[0, 1, 17, 5] += 0.25
    assert reference_error(wrong, x)[0] == pytest.approx(0.25, abs=1e-12)
    wrong[0, 0, 3, 0] = float("nan")
    assert reference_error(wrong, x)[2] == 1


def test_fully_masked_rows_are_zero_in_torch_and_attncore_and_nan_in_the_notebook_version() -> None:
    for mask in ("boolean", "float"):
        spec = KernelSpec(heads=2, head_dim=16, mask=mask)
        rows = fully_masked_rows(mask, 140)
        assert rows == [3, 67, 131]
        x = make_inputs(spec, 140, 140, CPU)
        allowed = x.attn_mask if mask == "boolean" else torch.isfinite(x.attn_mask)
        assert not allowed[rows].any() and allowed.sum(-1)[[0, 1, 2, 4]].gt(0).all()
        res = probe(spec, 140, CPU, repeats=1, measure_memory=False)
        for r in res.rows:
            if r.status != "ran":
                continue
            if r.name == "notebook":
                assert math.isnan(r.masked_err) and r.nonfinite_rows == len(rows)
            else:
                assert r.masked_err == 0.0 and r.nonfinite_rows == 0, r


def test_causal_kind_hides_no_whole_row_and_reference_rows_follow_the_causal_mask() -> None:
    assert fully_masked_rows("causal", 200) == [] and fully_masked_rows("none", 200) == []
    spec = KernelSpec(heads=2, head_dim=16, mask="causal")
    x = make_inputs(spec, 100, 100, CPU)
    # Row sample of the reference equals the same rows of the full causal reference.
    full = attention(x.query.double(), x.key.double(), x.value.double(), is_causal=True)
    out = full.clone()
    assert reference_error(out, x, [0, 7, 50, 99])[0] < 1e-12


def test_notebook_attention_equals_attncore_in_float64() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 20, 8, generator=g, dtype=torch.float64) for _ in range(3))
    for kw in ({}, {"is_causal": True}):
        want = attention(q, k, v, **kw)
        assert torch.allclose(notebook_attention(q, k, v, **kw), want, atol=1e-12)
    k2, v2 = k[:, :2], v[:, :2]
    assert torch.allclose(notebook_attention(q, k2, v2), attention(q, k2, v2, enable_gqa=True), atol=1e-12)


# ---------------------------------------------------------------------------- memory and budget


def test_budget_skips_materialised_paths_before_running_but_fused_flash_still_runs() -> None:
    spec = KernelSpec(heads=4, head_dim=32)
    cells = 4 * 256 * 256
    assert materialised_bytes("math", spec, 256, 256) == 3 * 4 * cells
    assert materialised_bytes("flash", spec, 256, 256) == 0
    res = probe(spec, 256, CPU, repeats=1, measure_memory=False, budget_bytes=1 << 20)
    for name in ("math", "attncore", "notebook"):
        r = res.row(name)
        assert r.status == "skipped" and r.accepted is None and r.seconds is None
        assert "budget is 1 MiB" in r.reason and r.estimated_bytes > (1 << 20)
    assert res.row("flash").status == "ran" and res.row("default").status == "ran"


def test_cpu_peak_memory_shows_math_materialises_and_flash_does_not() -> None:
    spec = KernelSpec(heads=8, head_dim=64)
    res = probe(spec, 512, CPU, repeats=1)
    score_matrix = 8 * 512 * 512 * 4  # one (B, H, L, S) float32 matrix: 8 MiB
    math_peak, flash_peak = res.row("math").peak_bytes, res.row("flash").peak_bytes
    assert math_peak is not None and flash_peak is not None
    assert math_peak >= score_matrix
    assert flash_peak < score_matrix / 2
    assert res.row("notebook").peak_bytes >= score_matrix


def test_sweep_checks_total_work_before_running() -> None:
    spec = KernelSpec(heads=64, head_dim=256)
    assert sweep_flops(spec, [16384], CPU, 3, 1 << 30) > 1e12
    with pytest.raises(ResourceLimitError, match="Lower the largest T"):
        sweep(spec, [16384], CPU)


def test_sweep_reports_progress_and_stops_when_cancelled() -> None:
    seen: list[float] = []
    res = sweep(SMALL, [32, 64, 128], CPU, repeats=1, measure_memory=False,
                progress=lambda f, _m: seen.append(f))
    assert [s.L for s in res.sizes] == [32, 64, 128] and not res.cancelled
    assert seen == sorted(seen) and seen[-1] == 1.0 and 0.0 <= seen[0] < 0.1
    calls = {"n": 0}

    def cancel() -> bool:
        calls["n"] += 1
        return calls["n"] > 1

    res = sweep(SMALL, [32, 64, 128], CPU, repeats=1, measure_memory=False, cancel=cancel)
    assert res.cancelled and [s.L for s in res.sizes] == [32]


def test_bad_specs_are_refused_in_plain_words() -> None:
    with pytest.raises(AttnInputError, match="multiple of the group size"):
        KernelSpec(heads=6, groups=4).validate()
    with pytest.raises(AttnInputError, match="dropout"):
        KernelSpec(dropout=1.0).validate()
    with pytest.raises(AttnInputError, match="mask kind"):
        KernelSpec(mask="diagonal").validate()
    with pytest.raises(AttnInputError, match=r"T \(= L = S\) must be between 16"):
        sweep(SMALL, [8], CPU)


# ---------------------------------------------------------------------------- CUDA


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_cuda_backend_table_parity_and_memory(dtype: str) -> None:
    spec = KernelSpec(heads=8, head_dim=64, dtype=dtype)
    res = probe(spec, 1024, "cuda", repeats=2)
    assert res.default_backend in BACKENDS and res.row(res.default_backend).chosen
    for r in res.rows:
        if r.status == "ran":
            tol = tolerance(dtype) * (4 if r.name == "notebook" else 1)
            assert r.max_err <= tol, r
            assert r.peak_bytes is not None and r.peak_bytes >= 0 and r.seconds > 0
        elif r.name in BACKENDS:
            assert r.status == "refused" and r.reason
    assert res.row("math").peak_bytes > res.row(res.default_backend).peak_bytes


@pytest.mark.cuda
@cuda
def test_cuda_flash_refuses_float32() -> None:
    res = probe(KernelSpec(heads=4, head_dim=64, dtype="float32"), 256, "cuda", repeats=1,
                measure_memory=False)
    assert res.row("flash").status == "refused" and res.row("flash").reason


def test_cpu_memory_measurement_is_bounded_in_time_and_says_what_it_missed() -> None:
    from attncore.kernels import _cpu_memory

    # a limit no fresh Python process can meet, so the result does not depend on the machine's speed
    found, note = _cpu_memory(SMALL, [(64, 64, "math"), (64, 64, "flash")], timeout=0.001)
    assert found == {}
    assert "not measured" in note and "time limit" in note and "2 measurement" in note


def test_peak_rss_helpers_see_an_allocation() -> None:
    """proc_status_kib / reset_peak_rss (the memory worker's and bench.entropy's measure): after a
    reset the peak mark is the current RSS, and touching 64 MiB raises it by about that much."""
    from attncore.kernels import proc_status_kib, reset_peak_rss

    assert proc_status_kib("VmHWM") >= proc_status_kib("VmRSS") > 0
    gc.collect()
    if not reset_peak_rss():
        pytest.skip("this kernel does not let a process reset its peak RSS mark")
    base, file0 = proc_status_kib("VmRSS"), proc_status_kib("RssFile")
    # 64 MiB of fresh pages, each touched: mmap directly, since malloc may serve even a 64 MiB
    # request from free memory its heap already holds (a full suite run left such chunks behind,
    # and a torch.ones block then raised the peak by 0 KiB)
    buf = mmap.mmap(-1, 64 << 20)
    np.frombuffer(buf, dtype=np.uint8)[::4096] = 1
    grown = proc_status_kib("VmHWM") - base
    # the kernel may page out mapped library pages meanwhile (this machine runs DAMON reclaim):
    # RSS then fell by that much before the block raised it again
    dropped = max(0, file0 - proc_status_kib("RssFile"))
    buf.close()
    assert grown + dropped >= 48 << 10 and grown <= 256 << 10, (grown, dropped)  # KiB
    with pytest.raises(OSError):
        proc_status_kib("NoSuchField")


# ---------------------------------------------------------------------------- the measuring helper


def _payload(jobs: list[tuple[int, int, str]]) -> dict:
    return {"spec": {k: getattr(SMALL, k) for k in SMALL.__dataclass_fields__}, "jobs": jobs, "threads": 1}


def test_importing_attncore_runs_no_torch_operation() -> None:
    """The measuring helper forks after importing attncore: an import-time torch op would start
    torch's thread pool, and a fork made after that hangs in its first parallel op."""
    code = ("import torch\nfrom torch.overrides import TorchFunctionMode\ncalls = []\n"
            "class M(TorchFunctionMode):\n"
            "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
            "        calls.append(getattr(func, '__name__', str(func)))\n"
            "        return func(*args, **(kwargs or {}))\n"
            "with M():\n    import attncore, attncore.kernels, attncore.sweeps, attncore.training\n"
            "print(calls)\n")
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1], check=True).stdout
    assert out.strip().splitlines()[-1] == "[]", out


def test_memory_helper_measures_in_forked_processes_and_survives_a_timeout() -> None:
    import time

    from attncore import kernels as K

    K.warm_memory_measurement()
    jobs = [(64, 64, "math"), (64, 64, "flash"), (512, 512, "math"), (512, 512, "flash")]
    done, why = K._measure_in_child(_payload(jobs), time.monotonic() + 60)
    assert why is None and [d["job"] for d in done] == [list(j) for j in jobs]
    got = {tuple(d["job"]): d["bytes"] for d in done}
    # the materialised path holds H x T x T scores (4 x 512 x 512 float32 = 4 MiB); flash does not
    assert got[(512, 512, "math")] >= 4 << 20 > got[(512, 512, "flash")]
    pid_before = K._helper.pid if K._helper is not None else None
    # a deadline no measuring process can meet: it is killed, the helper stays and answers again
    done, why = K._measure_in_child(_payload([(1024, 1024, "math")] * 6), time.monotonic() + 0.02)
    assert why is not None and "time limit" in why
    done, why = K._measure_in_child(_payload(jobs[:1]), time.monotonic() + 60)
    assert why is None and len(done) == 1 and K._helper is not None and K._helper.pid == pid_before


def test_memory_helper_is_restarted_when_it_died() -> None:
    import time

    from attncore import kernels as K

    K.warm_memory_measurement()
    assert K._helper is not None
    K._helper.kill()
    K._helper.wait(timeout=10)
    found, note = K._cpu_memory(SMALL, [(64, 64, "math")], timeout=60)
    assert set(found) == {(64, 64, "math")} and found[(64, 64, "math")] > 0, note
    assert K._helper is not None and K._helper.poll() is None
    t0 = time.monotonic()
    K._stop_helper()
    assert K._helper is None and time.monotonic() - t0 < 10
