"""Device resolution, and (only where a GPU is present) attention parity on CUDA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attncore import attention, describe_device, resolve_device
from attncore.device import ENV_VAR, DeviceUnavailableError, available_devices
from attncore.explore import SyntheticSpec, synthetic_stages
from attncore.synthetic import gaussian_qkv


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture
def no_cuda(monkeypatch):
    """Pretend no CUDA GPU exists, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


# --- resolve_device -------------------------------------------------------------------


def test_env_var_name():
    assert ENV_VAR == "ATTNCORE_DEVICE"


@pytest.mark.parametrize("value", ["cpu", "CPU", " cpu "])
def test_env_cpu_wins_over_preference(monkeypatch, value):
    monkeypatch.setenv(ENV_VAR, value)
    assert resolve_device() == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device(None) == torch.device("cpu")
    # The environment wins over an explicit preference, even one that does not exist here.
    assert resolve_device("cuda:7") == torch.device("cpu")
    assert resolve_device(torch.device("meta")) == torch.device("cpu")


def test_env_auto_falls_back_to_preference(monkeypatch, no_cuda):
    monkeypatch.setenv(ENV_VAR, "auto")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device() == torch.device("cpu")


def test_auto_picks_cuda_when_available(monkeypatch, no_env):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device(None) == torch.device("cuda", 0)
    monkeypatch.setenv(ENV_VAR, "AUTO")
    assert resolve_device() == torch.device("cuda", 0)


def test_auto_without_cuda_is_cpu(no_env, no_cuda):
    assert resolve_device() == torch.device("cpu")
    assert resolve_device("  ") == torch.device("cpu")


def test_explicit_cpu(no_env):
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:1", "CUDA"])
def test_cuda_requested_without_gpu_raises(no_env, no_cuda, name):
    with pytest.raises(DeviceUnavailableError) as exc:
        resolve_device(name)
    msg = str(exc.value)
    assert "CUDA was requested" in msg
    assert "no CUDA GPU is available" in msg
    assert "usable devices:" in msg and msg.rstrip(".").endswith("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_env_cuda_without_gpu_raises(monkeypatch, no_cuda, name):
    monkeypatch.setenv(ENV_VAR, name)
    with pytest.raises(DeviceUnavailableError, match="no CUDA GPU is available"):
        resolve_device()
    with pytest.raises(DeviceUnavailableError, match="no CUDA GPU is available"):
        resolve_device("auto")
    # an explicit device wins when the forced one is absent: the app's fallback to the CPU computes
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceUnavailableError, match="no CUDA GPU is available"):
        resolve_device("cuda:1")


def test_cuda_index_out_of_range_raises(monkeypatch, no_env):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(DeviceUnavailableError, match=r"cuda:3 was requested but only 1 CUDA device"):
        resolve_device("cuda:3")


@pytest.mark.parametrize("name", ["gpu", "banana", "cuda:x", "cpu:-"])
def test_garbage_names_raise(no_env, name):
    with pytest.raises(DeviceUnavailableError, match="is not a device name; use cpu, cuda, cuda:N or mps"):
        resolve_device(name)


def test_garbage_env_raises(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "tpu-please")
    with pytest.raises(DeviceUnavailableError, match="'tpu-please' is not a device name"):
        resolve_device()


def test_unsupported_device_type_raises(no_env):
    with pytest.raises(DeviceUnavailableError, match="Unsupported device type 'meta'"):
        resolve_device("meta")


def test_mps_unavailable_raises(monkeypatch, no_env):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match="MPS was requested but is not available"):
        resolve_device("mps")


def test_device_unavailable_error_is_runtime_error():
    assert issubclass(DeviceUnavailableError, RuntimeError)


# --- available_devices / describe_device ------------------------------------------------


def test_available_devices_ends_with_cpu():
    devs = available_devices()
    assert devs[-1] == "cpu"
    assert devs.count("cpu") == 1
    if torch.cuda.is_available():
        assert devs[0] == "cuda:0"
        assert sum(d.startswith("cuda:") for d in devs) == torch.cuda.device_count()
    else:
        assert not any(d.startswith("cuda") for d in devs)


