"""The 2025 sink fixes (issue 43 item 1) against formulas written out here: softpick (Zuhri, Fuadi & Aji,
arXiv:2504.20966) as a normaliser and in the training model, Qiu et al.'s output gates (arXiv:2505.06708:
elementwise, headwise, the non-sparse control 0.5 + 0.5σ), and the sink logit's gpt-oss label.

Shape legend: ``B`` batch, ``H`` heads, ``L`` queries, ``S`` keys, ``T`` tokens, ``D`` width, ``E`` head dim.
"""

from __future__ import annotations

import math

import pytest
import torch

from attncore import attention
from attncore.errors import AttnInputError
from attncore.normalizers import NORMALIZER_NAMES, Softpick, get_normalizer
from attncore.training import VARIANT_INFO, CharTransformer, TrainConfig
from attncore.training.config import estimate_train_bytes, n_params
from attncore.training.model import FUSED_VARIANTS, GATED_VARIANTS
from tests.training_utils import VOCAB

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EPS = 1e-8  # the authors' reference code's epsilon (naive_softpick_attn.py)


def softpick_reference(x: torch.Tensor, allowed: torch.Tensor | None = None, eps: float = EPS) -> torch.Tensor:
    """The paper's numerically safe form, element by element in float64 Python:
    ReLU(e^{x-m} - e^{-m}) / (Σ|e^{x-m} - e^{-m}| + ε), m = the row's largest visible score, over the keys a
    row may see (hidden keys in neither sum). Moderate scores only (e^{-m} must not overflow)."""
    xs = x.double()
    out = torch.zeros_like(xs)
    flat_x = xs.reshape(-1, xs.shape[-1])
    ok = (torch.ones_like(xs, dtype=torch.bool) if allowed is None else allowed.expand_as(xs)).reshape(
        flat_x.shape)
    flat_out = out.view(flat_x.shape)
    for r in range(flat_x.shape[0]):
        seen = [float(v) for v, a in zip(flat_x[r], ok[r], strict=True) if bool(a) and math.isfinite(float(v))]
        if not seen:
            continue
        m = max(seen)
        terms = [math.exp(float(v) - m) - math.exp(-m) if bool(a) and math.isfinite(float(v)) else None
                 for v, a in zip(flat_x[r], ok[r], strict=True)]
        den = sum(abs(t) for t in terms if t is not None) + eps
        for j, t in enumerate(terms):
            flat_out[r, j] = 0.0 if t is None else max(t, 0.0) / den
    return out


