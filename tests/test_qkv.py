"""attncore.qkv: the captured q, k, v reproduce the model's own attention maps and head outputs."""

from __future__ import annotations

import math

import pytest
import torch

from attncore.errors import AttnInputError, ResourceLimitError
from attncore.models import LoadedModel, load_model, run_text, tokenize
from attncore.qkv import capture, capture_bytes, top_keys
from attncore.training import load_shipped_model, text_attention
from ui.realtext import DEFAULT_TEXT

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model()


@pytest.fixture(scope="module")
def char_lm() -> LoadedModel:
    model = load_shipped_model("cpu")
    c = model.config
    return LoadedModel(name="char", path="", model=model, tokenizer=None, layers=c.n_layer, heads=c.n_head,
                       token_limit=256, device="cpu", seconds=0.0)


def test_minilm_q_k_reproduce_the_models_weights_and_outputs(lm: LoadedModel) -> None:
    text = "The cat sat on the mat, and then it slept."
    hv = capture(lm, text)
    att = run_text(lm, text)
    assert hv.tokens == att.tokens
    N, H, L = att.attentions.shape[:3]
    assert hv.q.shape == (N, H, L, 32) and hv.v.shape == (N, H, L, 32) and hv.output.shape == (N, H, L, 32)
    assert math.isclose(hv.scale, 1 / math.sqrt(32)) and not hv.causal
    for layer in range(N):
        w = hv.weights(layer)  # from the captured q, k alone
        torch.testing.assert_close(w.float(), att.attentions[layer], atol=1e-5, rtol=0)
        # the model's own weights times the captured values give the model's own head outputs
        torch.testing.assert_close(hv.mix(att.attentions[layer], layer).float(), hv.output[layer], atol=1e-5,
                                   rtol=1e-5)


def test_minilm_capture_is_not_a_tautology(lm: LoadedModel) -> None:
    """Swapping two heads' keys or using another layer's values breaks the match."""
    hv = capture(lm, DEFAULT_TEXT)
    att = run_text(lm, DEFAULT_TEXT)
    wrong = (hv.q[1] @ hv.k[1].roll(1, dims=0).transpose(-2, -1) * hv.scale).softmax(-1)
    assert (wrong - att.attentions[1]).abs().max() > 1e-2
    assert (hv.mix(att.attentions[1], 2).float() - hv.output[1]).abs().max() > 1e-2


def test_character_model_q_k_reproduce_its_weights_and_outputs(char_lm: LoadedModel) -> None:
    text = "To be, or not to be: that is the question."
    hv = capture(char_lm, text)
    att = text_attention(char_lm.model, text)
    assert hv.tokens == att.tokens and hv.causal
    for layer in range(hv.layers):
        torch.testing.assert_close(hv.weights(layer).float(), att.attentions[layer], atol=1e-5, rtol=0)
        torch.testing.assert_close(hv.mix(att.attentions[layer], layer).float(), hv.output[layer], atol=1e-5,
                                   rtol=1e-5)
    # causal: query 0 sees only itself
    assert float(hv.weights(0)[:, 0, 0].min()) == pytest.approx(1.0)


def test_top_keys_orders_by_weight_then_index() -> None:
    row = torch.tensor([0.1, 0.4, 0.1, 0.4])
    assert top_keys(row, 3) == [(1, pytest.approx(0.4)), (3, pytest.approx(0.4)), (0, pytest.approx(0.1))]


def test_capture_checks_memory_before_running(lm: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "a few words of text"
    L = tokenize(lm, text).length
    need = capture_bytes(6, 12, L, 32, 32)
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", str(need - 1))
    with pytest.raises(ResourceLimitError, match="q, k and v"):
        capture(lm, text)
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", str(need))
    assert capture(lm, text).q.shape[2] == L


def test_capture_bad_text(lm: LoadedModel, char_lm: LoadedModel) -> None:
    with pytest.raises(AttnInputError, match="type some text"):
        capture(lm, "   ")
    with pytest.raises(AttnInputError):
        capture(char_lm, "")
