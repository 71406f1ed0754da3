"""AppTest: Heatmaps' dropout view (training mode) and 2-D valid_lens against d2l's masked softmax."""

from __future__ import annotations

import math
import re

import numpy as np
import torch

from attncore.explore import SyntheticSpec, draw_pool, synthetic_dropout, synthetic_stages
from tests.chart_data import decode, figure, no_errors, run_app, trace
from ui.maps import downsample

HEATMAPS = "pages/1_Heatmaps.py"


def d2l_masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """Source 002's masked_softmax in torch: scores past the valid length become -1e6, then softmax.

    X: (B, L, S); valid_lens: (B,) or (B, L)."""
    shape = X.shape
    vl = valid_lens.repeat_interleave(shape[1]) if valid_lens.dim() == 1 else valid_lens.reshape(-1)
    flat = X.reshape(-1, shape[-1])
    keep = torch.arange(shape[-1], dtype=torch.float32)[None, :] < vl[:, None]
    return torch.softmax(torch.where(keep, flat, torch.tensor(-1e6, dtype=X.dtype)).reshape(shape), dim=-1)


def test_2d_valid_lens_weights_follow_d2l_and_rows_with_length_0_are_zero() -> None:
    at = run_app(HEATMAPS, mask="padding2d", vlens="1, 3, 0, 4", L="10", S="6", heads="2", kv="1")
    no_errors(at)
    z = decode(trace(figure(at, "weights"), 0)["z"])  # head 0, (L, S)
    spec = SyntheticSpec(L=10, S=6, heads=2, kv_heads=1)
    pool = draw_pool(spec)
    q, k = pool.query[0, 0, :10].double(), pool.key[0, 0, :6].double()
    lens = torch.tensor([[1, 3, 0, 4, 1, 3, 0, 4, 1, 3]])
    want = d2l_masked_softmax((q @ k.T / math.sqrt(64))[None], lens)[0].numpy()
    for i, n in enumerate(lens[0].tolist()):
        if n > 0:
            np.testing.assert_allclose(z[i], want[i], rtol=1e-5, atol=1e-6)
        else:  # d2l spreads a row with no valid key uniformly; attncore gives zeros
            np.testing.assert_allclose(want[i], 1 / 6, rtol=1e-12)
            assert np.all(z[i] == 0)
    assert any("that row is fully masked" in i.value and "−1e6" in i.value for i in at.info)
    at.text_input(key="vlens").set_value("2")
    at.run()
    no_errors(at)
    z = decode(trace(figure(at, "weights"), 0)["z"])
    assert np.all(z[:, 2:] == 0) and np.allclose(z.sum(-1), 1, atol=1e-6)


def test_bad_valid_lengths_are_a_plain_message() -> None:
    at = run_app(HEATMAPS, mask="padding2d", vlens="1, x")
    assert not at.exception
    assert len(at.error) == 1 and "whole numbers separated by commas" in at.error[0].value


def test_dropout_view_weights_before_after_and_an_unbiased_mean() -> None:
    at = run_app(HEATMAPS, L="12", S="12")
    no_errors(at)
    assert not [f for f in at.get("plotly_chart") if "dropout" in f.proto.spec]
    at.slider(key="drop").set_value(0.3)
    at.run()
    no_errors(at)
    spec = SyntheticSpec(L=12, S=12)
    stages = synthetic_stages(spec)
    d = synthetic_dropout(spec, 0.3, 0)
    fig = figure(at, "dropout_weights")
    before, after = decode(trace(fig, 0)["z"]), decode(trace(fig, 1)["z"])
    np.testing.assert_allclose(before, downsample(stages.weights[0].numpy(), 512)[0], rtol=1e-6)
    np.testing.assert_allclose(after, d.first_weights.numpy(), rtol=1e-6)
    w = stages.weights[0].numpy()
    dropped = after == 0
    assert dropped.any() and (~dropped).any()
    np.testing.assert_allclose(after[~dropped], w[~dropped] / 0.7, rtol=1e-5)
    mean_fig = figure(at, "dropout_mean")
    pts = trace(mean_fig, 0)
    np.testing.assert_allclose(decode(pts["x"]), d.exact.numpy().ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(decode(pts["y"]), d.mean.numpy().ravel(), rtol=1e-5, atol=1e-6)
    # The exact output is the stages' output (head 0), and the mean over draws is unbiased.
    np.testing.assert_allclose(d.exact.numpy(), stages.output[0].numpy(), rtol=1e-5, atol=1e-6)
    assert d.n == 400 and d.max_z() < 5
    cap = next(c.value for c in at.caption if "seeded dropout draws" in c.value)
    m = re.search(r"mean of (\d+) seeded dropout draws: all (\d+) entries lie within ([\d.]+) standard "
                  r"errors of it, (\d+)% within 2", cap)
    assert m, cap
    assert int(m[1]) == d.n and int(m[2]) == d.exact.numel()
    assert m[3] == f"{d.max_z():.2f}" and int(m[4]) == round(100 * d.within(2.0))
    assert any("dropout_p=0" in md.value and "no training flag" in md.value for md in at.markdown)
