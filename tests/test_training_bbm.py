"""attncore.training.bbm: the Bigram-Backcopy task, its probes, the BOS ablation and the streaming test,
each against a from-scratch computation."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from attncore.errors import AttnInputError
from attncore.training import CharTransformer, TrainConfig, stream_nll
from attncore.training import bbm_train as bbm_train_mod
from attncore.training.bbm import (
    BIGRAM,
    COPY,
    BigramBackcopy,
    bbm_label,
    bbm_streaming,
    bos_ablation,
    capture,
    eval_sequences,
    first_crossing,
    no_bos_mask,
    probe,
)
from attncore.training.bbm_train import train_bbm
from tests.training_utils import SNIPPET

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = SNIPPET * 20


@pytest.fixture(scope="module")
def task() -> BigramBackcopy:
    return BigramBackcopy.from_text(TEXT)


def tiny_config(variant: str = "standard", **kw) -> TrainConfig:
    base = dict(variant=variant, n_layer=1, n_head=2, d_model=16, context=16, batch=4, steps=6, warmup=2,
                eval_every=3, lr=1e-2)
    return TrainConfig(**{**base, **kw})


def sharp_model(task: BigramBackcopy, variant: str = "standard", n_layer: int = 1, seed: int = 0) -> CharTransformer:
    """A model whose attention is far from uniform (q, k, v weights scaled up)."""
    m = CharTransformer.create(tiny_config(variant, n_layer=n_layer), task.vocab, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        for blk in m.blocks:
            blk.attn.qkv.weight.mul_(15.0)
            if variant == "sink_logit":
                blk.attn.sink.fill_(0.7)
    return m.eval()


# ---------------------------------------------------------------------------- the task


def test_task_from_text_counts_and_triggers_from_scratch(task: BigramBackcopy) -> None:
    chars = sorted(set(TEXT))
    assert task.vocab[:-1] == "".join(chars) and task.vocab[-1] not in TEXT and task.bos == len(chars)
    counts = Counter(TEXT)
    top = sorted(chars, key=lambda c: (-counts[c], chars.index(c)))[:3]
    assert sorted(task.vocab[i] for i in task.triggers) == sorted(top)
    pairs = Counter(zip(TEXT, TEXT[1:], strict=False))
    a, b = chars.index("e"), chars.index("a")
    row = sum(n for (x, _), n in pairs.items() if x == "e")
    assert float(task.cond[a, b]) == pytest.approx(pairs[("e", "a")] / row)
    torch.testing.assert_close(task.cond.sum(-1), torch.ones(task.size, dtype=torch.float64))
    assert bool((task.cond[:, task.bos] == 0).all())  # nothing leads back to BOS
    assert bool((task.first[list(task.triggers)] == 0).all())
    assert task.to_dict()["triggers"] == [task.vocab[i] for i in task.triggers]


def test_task_edge_cases() -> None:
    with pytest.raises(AttnInputError, match="at least 4"):
        BigramBackcopy.from_text("abcabcabc")
    # ties broken by the lower id; the last character's row (never followed) is the unigram marginal
    t = BigramBackcopy.from_text("aabbccdz")
    assert t.triggers == (0, 1, 2)
    z = t.vocab.index("z")
    torch.testing.assert_close(t.cond[z, :-1], torch.tensor([2, 2, 2, 1, 1], dtype=torch.float64) / 8)
    with pytest.raises(AttnInputError, match="needs sequences of at least"):
        train_bbm(tiny_config(context=4), t)


def test_save_and_load_rebuild_the_same_task(task: BigramBackcopy, tmp_path) -> None:
    back = BigramBackcopy.load(task.save(tmp_path / "t.json"))
    assert back.vocab == task.vocab and back.triggers == task.triggers
    assert torch.equal(back.cond, task.cond) and torch.equal(back.first, task.first)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(AttnInputError, match="not a saved Bigram-Backcopy task"):
        BigramBackcopy.load(tmp_path / "bad.json")


def test_sequences_follow_the_rules_and_the_bigram_table(task: BigramBackcopy) -> None:
    g = torch.Generator().manual_seed(0)
    seq = task.sample(2000, 48, g)
    assert bool((seq[:, 0] == task.bos).all()) and not bool((seq[:, 1:] == task.bos).any())
    assert not bool(task.is_trigger(seq[:, 1]).any())  # the first token is never a trigger
    trig = task.is_trigger(seq[:, 1:-1])  # position t-1 is a trigger (t >= 2) ...
    assert bool((seq[:, 2:][trig] == seq[:, :-2][trig]).all())  # ... so token t copies token t-2
    # transitions out of non-triggers match the table within 5 binomial standard errors
    x, y = seq[:, 1:-1][~trig], seq[:, 2:][~trig]
    V = task.size
    counts = torch.bincount(x * V + y, minlength=V * V).view(V, V).double()
    n = counts.sum(-1, keepdim=True)
    seen = n[:, 0] > 200
    freq = counts[seen] / n[seen]
    p = task.cond[seen]
    se = torch.sqrt(p * (1 - p) / n[seen])
    assert bool(((freq - p).abs() <= 5 * se + 1e-9).all())
    first = torch.bincount(seq[:, 1], minlength=V).double() / seq.shape[0]
    assert bool(((first - task.first).abs() <= 5 * torch.sqrt(task.first * (1 - task.first) / 2000) + 1e-9).all())


def test_sampling_is_seeded(task: BigramBackcopy) -> None:
    a = task.sample(4, 30, torch.Generator().manual_seed(5))
    b = task.sample(4, 30, torch.Generator().manual_seed(5))
    c = task.sample(4, 30, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(eval_sequences(task, 16), eval_sequences(task, 16))


def test_roles_and_optimal_loss(task: BigramBackcopy) -> None:
    ids = task.sample(3, 20, torch.Generator().manual_seed(1))
    roles = task.roles(ids)
    opt = task.optimal_loss(ids)
    for b in range(3):
        for i in range(19):
            x = int(ids[b, i])
            want_role = 0 if i == 0 else COPY if x in task.triggers else BIGRAM
            assert int(roles[b, i]) == want_role
            p = task.cond[x]
            h = -sum(float(v) * math.log(float(v)) for v in p if v > 0)
            assert float(opt[b, i]) == pytest.approx(0.0 if want_role == COPY else h)


def test_encode_drops_unknown_characters(task: BigramBackcopy) -> None:
    ids, dropped = task.encode("Speak, speak!\u00e9")
    assert int(ids[0]) == task.bos and dropped == 2  # '!' and 'é' are not in the snippet
    assert task.chars(ids[1:]) == "Speak, speak"


def test_labels() -> None:
    assert bbm_label(tiny_config()) == "softmax · seed 0"
    assert bbm_label(tiny_config("sink_logit", sink_init=-5.0, seed=2)) == "sink logit b₀=-5 · seed 2"
    assert bbm_label(tiny_config("relu"), with_seed=False) == "ReLU"
    assert first_crossing([0, 50, 100], [0.1, 0.31, 0.9]) == 50
    assert first_crossing([0, 50], [0.1, None]) is None


# ---------------------------------------------------------------------------- probes from scratch


@pytest.mark.parametrize("variant", ["standard", "softmax1", "sink_logit", "sigmoid", "relu", "gated"])
def test_probe_against_scratch(task: BigramBackcopy, variant: str) -> None:
    m = sharp_model(task, variant)
    ids = eval_sequences(task, 16, n=6)
    p = probe(m, task, ids)
    x = ids[:, :-1]
    with torch.no_grad():
        logits, maps = m(x, return_attn=True)
    w = maps[0].double()  # (B, H, T, T)
    roles = task.roles(x)
    for h in range(2):
        bos = w[:, h, :, 0]
        assert p["bos_trigger"][0][h] == pytest.approx(float(bos[roles == COPY].mean()))
        assert p["bos_other"][0][h] == pytest.approx(float(bos[roles == BIGRAM].mean()))
        nowhere = 1.0 - w[:, h].sum(-1)
        assert p["nowhere_other"][0][h] == pytest.approx(float(nowhere[roles == BIGRAM].mean()), abs=1e-9)
        # Gu et al.'s score: every query sees key 0, so alpha_0 is the mean of column 0
        assert p["alpha0"][0][h] == pytest.approx(float(w[:, h, :, 0].mean()))
    assert p["sink_share"][0] == sum(a > 0.3 for a in p["alpha0"][0]) / 2
    # value norms from the qkv weights: v = LN(embedding) W_v^T, per head
    blk = m.blocks[0]
    with torch.no_grad():
        v = blk.ln1(m.tok(x)).double() @ blk.attn.qkv.weight[32:].double().t()  # (B, T, D)
    v = v.view(6, 16, 2, 8).norm(dim=-1)  # (B, T, H)
    for h in range(2):
        want = float(v[:, 0, h].mean() / v[:, 1:, h].mean())
        assert p["value_ratio"][0][h] == pytest.approx(want, rel=1e-5)
    nll = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(6, 16).double()
    assert p["copy_loss"] == pytest.approx(float(nll[roles == COPY].mean()), rel=1e-5)
    assert p["bigram_loss"] == pytest.approx(float(nll[roles == BIGRAM].mean()), rel=1e-5)
    assert p["loss"] == pytest.approx(float(nll.mean()), rel=1e-5)
    # the bigram excess is the KL divergence from the true row to the prediction (>= 0)
    logp = torch.log_softmax(logits.double(), -1)
    kl = [float(sum(float(q) * (math.log(float(q)) - float(logp[b, i, j]))
                    for j, q in enumerate(task.cond[int(x[b, i])]) if q > 0))
          for b in range(6) for i in range(16) if int(roles[b, i]) == BIGRAM]
    assert p["bigram_excess"] == pytest.approx(sum(kl) / len(kl), rel=1e-6) and p["bigram_excess"] > 0
    if variant == "gated":
        with torch.no_grad():
            g = torch.sigmoid(blk.attn.gate(blk.ln1(m.tok(x)))).double().view(6, 16, 2, 8).mean(-1)  # (B, T, H)
        assert p["gate_other"][0][0] == pytest.approx(float(g[..., 0][roles == BIGRAM].mean()))
    else:
        assert p["gate_other"] == [None]
    if variant == "standard":
        assert abs(p["nowhere_trigger"][0][0]) < 1e-9
    # the probe is not vacuous: the heads are far from uniform
    uniform = torch.ones(16, 16, dtype=torch.float64).tril() / torch.arange(1, 17, dtype=torch.float64)[:, None]
    assert float((w - uniform).abs().amax(dim=(-1, -2)).min()) > 0.2


def test_capture_agrees_with_the_model(task: BigramBackcopy) -> None:
    m = sharp_model(task, "gated", n_layer=2)
    x = eval_sequences(task, 16, n=3)[:, :-1]
    cap = capture(m, x)
    with torch.no_grad():
        logits, maps = m(x, return_attn=True)
    torch.testing.assert_close(cap.logits, logits)
    for a, b in zip(cap.weights, maps, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("variant", ["standard", "softmax1", "sink_logit"])
def test_ablation_renormalises_over_the_rest(task: BigramBackcopy, variant: str) -> None:
    """Hiding BOS before the softmax family's normaliser gives w_j / (1 - w_0) on the other keys."""
    m = sharp_model(task, variant)
    x = eval_sequences(task, 16, n=4)[:, :-1]
    with torch.no_grad():
        _, (w,) = m(x, return_attn=True)
        _, (wa,) = m(x, allowed=no_bos_mask(16), return_attn=True)
    want = w[..., 1:, 1:] / (1.0 - w[..., 1:, :1])
    torch.testing.assert_close(wa[..., 1:, 1:], want, rtol=1e-5, atol=1e-6)
    assert bool((wa[..., 1:, 0] == 0).all())
    assert float(w[..., 1:, 0].mean()) > 0.01  # BOS had weight to take away