def test_available_devices_lists_cuda_first(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert available_devices() == ["cuda:0", "cuda:1", "cpu"]


def test_available_devices_without_gpu(no_cuda, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert available_devices() == ["cpu"]


def test_describe_cpu():
    assert describe_device(torch.device("cpu")) == f"CPU ({torch.get_num_threads()} threads)"
    assert describe_device(torch.device("mps")) == "Apple MPS"


# --- CUDA (skipped without a GPU) -----------------------------------------------------

def needs_cuda(fn):
    """Mark a test `cuda` and skip it where no CUDA GPU is present."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
    return pytest.mark.cuda(skip(fn))


def _cuda_qkv(seed: int, dtype=torch.float32, B=2, H=4, L=7, S=11, E=16, Ev=8):
    g = torch.Generator(device="cuda").manual_seed(seed)
    kw = {"generator": g, "device": "cuda", "dtype": torch.float64 if dtype == torch.float64 else torch.float32}
    return (torch.randn(B, H, L, E, **kw).to(dtype), torch.randn(B, H, S, E, **kw).to(dtype),
            torch.randn(B, H, S, Ev, **kw).to(dtype))


@needs_cuda
def test_cuda_resolve(no_env):
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device() == torch.device("cuda", 0)
    assert describe_device(torch.device("cuda", 0)).startswith("CUDA 0: ")


@needs_cuda
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_parity_float32(seed, causal):
    q, k, v = _cuda_qkv(seed)
    g = torch.Generator(device="cuda").manual_seed(seed + 99)
    m = torch.rand(2, 1, 7, 11, generator=g, device="cuda") < 0.5
    m[..., 0] = True
    mask = None if causal else m
    # Reference in float64 math on the GPU (TF32 and fused kernels aside).
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask,
                                         is_causal=causal).float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out, w = attention(q, k, v, attn_mask=mask, is_causal=causal, return_weights=True)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    assert out.device.type == "cuda" and w.device.type == "cuda"
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, w @ v, atol=1e-5, rtol=1e-5)


@needs_cuda
def test_cuda_parity_gqa_and_valid_lens():
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(2, 8, 5, 16, generator=g, device="cuda", dtype=torch.float64)
    k = torch.randn(2, 2, 9, 16, generator=g, device="cuda", dtype=torch.float64)
    v = torch.randn(2, 2, 9, 4, generator=g, device="cuda", dtype=torch.float64)
    out = attention(q, k, v, enable_gqa=True)
    ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    # valid_lens given on the CPU are moved to the GPU.
    vl = torch.tensor([3, 9])
    out_vl = attention(q, k, v, enable_gqa=True, valid_lens=vl)
    m = (torch.arange(9, device="cuda")[None, :] < vl.cuda()[:, None])[:, None, None, :]
    ref_vl = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    torch.testing.assert_close(out_vl, ref_vl, atol=1e-12, rtol=1e-12)


@needs_cuda
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_cuda_parity_half(dtype, tol):
    q, k, v = _cuda_qkv(5, dtype)
    out = attention(q, k, v, is_causal=True)
    assert out.dtype == dtype and out.device.type == "cuda"
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    native = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.float(), native.float(), atol=4 * tol, rtol=4 * tol)


@needs_cuda
def test_cuda_cpu_mask_moves_and_synthetic_on_gpu():
    q, k, v = _cuda_qkv(6, torch.float64)
    m = torch.ones(7, 11, dtype=torch.bool).tril()  # on the CPU
    out = attention(q, k, v, attn_mask=m)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m.cuda())
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    st = synthetic_stages(SyntheticSpec(L=6, S=6, d_k=8, heads=2, kv_heads=2, mask="causal"), "cuda")
    assert st.weights.device.type == "cuda"
    x = gaussian_qkv(heads=2, L=6, d_k=8, device="cuda")
    assert x.query.device.type == "cuda"
    torch.testing.assert_close(st.weights.sum(-1), torch.ones(2, 6, device="cuda"))