def _scores(seed: int, shape: tuple[int, ...] = (3, 5, 7), scale: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


# --- softpick: the normaliser ---------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_softpick_matches_the_papers_formula(seed: int) -> None:
    x = _scores(seed)
    torch.testing.assert_close(Softpick()(x), softpick_reference(x), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(get_normalizer("softpick")(x.float()), softpick_reference(x).float())


def test_softpick_is_the_definition_without_the_max() -> None:
    """The safe form is the definition ReLU(e^x - 1) / (Σ|e^x - 1| + ε) with ε scaled by e^m: equal to it up
    to ε; a row whose max is below 0 gets 0 from both (our m is clamped at 0 there)."""
    x = _scores(3, scale=3.0)
    x[0, 1] = -torch.rand(7, generator=torch.Generator().manual_seed(4), dtype=torch.float64) - 0.1  # max < 0
    e = torch.exp(x) - 1
    definition = torch.relu(e) / (e.abs().sum(-1, keepdim=True) + EPS)
    w = Softpick()(x)
    torch.testing.assert_close(w, definition, rtol=1e-6, atol=1e-12)
    assert bool((w[0, 1] == 0).all())


def test_softpick_row_sums_at_most_one_and_all_zero_rows() -> None:
    x = _scores(5, shape=(4, 6, 9), scale=3.0)
    x[1, 2] = -x[1, 2].abs() - 0.01  # every score below 0: the row attends to nothing
    w = Softpick()(x)
    sums = w.sum(-1)
    assert bool((sums <= 1.0).all()) and bool((w >= 0).all())
    assert bool((w[1, 2] == 0).all())
    # the row sum is the positive share of the absolute mass: Σ relu(e^x - 1) / Σ |e^x - 1|
    e = torch.exp(x) - 1
    torch.testing.assert_close(sums, torch.relu(e).sum(-1) / e.abs().sum(-1), rtol=1e-6, atol=1e-12)
    assert float(sums.max()) < 1.0 and float(sums.max()) > 0.5  # not vacuous: rows between 0 and 1
    assert not Softpick.sums_to_one


def test_softpick_exact_zeros_at_and_below_zero() -> None:
    x = torch.tensor([[2.0, 0.0, -1e-7, 1e-3, -5.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    w = Softpick()(x)
    assert bool((w[0, [1, 2, 4]] == 0).all()) and bool((w[0, [0, 3]] > 0).all())
    assert bool((w[1] == 0).all()) and not torch.isnan(w).any()  # all scores 0: 0 / ε = 0


def test_softpick_causal_mask_hidden_keys_count_in_neither_sum() -> None:
    T = 6
    x = _scores(7, shape=(2, T, T))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    w = Softpick()(x, causal)
    assert bool((w[..., ~causal] == 0).all())
    torch.testing.assert_close(w, softpick_reference(x, causal), rtol=1e-12, atol=1e-15)
    # a hidden key's score changes nothing (it is in neither sum)
    y = x.clone()
    y[..., ~causal] = 50.0
    torch.testing.assert_close(Softpick()(y, causal), w, rtol=0, atol=0)
    # -inf scores act as hidden keys; through attention(...) the causal flag gives the same weights
    z = x.masked_fill(~causal, float("-inf"))
    torch.testing.assert_close(Softpick()(z), w, rtol=0, atol=0)
    q = torch.randn(1, 2, T, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    k = torch.randn(1, 2, T, 4, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    v = torch.randn(1, 2, T, 3, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    out, ww = attention(q, k, v, is_causal=True, normalizer="softpick", return_weights=True)
    want = softpick_reference(q @ k.transpose(-2, -1) / 2.0, causal)
    torch.testing.assert_close(ww, want)
    torch.testing.assert_close(out, want @ v)


def test_softpick_gradients_gradcheck() -> None:
    x = _scores(11, shape=(2, 4, 5), scale=1.5)
    x = torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x).requires_grad_(True)  # away from ReLU's kink
    causal = torch.ones(4, 5, dtype=torch.bool).tril(1)
    assert torch.autograd.gradcheck(lambda t: Softpick()(t, causal), (x,), eps=1e-6, atol=1e-7)
    # and against autograd of the definition (no max subtracted; equal up to ε)
    w = Softpick()(x, causal)
    (w * torch.arange(5, dtype=torch.float64)).sum().backward()
    g_ours = x.grad.clone()
    x2 = x.detach().clone().requires_grad_(True)
    e = torch.where(causal, torch.exp(x2) - 1, torch.zeros_like(x2))
    ref = torch.relu(e) / (e.abs().sum(-1, keepdim=True) + EPS)
    (ref * torch.arange(5, dtype=torch.float64)).sum().backward()
    torch.testing.assert_close(g_ours, x2.grad, rtol=1e-6, atol=1e-9)
    assert bool((g_ours[..., ~causal] == 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softpick_large_logits_stay_finite(dtype: torch.dtype) -> None:
    x = torch.tensor([[1e4, 1e4 - 1.0, -1e4, 0.0], [-1e4, -1e4, -1e4, -1e4], [1e4, 1e4, 1e4, 1e4]],
                     dtype=dtype, requires_grad=True)
    w = Softpick()(x)
    assert torch.isfinite(w).all()
    # row 0: e^{x-m} - e^{-m} = (1, e^-1, 0, 0): the two large keys share the weight
    e = 1.0 / (1.0 + math.exp(-1.0))
    torch.testing.assert_close(w[0].double(), torch.tensor([e, 1 - e, 0.0, 0.0], dtype=torch.float64))
    assert bool((w[1] == 0).all())  # all far below 0: attends to nothing
    torch.testing.assert_close(w[2].double(), torch.full((4,), 0.25, dtype=torch.float64))
    w.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA check: needs a CUDA device")
def test_softpick_on_cuda_follows_the_device_and_equals_the_cpu() -> None:
    x = _scores(12, shape=(2, 6, 6))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    for dtype in (torch.float32, torch.float64):
        w = Softpick()(x.to("cuda", dtype), causal.cuda())
        assert w.device.type == "cuda" and w.dtype == dtype
        torch.testing.assert_close(w.cpu(), Softpick()(x.to(dtype), causal))


def test_softpick_registered_and_validated() -> None:
    assert "softpick" in NORMALIZER_NAMES
    n = get_normalizer("softpick", eps=1e-6)
    assert isinstance(n, Softpick) and n.params() == {"eps": 1e-6}
    for bad in (0.0, -1.0, float("nan"), 2.0):
        with pytest.raises(AttnInputError, match="softpick needs 0 < eps"):
            Softpick(bad)


# --- the training model: softpick and the gates -------------------------------------------------


def _model(variant: str, gate_scale: float = 30.0, seed: int = 0) -> CharTransformer:
    cfg = TrainConfig(variant=variant, n_layer=1, n_head=4, d_model=32, context=12, batch=2, steps=5,
                      warmup=0, eval_every=5)
    m = CharTransformer.create(cfg, VOCAB, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        m.blocks[0].attn.qkv.weight.mul_(15.0)
        if hasattr(m.blocks[0].attn, "gate"):
            m.blocks[0].attn.gate.weight.mul_(gate_scale)  # gates far from their start at 0.5
    return m.eval()


def _core_inputs(seed: int, B: int = 2, H: int = 4, T: int = 9, E: int = 8) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, E, generator=g) for _ in range(3))
    x = torch.randn(B, T, H * E, generator=g)
    return q, k, v, x


def _sdpa_merged(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention written out, heads merged: (B, T, H E) in float64."""
    B, H, T, E = q.shape
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(E)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v.double()  # (B, H, T, E)
    return o.permute(0, 2, 1, 3).reshape(B, T, H * E)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "materialised"])
@pytest.mark.parametrize("variant", ["gated", "gated_headwise", "gated_control"])
def test_gates_equal_the_hand_formula(variant: str, fused: bool) -> None:
    attn = _model(variant).blocks[0].attn
    attn.fused = fused
    q, k, v, x = _core_inputs(1)
    with torch.no_grad():
        out, _ = attn.core(q, k, v, x, None, False)
    W = attn.gate.weight.double()  # (D, D) or (H, D)
    s = torch.sigmoid(x.double() @ W.t())  # (B, T, D) or (B, T, H)
    y = _sdpa_merged(q, k, v)  # (B, T, D)
    if variant == "gated":
        want = y * s
    elif variant == "gated_control":
        want = y * (0.5 + 0.5 * s)
    else:  # one scalar per head on its E channels
        B, T, D = y.shape
        want = (y.view(B, T, 4, D // 4) * s[..., None]).reshape(B, T, D)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-6)


def test_headwise_gate_is_one_scalar_per_head() -> None:
    attn = _model("gated_headwise").blocks[0].attn
    assert tuple(attn.gate.weight.shape) == (4, 32)
    _, _, _, x = _core_inputs(2)
    with torch.no_grad():
        g = attn.gate_values(x).view(2, 9, 4, 8)  # (B, T, H, E)
    assert bool((g == g[..., :1]).all())  # constant over each head's channels
    assert float((g[..., 0, 0] - g[..., 1, 0]).abs().max()) > 0.1  # and different between heads


def test_control_gate_lies_in_half_to_one_and_the_sparse_gate_does_not() -> None:
    _, _, _, x = _core_inputs(3)
    with torch.no_grad():
        ctrl = _model("gated_control").blocks[0].attn.gate_values(x * 10)
        sparse = _model("gated").blocks[0].attn.gate_values(x * 10)
    assert float(ctrl.min()) >= 0.5 and float(ctrl.max()) <= 1.0
    assert float(ctrl.min()) < 0.51 and float(ctrl.max()) > 0.99  # the weights reach both ends
    assert float(sparse.min()) < 0.01  # the sparse gate closes


def test_softpick_model_weights_and_gate_variants_in_probe() -> None:
    """The model's softpick variant puts its weights through the normaliser (causal), and the gates appear in
    bbm.capture for every gate variant."""
    from attncore.training.bbm import capture

    m = _model("softpick")
    ids = torch.randint(0, len(VOCAB), (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, maps = m(ids, return_attn=True)
    w = maps[0]
    assert bool((w.sum(-1) <= 1 + 1e-6).all()) and bool((w[..., ~torch.ones(10, 10, dtype=torch.bool).tril()]
                                                        == 0).all())
    assert float((w.sum(-1) < 0.999).double().mean()) > 0.1  # rows that spend less than 1 exist
    for v in GATED_VARIANTS:
        cap = capture(_model(v), ids)
        assert len(cap.gates) == 1 and tuple(cap.gates[0].shape) == (2, 10, 32)


def test_variant_facts() -> None:
    assert {"gated_headwise", "gated_control"} <= FUSED_VARIANTS and "softpick" not in FUSED_VARIANTS
    assert "gpt-oss" in VARIANT_INFO["sink_logit"]["label"] and "gpt-oss" in VARIANT_INFO["sink_logit"]["source"]
    for v in ("softpick", "gated_headwise", "gated_control"):
        assert "Qiu" in VARIANT_INFO[v]["source"] or "Zuhri" in VARIANT_INFO[v]["source"]
    base = TrainConfig(n_layer=2, n_head=4, d_model=32)
    V = len(VOCAB)
    counts = {v: n_params(base.replace(variant=v), V) for v in ("standard", "gated", "gated_headwise",
                                                                 "gated_control", "softpick")}
    for v, n in counts.items():  # the parameter count equals the model's
        m = CharTransformer.create(base.replace(variant=v), VOCAB, torch.Generator().manual_seed(0))
        assert sum(p.numel() for p in m.parameters()) == n, v
    assert counts["gated_headwise"] - counts["standard"] == 2 * 4 * 32
    assert counts["gated_control"] - counts["standard"] == 2 * 32 * 32
    # softpick keeps its maps for backward as the other materialised variants do
    assert estimate_train_bytes(base.replace(variant="softpick"), V) > estimate_train_bytes(base, V)


def test_job_estimates_count_each_gate_by_its_width() -> None:
    from ui.job_cost import calibration_key, flops_per_token

    base = TrainConfig(n_layer=2, n_head=4, d_model=32)
    f = {v: flops_per_token(base.replace(variant=v)) for v in ("standard", "gated", "gated_headwise",
                                                               "gated_control", "softpick")}
    assert f["gated"] == f["gated_control"] == f["standard"] + 3 * 2 * 2 * 32 * 32
    assert f["gated_headwise"] == f["standard"] + 3 * 2 * 2 * 32 * 4
    assert f["softpick"] == f["standard"]
    keys = {v: calibration_key(base.replace(variant=v), 50, "cpu") for v in f}
    assert len({keys["standard"], keys["gated"], keys["gated_headwise"], keys["softpick"]}) == 4
    assert keys["gated"] == keys["gated_control"]  # the same shape: one calibration


# --- weight decay up to Gu et al.'s 5.0 (issue 43 item 3) ----------------------------------------


@pytest.mark.parametrize("wd", [0.0, 0.5, 1.0, 5.0, 10.0])
def test_weight_decay_up_to_ten_is_accepted_and_reaches_the_optimiser(wd: float) -> None:
    from attncore.training.config import MAX_WEIGHT_DECAY
    from attncore.training.train import make_optimizer

    assert MAX_WEIGHT_DECAY >= 5.0
    cfg = TrainConfig(weight_decay=wd, lr=1e-3, n_layer=1, n_head=2, d_model=16, context=8)
    assert cfg.weight_decay == wd
    m = CharTransformer.create(cfg, VOCAB, torch.Generator().manual_seed(0))
    groups = make_optimizer(m, cfg).param_groups
    assert [g["weight_decay"] for g in groups] == [wd, 0.0]


@pytest.mark.parametrize(("changes", "message"), [
    (dict(weight_decay=10.5), r"weight_decay must lie in \[0, 10\]; got 10.5"),
    (dict(weight_decay=-0.1), r"weight_decay must lie in \[0, 10\]; got -0.1"),
    (dict(weight_decay=float("inf")), "weight_decay must be a finite number"),
    (dict(weight_decay=float("nan")), "weight_decay must be a finite number"),
    (dict(weight_decay="5"), "weight_decay must be a finite number"),
])
def test_weight_decay_out_of_range_is_a_plain_message(changes: dict, message: str) -> None:
    with pytest.raises(AttnInputError, match=message) as err:
        TrainConfig(**changes)
    assert "Traceback" not in str(err.value) and "/" not in str(err.value).replace("1 - lr", "")


def test_weight_decay_does_not_change_the_memory_estimate() -> None:
    """AdamW's decoupled decay keeps no state: the estimate (weights, gradients, two moments, activations)
    is the same at every weight decay."""
    base = TrainConfig(n_layer=2, n_head=4, d_model=32)
    assert {estimate_train_bytes(base.replace(weight_decay=wd), 30) for wd in (0.0, 0.1, 5.0)} == {
        estimate_train_bytes(base, 30)}


def test_the_docs_count_the_variants_and_name_softpick() -> None:
    """docs/layout.md counts the variants, docs/pages.md names the normalisers (both were the README's)."""
    from pathlib import Path

    from attncore.training import VARIANTS

    docs = Path(__file__).resolve().parents[1] / "docs"
    assert f"({len(VARIANTS)} attention variants" in (docs / "layout.md").read_text(encoding="utf-8")
    assert "normalisers (softmax, softmax1, SSMax, sigmoid, ReLU, softpick)" in \
        (docs / "pages.md").read_text(encoding="utf-8")
    assert len(NORMALIZER_NAMES) == 6