@pytest.mark.parametrize("variant", ["sigmoid", "relu"])
def test_ablation_of_elementwise_normalisers_uses_one_key_fewer(task: BigramBackcopy, variant: str) -> None:
    m = sharp_model(task, variant)
    x = eval_sequences(task, 16, n=2)[:, :-1]
    blk = m.blocks[0]
    with torch.no_grad():
        _, (wa,) = m(x, allowed=no_bos_mask(16), return_attn=True)
        h = blk.ln1(m.tok(x))
        q, k, _ = blk.attn.split_heads(h)
        from attncore.training.model import apply_rotary, rotary_angles
        cos, sin = rotary_angles(torch.arange(16), 8)
        s = apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).transpose(-2, -1) / math.sqrt(8)
    n = torch.arange(0, 16, dtype=torch.float32)[1:, None]  # row i >= 1 sees i keys without BOS
    want = torch.sigmoid(s[..., 1:, 1:] - torch.log(n)) if variant == "sigmoid" else s[..., 1:, 1:].clamp_min(0) / n
    want = want * torch.ones(15, 15).tril()
    torch.testing.assert_close(wa[..., 1:, 1:], want, rtol=1e-5, atol=1e-6)


def test_bos_ablation_losses_from_scratch(task: BigramBackcopy) -> None:
    m = sharp_model(task, "standard")
    ids = eval_sequences(task, 16, n=5)
    ab = bos_ablation(m, task, ids)
    x, roles = ids[:, :-1], task.roles(ids[:, :-1])
    with torch.no_grad():
        lg, _ = m(x, allowed=no_bos_mask(16))
    nll = F.cross_entropy(lg.flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(5, 16)
    assert ab["bigram_loss_ablated"] == pytest.approx(float(nll[roles == BIGRAM].double().mean()), rel=1e-6)
    assert ab["copy_delta"] == pytest.approx(ab["copy_loss_ablated"] - ab["copy_loss"])
    assert ab["bigram_delta"] != 0


def test_streaming_matches_stream_nll_per_sequence(task: BigramBackcopy) -> None:
    m = sharp_model(task, "softmax1")
    g = torch.Generator().manual_seed(9)
    ids = task.sample(3, 40, g)
    out = bbm_streaming(m, task, ids, window=4)
    batch = stream_nll(m, ids, "window_sinks", 4, 1)
    for b in range(3):
        torch.testing.assert_close(batch[b], stream_nll(m, ids[b], "window_sinks", 4, 1))
    roles = task.roles(ids)[:, 15:39]
    assert out["window_bos_copy"] == pytest.approx(float(batch[:, 15:][roles == COPY].mean()))
    assert out["window_bos"] == pytest.approx(float(batch[:, 15:].mean()))
    with pytest.raises(AttnInputError, match="window must lie"):
        bbm_streaming(m, task, ids, window=16)
    with pytest.raises(AttnInputError, match="longer than the context"):
        bbm_streaming(m, task, ids[:, :16], window=4)


# ---------------------------------------------------------------------------- training


def test_train_is_seeded_and_probes_every_eval_point(task: BigramBackcopy) -> None:
    a = train_bbm(tiny_config(), task, device="cpu")
    b = train_bbm(tiny_config(), task, device="cpu")
    assert a.steps == [0, 3, 6] and a.train_loss[0] is None and len(a.probes) == 3
    assert a.batch_loss == b.batch_loss and a.val_loss == b.val_loss
    c = train_bbm(tiny_config(seed=1), task, device="cpu")
    assert c.batch_loss != a.batch_loss
    curves = a.curves()
    assert curves["task"] == "bbm" and curves["bbm"]["triggers"] == [task.vocab[i] for i in task.triggers]
    assert curves["label"] == "softmax · seed 0" and curves["final_val_loss"] == a.val_loss[-1]


def test_cancel_and_divergence_stop_with_an_eval_point(task: BigramBackcopy, monkeypatch) -> None:
    calls = []
    r = train_bbm(tiny_config(steps=20, eval_every=10), task, device="cpu", cancel=lambda: len(calls) >= 5,
                  progress=lambda *a: calls.append(a))
    assert r.cancelled and len(r.batch_loss) == 4 and r.steps[-1] == 4
    assert calls[0][:3] == (0, 20, None) and calls[0][4]["loss"] == calls[0][3]  # the untrained model first
    assert len(calls[1]) == 5 and calls[1][0] == 1 and calls[1][3] is None  # step, total, loss, val, probe
    monkeypatch.setattr(bbm_train_mod, "divergence_threshold", lambda v: 0.0)
    d = train_bbm(tiny_config(), task, device="cpu")
    assert d.diverged_at == 1 and d.batch_loss == [] and d.steps == [0]


def test_dropout_is_seeded_from_the_config_and_off_at_the_probes(task: BigramBackcopy) -> None:
    """The loop is train()'s: dropout masks come from config.seed + 2 whatever the global state, which is
    restored afterwards; the probes run the model in eval mode (no masks)."""
    cfg = tiny_config(dropout=0.3)
    torch.manual_seed(123)
    a = train_bbm(cfg, task, device="cpu")
    torch.manual_seed(456)
    state = torch.random.get_rng_state()
    b = train_bbm(cfg, task, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert a.batch_loss == b.batch_loss and a.val_loss == b.val_loss
    plain = train_bbm(tiny_config(), task, device="cpu")
    assert a.batch_loss != plain.batch_loss
    assert a.val_loss[0] == plain.val_loss[0]  # the same untrained model, probed without masks
    assert a.val_loss[-1] == probe(a.model, task, eval_sequences(task, cfg.context))["loss"]
    assert train_bbm(tiny_config(dropout=0.3, seed=1), task, device="cpu").batch_loss != a.batch_loss
