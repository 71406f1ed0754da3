"""Claims measured on a real decoder LLM: SmolLM2-135M-Instruct (30 layers, 9 query heads, 3 key/value heads).

The notes' attention-sink story (sinks are learned and land on meaningless tokens; the sink's value
shrinks), the SDPA page's sliding-window trade-off (a window misses what lies outside it "unless combined
with global tokens": measured as StreamingLLM's first 4 tokens kept beside the window, which splits the
window's loss into the lost sink and the context the window lacks; :mod:`attncore.evidence.eviction` splits
it at four budgets on prose and code) and its grouped-query claim on the model's own shapes. Each row
states the model, its quantisation, the text and the length. The measurements come from
:mod:`attncore.decoder` on the shipped public-domain text (the sinks row also on the two texts written for the
app, :data:`attncore.decoder.text.SINK_TEXTS`); the model is loaded by
``attncore.models.load_model("smollm2")`` (a row says "not testable here" without it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import torch

from attncore.citations import Quoted, quoted, table
from attncore.decoder.probe import decoder_shape, layer_qkv
from attncore.decoder.sinks import GU_EPS, GU_TOKENS, KIND_LABELS, decoder_sinks, sink_variants
from attncore.decoder.stream_run import SHIPPED_STREAM_FILE, STREAM_RUN_LENGTH, load_stream_run
from attncore.decoder.streaming import StreamResult, StreamSetting, stream_losses
from attncore.decoder.text import SHIPPED_TEXT_NAME, SINK_TEXTS, shipped_text, sink_text
from attncore.errors import AttnInputError
from attncore.evidence.records import (
    CAVEAT,
    FAILS,
    HOLDS,
    K_SE,
    LIVE,
    SHIPPED,
    UNTESTABLE,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
    fmt_pm,
)
from attncore.models.bundled import SMOLLM2
from attncore.models.modules import attention_implementation

__all__ = [
    "ATTRACT_TOKENS",
    "CLAIMS",
    "DRAIN_MAX",
    "GQA_TOL",
    "LIGHT_KINDS",
    "MODEL_LABEL",
    "RECOVER_MIN",
    "STREAM_LENGTH",
    "STREAM_WINDOW",
    "WINDOW_FAIL_RATIO",
    "STREAMING_LLM_TABLE",
    "measure_gqa",
    "measure_sinks",
    "measure_window",
    "measure_window_shipped",
    "window_values",
]

MODEL_LABEL = SMOLLM2.description  # the label lives with the bundled model
STREAM_LENGTH = 1024
STREAM_WINDOW = 256
WINDOW_FAIL_RATIO = 1.5  # the window "fails": perplexity past the window at least this many times dense's
RECOVER_MIN = 0.5  # keeping the first tokens recovers at least this share of the window's loss increase
DRAIN_MAX = 0.5  # "shrinks": the sink's value norm below this share of the other tokens' median
GQA_TOL = 2e-5
ATTRACT_TOKENS = 256  # what else draws weight is measured at this length (from here on a function word leads)
LIGHT_KINDS = ("newline", "punctuation", "function")  # tokens with little meaning of their own
# StreamingLLM (Xiao et al. 2023), from attncore.citations: Table 1 (Llama-2-13B, the first book of PG19, a
# cache of 1,024: 0 + 1024, 4 + 1020, four line breaks + 1020); Table 2's Llama-2-7B row (another model, text
# and cache) is shown apart by the page (ui.views.decoder.streaming_llm_sentence).
STREAMING_LLM_TABLE: tuple[Quoted, ...] = table("xiao2023", "Table 1")
_XIAO_WINDOW, _XIAO_KEEP4 = quoted("xiao2023.t1.0+1024"), quoted("xiao2023.t1.4+1020")


def _load() -> tuple[Any, Any]:
    """(model, tokenizer) of SmolLM2, or an OSError saying why not."""
    try:
        from attncore.models import load_model
    except ImportError as exc:  # pragma: no cover - the package always has it
        raise OSError(f"no model loader: {exc}") from exc
    lm = load_model("smollm2")
    return lm.model, lm.tokenizer


# A test or a notebook can replace the loader (e.g. by a tiny random model).
LOADER: list[Callable[[], tuple[Any, Any]]] = [_load]


def _ids(tokenizer: Any, limit: int, text: str | None = None) -> tuple[torch.Tensor, list[str]]:
    ids = tokenizer(shipped_text() if text is None else text, return_tensors="pt",
                    add_special_tokens=True)["input_ids"][:, :limit]
    texts = [tokenizer.decode([int(i)]) for i in ids[0]]
    return ids, texts


def _missing(exc: BaseException) -> Measurement:
    return Measurement(missing=f"SmolLM2 could not be loaded or run here: {str(exc).splitlines()[0][:200]}")


def _scale(L: int) -> str:
    return f"{MODEL_LABEL}; {SHIPPED_TEXT_NAME}; {L:,} tokens"


@lru_cache(maxsize=2)
def _sinks(loader_id: int) -> Measurement:
    model, tok = LOADER[0]()
    shape = decoder_shape(model)
    ids, texts = _ids(tok, GU_TOKENS + 3)
    L = min(GU_TOKENS, int(ids.shape[1]) - 3)
    s = decoder_sinks(model, ids[:, :L], texts[:L])
    other = int(tok(" the", add_special_tokens=False)["input_ids"][0])
    var = sink_variants(model, ids, texts, other_first=other, other_text=" the", shift=3, length=L)
    group = shape.heads // shape.kv_heads
    sink_idx = (s.first_score > GU_EPS).nonzero().tolist()
    sink_ratio = [float(s.value_ratio[n, h // group]) for n, h in sink_idx]
    # the contrast is between layers: those with no sink head at all, every key/value group of them
    free = [n for n in range(shape.layers) if not bool((s.first_score[n] > GU_EPS).any())]
    rest_ratio = [float(r) for n in free for r in s.value_ratio[n]]
    vals: dict[str, object] = {
        "L": L, "heads": s.heads, "sink_heads": s.sink_heads, "mean_first": float(s.first_score.mean()),
        "uniform_first": sum(1.0 / k for k in range(1, L + 1)) / L, "first_text": texts[0],
        "swapped_sink_heads": var[1].sink_heads, "shifted_sink_heads": var[2].sink_heads,
        "shifted_first": var[2].first_text,
        "layers_with_sinks": int((s.share > 0).sum()), "layers": shape.layers,
        "drain_sink": statistics.median(sink_ratio) if sink_ratio else math.nan,
        "drain_rest": statistics.median(rest_ratio) if rest_ratio else math.nan,
        "drain_below_one": sum(r < 1.0 for r in sink_ratio),
        "drain_free_layers": ", ".join(map(str, free)),
    }
    vals.update(_attractors(model, tok))
    return Measurement(vals, basis=LIVE, scale=_scale(L) + f" (Gu et al.'s protocol, ε = {GU_EPS:g}); what "
                       f"else draws weight: {ATTRACT_TOKENS} tokens of each of {len(SINK_TEXTS)} texts")


def _attractors(model: Any, tok: Any) -> dict[str, object]:
    """What draws weight besides the first token, per text of SINK_TEXTS at ATTRACT_TOKENS tokens: the kinds'
    scores over uniform (first token taken out, late keys dropped) and the strongest key after the first."""
    out: dict[str, list[object]] = {k: [] for k in (
        "text_names", "tokens", "top_pos", "top_text", "top_kind", "top_score", "top_rest", "top_lead",
        "next_text", *(f"{kind}_ratio" for kind in KIND_LABELS))}
    for i, (name, _file) in enumerate(SINK_TEXTS):
        ids, texts = _ids(tok, ATTRACT_TOKENS, sink_text(i))
        s = decoder_sinks(model, ids, texts)
        top = s.attractors[0]
        out["text_names"].append(name)
        out["tokens"].append(s.length)
        out["top_pos"].append(top.position)
        out["top_text"].append(top.text)
        out["top_kind"].append(top.kind)
        out["top_score"].append(top.score)
        out["top_rest"].append(top.rest_score)
        out["top_lead"].append(s.lead)
        out["next_text"].append(s.attractors[1].text if len(s.attractors) > 1 else "")
        for kind in KIND_LABELS:
            ok = kind in s.kind_score and s.kind_uniform[kind] > 0
            out[f"{kind}_ratio"].append(s.kind_score[kind] / s.kind_uniform[kind] if ok else math.nan)
    return {k: tuple(v) for k, v in out.items()}


def measure_sinks(setting: Setting) -> Measurement:
    """Sink heads and value drain of SmolLM2 on the first 64 tokens of the shipped text, and what else draws
    weight on the first :data:`ATTRACT_TOKENS` tokens of each text of :data:`SINK_TEXTS`."""
    try:
        return _sinks(id(LOADER[0]))
    except (OSError, RuntimeError, ValueError) as exc:
        return _missing(exc)


def _per_text(m: Measurement, key: str) -> list[Any]:
    """A value measured once per text (a tuple in the measurement) as a list."""
    return list(cast(Sequence[Any], m[key]))


def _marks(m: Measurement) -> list[float]:
    """Per text: the larger of the punctuation and line-break ratios (over uniform), NaN where neither."""
    out = []
    for p, n in zip(_per_text(m, "punctuation_ratio"), _per_text(m, "newline_ratio"), strict=True):
        known = [x for x in (float(p), float(n)) if math.isfinite(x)]
        out.append(max(known) if known else math.nan)
    return out


def _span(xs: Sequence[float]) -> str:
    known = [x for x in xs if math.isfinite(x)]
    if not known:
        return "—"
    lo, hi = min(known), max(known)
    return f"{fmt(lo, 3)}×" if fmt(lo, 3) == fmt(hi, 3) else f"{fmt(lo, 3)}–{fmt(hi, 3)}×"


def _tops(m: Measurement) -> str:
    """"' the' at 71, 6.8× the next key" per text (the ratio of scores with the first token taken out)."""
    keys = ("top_text", "top_pos", "top_lead")
    return "; ".join(f"{t!r} at {int(p)}, {fmt(float(le), 3)}× the next key"
                     for t, p, le in zip(*(_per_text(m, k) for k in keys), strict=True))


def _sinks_judge(m: Measurement) -> Judgement:
    n, total = int(m.num("sink_heads")), int(m.num("heads"))
    if n == 0:
        return Judgement(FAILS, f"no head of {total} gives the first token more than ε = {GU_EPS:g}.")
    shifted = int(m.num("shifted_sink_heads"))
    kinds = [str(k) for k in _per_text(m, "top_kind")]
    texts = len(kinds)
    marks, words = _marks(m), [float(x) for x in _per_text(m, "word_ratio")]
    light = sum(k in LIGHT_KINDS for k in kinds)
    what = ("a function word, not punctuation" if all(k == "function" for k in kinds)
            else "a line break, punctuation or a function word")
    above = sum(math.isfinite(a) and math.isfinite(w) and a > w and a >= 1.0
                for a, w in zip(marks, words, strict=True))
    position = shifted >= n / 2
    marks_text = (f"punctuation or line breaks draw {_span(marks)} uniform attention's weight, other words "
                  f"{_span(words)}, with the first token taken out")
    if position and light == texts and above == texts:
        return Judgement(HOLDS, f"{n} of {total} heads sink on the first position whatever its token "
                                f"({shifted} after a shift by 3); besides it, the strongest key on each of "
                                f"{texts} texts is {what} ({_tops(m)}); {marks_text}.")
    why = []
    if not position:
        why.append(f"shifting the text by 3 tokens leaves {shifted} of {n} sink heads")
    if light < texts:
        why.append(f"besides it, a content word draws most on {texts - light} of {texts} texts ({_tops(m)})")
    else:
        why.append(f"besides it, the strongest key on each of {texts} texts is {what} ({_tops(m)})")
    if above < texts:
        why.append(f"punctuation or line breaks draw more than other words and at least uniform attention's "
                   f"weight on only {above} of {texts} texts ({marks_text})")
    return Judgement(CAVEAT, f"{n} of {total} heads sink on the first position, but " + "; ".join(why) + ".")


def _sinks_text(m: Measurement) -> str:
    names = _per_text(m, "text_names")
    per = "; ".join(
        f"{name}: strongest after the first {t!r} at {int(p)} (mean score {fmt(float(sc), 3)}; "
        f"{fmt(float(r), 3)} with the first token taken out, {fmt(float(le), 3)}× the next key, {nt!r})"
        for name, t, p, sc, r, le, nt in zip(names, *(_per_text(m, k) for k in (
            "top_text", "top_pos", "top_score", "top_rest", "top_lead", "next_text")), strict=True))
    ratios = ", ".join(f"{KIND_LABELS[k]} {_span([float(x) for x in _per_text(m, f'{k}_ratio')])}"
                       for k in KIND_LABELS)
    return (f"{int(m.num('sink_heads'))} of {int(m.num('heads'))} heads sink on the first token "
            f"({m['first_text']!r}; mean score {fmt(m.num('mean_first'), 3)} vs "
            f"{fmt(m.num('uniform_first'), 3)} uniform), in {int(m.num('layers_with_sinks'))} of "
            f"{int(m.num('layers'))} layers; another first token ({int(m.num('swapped_sink_heads'))}) and "
            f"the text shifted by 3 tokens ({int(m.num('shifted_sink_heads'))}, first "
            f"{m['shifted_first']!r}). At {ATTRACT_TOKENS} tokens of {len(names)} texts, {per}; score over "
            f"uniform with the first token taken out (range over texts): {ratios}.")


def _free_layers(m: Measurement) -> str:
    """'in the layers without sink heads (0, 1, 2), at 64 tokens: 0.94×', or that there are none."""
    free = str(m.values.get("drain_free_layers", ""))
    if not free:
        return f"every layer has a sink head at {int(m.num('L')):,} tokens, so no layer to contrast"
    return (f"in the layers without sink heads ({free}), at {int(m.num('L')):,} tokens: "
            f"{fmt(m.num('drain_rest'), 2)}×")


def _drain_judge(m: Measurement) -> Judgement:
    if int(m.num("sink_heads")) == 0:
        return Judgement(UNTESTABLE, "no sink head here, so there is no sink whose value could shrink.")
    r, rest = m.num("drain_sink"), m.num("drain_rest")
    below_rest = not math.isfinite(rest) or r < rest
    if r < DRAIN_MAX and below_rest:
        return Judgement(HOLDS, f"the sink heads read a first-token value {fmt(r, 2)}× the others' median "
                                f"({_free_layers(m)}).")
    if r < 1.0:
        return Judgement(CAVEAT, f"the first token's value is smaller ({fmt(r, 2)}× the others'), but not "
                                 f"below {DRAIN_MAX:g}× or not below the layers without sink heads "
                                 f"({_free_layers(m)}).")
    return Judgement(FAILS, f"the sink heads' first-token value is {fmt(r, 2)}× the others' median: no "
                            f"drain.")


def _gqa_measure(loader_id: int) -> Measurement:
    model, tok = LOADER[0]()
    shape = decoder_shape(model)
    ids, _ = _ids(tok, 128)
    L = int(ids.shape[1])
    g = shape.heads // shape.kv_heads
    worst, worst_rep, layers = 0.0, 0.0, (0, shape.layers // 2, shape.layers - 1)
    # the model's own attention: its eager path (scores, softmax, weighted values, K/V shared by repeat)
    with attention_implementation(model, "eager"):
        for layer in layers:
            q, k, v, out = layer_qkv(model, ids, layer)  # out: (1, L, H E), the model's, before o_proj
            gqa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                   enable_gqa=True)  # (1, H, L, E)
            rep = torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True)  # (1, H, L, E)
            mine = gqa.transpose(1, 2).reshape(1, L, shape.heads * shape.head_dim)  # (1, L, H E)
            worst = max(worst, float((mine - out).abs().max()))
            worst_rep = max(worst_rep, float((gqa - rep).abs().max()))
    return Measurement({"diff": worst, "diff_repeat": worst_rep, "heads": shape.heads,
                        "kv_heads": shape.kv_heads, "head_dim": shape.head_dim, "layers": len(layers),
                        "L": L},
                       basis=LIVE, scale=_scale(L) + f"; layers {', '.join(map(str, layers))}")


def measure_gqa(setting: Setting) -> Measurement:
    """SDPA with SmolLM2's real q, k, v (9 query heads sharing 3 K/V heads, ``enable_gqa``) against the
    model's own attention output on them, and against SDPA on K/V repeated per head."""
    try:
        return _gqa_measure(id(LOADER[0]))
    except (OSError, RuntimeError, ValueError) as exc:
        return _missing(exc)


def _gqa_judge(m: Measurement) -> Judgement:
    d, rep = m.num("diff"), m.num("diff_repeat")
    if d <= GQA_TOL and rep <= GQA_TOL:
        same = "is identical to" if rep == 0.0 else f"equals within {fmt(rep, 2)}"
        return Judgement(HOLDS, f"the model's own attention output equals SDPA over its shared K/V heads "
                                f"within {fmt(d, 2)} (float32), and SDPA's grouped path {same} K/V repeated "
                                f"per head.")
    if d > GQA_TOL:
        return Judgement(FAILS, f"the model's attention output differs from SDPA over shared K/V heads by "
                                f"{fmt(d, 2)}, above {GQA_TOL:g}.")
    return Judgement(FAILS, f"SDPA's grouped path differs from K/V repeated per head by {fmt(rep, 2)}, above "
                            f"{GQA_TOL:g}.")


def window_values(r: StreamResult, W: int) -> tuple[dict[str, object], dict[str, float]]:
    """The window row's numbers from a run with dense, window W and window W + first 4 (values, SEs):
    perplexity past the window and the loss changes against dense there."""
    dense, win, keep4 = StreamSetting(None), StreamSetting(W), StreamSetting(W, 4)
    dw, sw = r.delta(win, dense, W)
    d4, s4 = r.delta(keep4, dense, W)
    return ({"L": r.length, "W": W, "ppl_dense": r.ppl(dense, W), "ppl_window": r.ppl(win, W),
             "ppl_keep4": r.ppl(keep4, W), "d_window": dw, "d_keep4": d4},
            {"d_window": sw, "d_keep4": s4})


def _window_scale(L: int, W: int) -> str:
    return _scale(L) + f"; window {W} keys, perplexity over tokens {W + 1}..{L - 1}"


@lru_cache(maxsize=2)
def _window(loader_id: int, L: int, W: int) -> Measurement:
    model, tok = LOADER[0]()
    ids, _ = _ids(tok, L)
    L = int(ids.shape[1])
    if L <= W + 64:
        raise ValueError(f"the text gave {L} tokens, too few for a window of {W}")
    r = stream_losses(model, ids, (StreamSetting(None), StreamSetting(W), StreamSetting(W, 4)))
    vals, se = window_values(r, W)
    return Measurement(vals, se=se, basis=LIVE, scale=_window_scale(L, W))


def measure_window(setting: Setting, L: int = STREAM_LENGTH, W: int = STREAM_WINDOW) -> Measurement:
    """Perplexity past the window: dense, a window of W keys, the window + the first 4 tokens."""
    try:
        return _window(id(LOADER[0]), L, W)
    except (OSError, RuntimeError, ValueError) as exc:
        return _missing(exc)


def measure_window_shipped(setting: Setting, path: Path | str = SHIPPED_STREAM_FILE,
                           W: int = STREAM_WINDOW) -> Measurement:
    """The same numbers read from the shipped 2,048-token run (:mod:`attncore.decoder.stream_run`), not
    rerun here; its scale names the machine and date it was run on."""
    try:
        run = load_stream_run(path)
        vals, se = window_values(run.result, W)
    except (AttnInputError, OSError, ValueError, KeyError) as exc:
        return Measurement(basis=SHIPPED, missing=f"the shipped StreamingLLM run cannot be read: "
                                                  f"{str(exc).splitlines()[0][:200]}")
    h = run.header
    where = (f"shipped run ({h.get('date', '?')}, {h.get('cpu', '?')}, {h.get('threads', '?')} torch "
             f"threads, {run.seconds_per_pass:.1f} s a pass)")
    return Measurement(vals, se=se, basis=SHIPPED, scale=_window_scale(run.result.length, W) + "; " + where)


def _window_judge(m: Measurement) -> Judgement:
    dw, sw, d4, s4 = m.num("d_window"), m.err("d_window"), m.num("d_keep4"), m.err("d_keep4")
    ratio = m.num("ppl_window") / m.num("ppl_dense")
    if not dw > K_SE * sw:
        return Judgement(FAILS, f"the window alone does not raise the loss beyond {K_SE:g} standard errors "
                                f"({fmt_pm(dw, sw)} nats/token): nothing outside it was missed here.")
    recovered = (dw - d4) / dw
    if ratio >= WINDOW_FAIL_RATIO and recovered >= RECOVER_MIN and dw - d4 > K_SE * math.hypot(sw, s4):
        return Judgement(HOLDS, f"the window alone raises perplexity {fmt(ratio, 3)}×, and keeping the "
                                f"first 4 tokens recovers {recovered:.0%} of the loss increase: "
                                + _what_remains(m, recovered))
    if recovered < RECOVER_MIN:
        return Judgement(CAVEAT, f"the window raises perplexity {fmt(ratio, 3)}×, but the first 4 tokens "
                                 f"recover "
                                 f"only {recovered:.0%} of it (StreamingLLM: nearly all).")
    return Judgement(CAVEAT, f"keeping the first 4 tokens recovers {recovered:.0%}, but the window alone "
                             f"raises "
                             f"perplexity only {fmt(ratio, 3)}× (below {WINDOW_FAIL_RATIO:g}×; "
                             f"StreamingLLM's {_XIAO_WINDOW.where}: {_XIAO_WINDOW.printed} vs "
                             f"{_XIAO_KEEP4.printed} on {_XIAO_WINDOW.model}, 65K tokens past its 4K "
                             "training length).")


def _what_remains(m: Measurement, recovered: float) -> str:
    """What the recovery says: the window's loss is (almost all) the lost sink; what remains against dense,
    beyond its standard errors, is context the window lacks (or it is within noise of dense)."""
    d4, s4 = m.num("d_keep4"), m.err("d_keep4")
    share = ("the window's loss is almost all the lost sink" if recovered >= 0.9
             else f"{recovered:.0%} of the window's loss is the lost sink")
    rest = m.num("ppl_keep4") / m.num("ppl_dense") - 1.0
    tail = (f"what remains, {rest:+.1%} perplexity against dense ({fmt_pm(d4, s4)} nats/token), is context "
            f"the window lacks" if d4 > K_SE * s4 else
            f"the window + first 4 is within {K_SE:g} standard errors of dense ({fmt_pm(d4, s4)} nats/token)")
    return f"{share}; {tail}."


def _window_text(m: Measurement) -> str:
    W = int(m.num("W"))
    return (f"at {int(m.num('L')):,} tokens, perplexity past {W} tokens: dense {fmt(m.num('ppl_dense'), 3)}, "
            f"window {W} "
            f"{fmt(m.num('ppl_window'), 3)}, window + first 4 {fmt(m.num('ppl_keep4'), 3)} (loss change "
            f"{fmt_pm(m.num('d_window'), m.err('d_window'))} and "
            f"{fmt_pm(m.num('d_keep4'), m.err('d_keep4'))} "
            f"nats/token); StreamingLLM, {_XIAO_WINDOW.where} ({_XIAO_WINDOW.model}, {_XIAO_WINDOW.data}, a "
            f"cache of 1,024): {_XIAO_WINDOW.label} {_XIAO_WINDOW.printed}, {_XIAO_KEEP4.label} "
            f"{_XIAO_KEEP4.printed}.")


LLM_SINKS = Claim(
    key="llm_sinks",
    source="notes",
    quote="models often learn to dump large amounts of attention weight onto semantically meaningless tokens "
    "(like BOS, padding tokens, or even punctuation)",
    test=f"{MODEL_LABEL} on the first {GU_TOKENS} tokens of the shipped text ({SHIPPED_TEXT_NAME}; the "
    "tokenizer adds no BOS): Gu et al.'s first-token score per head; the same with another first token and "
    f"with the text shifted by 3 tokens. Then, on the first {ATTRACT_TOKENS} tokens of each of "
    f"{len(SINK_TEXTS)} texts ({'; '.join(t for t, _ in SINK_TEXTS)}), with the first token taken out of "
    "every query's weights (re-summed to 1 over the other keys) and the last eighth of the keys dropped "
    "(seen by few queries): the strongest key after the first, and the mean score of line breaks, "
    "punctuation, English function words and other words over uniform attention's on the same keys.",
    tolerance=f"a sink head: first-token score above ε = {GU_EPS:g}; meaningless: the sinks follow the first "
    "position when the text shifts (at least half stay), and on every text the strongest key after the first "
    "is a line break, punctuation or a function word, and punctuation or line breaks draw more than other "
    "words and at least uniform attention's weight",
    measure=measure_sinks,
    describe=_sinks_text,
    judge=_sinks_judge,
    slow=True,
    cites=("gu2024",),
)

LLM_DRAIN = Claim(
    key="llm_value_drain",
    source="notes",
    quote="By attending heavily to a “dummy” token (whose value projection might also be learned towards "
          "zero)",
    test=f"{MODEL_LABEL}, the first {GU_TOKENS} tokens of the shipped text: the first token's value norm "
         f"over "
    "the median of the other tokens', in the key/value group each sink head reads, against the same ratio in "
    "the layers that have no sink head (a contrast between layers).",
    tolerance=f"shrinks: the sink heads' median ratio below {DRAIN_MAX:g} and below that of the layers "
    "without sink heads (where there are any); only where there is a sink head",
    measure=measure_sinks,
    describe=lambda m: (f"first-token value norm / others' median: {fmt(m.num('drain_sink'), 3)} in the sink "
                        f"heads' groups ({int(m.num('drain_below_one'))} of {int(m.num('sink_heads'))} "
                        f"below 1); {_free_layers(m)}."),
    judge=_drain_judge,
    slow=True,
    cites=("gu2024", "guo2024"),
)

LLM_WINDOW = Claim(
    key="llm_window",
    source="sdpa",
    quote="Local / sliding window attention … Each token only attends to a fixed window; misses global "
          "patterns "
    "unless combined with global tokens",
    test=f"{MODEL_LABEL} on {STREAM_LENGTH:,} tokens of the shipped text, one pass per mask at the true "
    f"positions: dense, a window of {STREAM_WINDOW} keys, the window + the first 4 tokens (StreamingLLM's "
    "attention sinks); loss past the window, standard errors over "
    "blocks of 64 tokens. The quote's global tokens are measured as the first 4: what they recover is the "
    "lost sink; what stays above dense is context the window lacks.",
    tolerance=f"the window fails: perplexity ≥ {WINDOW_FAIL_RATIO:g}× dense, the loss increase beyond "
              f"{K_SE:g} "
    f"standard errors; the first 4 tokens recover ≥ {RECOVER_MIN:.0%} of it",
    measure=measure_window,
    describe=_window_text,
    judge=_window_judge,
    slow=True,
    cites=("xiao2023",),
)

LLM_WINDOW_2048 = Claim(
    key="llm_window_2048",
    source="sdpa",
    quote=LLM_WINDOW.quote,
    test=f"The same test at {STREAM_RUN_LENGTH:,} tokens, read from the run shipped with the app "
    f"(attncore/decoder/results, written by python -m attncore.decoder.stream_run; not rerun here): "
    f"{MODEL_LABEL}, dense, a window of {STREAM_WINDOW} keys, the window + the first 4 tokens (the live "
    f"row on this claim measures it at {STREAM_LENGTH:,}).",
    tolerance=LLM_WINDOW.tolerance,
    measure=measure_window_shipped,
    describe=_window_text,
    judge=_window_judge,
    cites=("xiao2023",),
)

LLM_GQA = Claim(
    key="llm_gqa_same",
    source="sdpa",
    quote="grouped-query attention (GQA) … reduce the KV cache size for inference, but the core scaled "
    "dot-product computation remains identical.",
    test=f"{MODEL_LABEL}: the real queries (after rotary), keys and values of layers 0, 15 and 29 on 128 "
    "tokens of the shipped text, 9 query heads sharing 3 K/V heads, head dim 64, causal: SDPA with "
    "enable_gqa (each group of 3 query heads reads one K/V head) against the model's own attention output "
    "(its eager path, before the output projection), and against SDPA on K and V repeated per head.",
    tolerance=f"outputs within {GQA_TOL:g} (float32)",
    measure=measure_gqa,
    describe=lambda m: (f"largest difference from the model's own attention output "
                        f"{fmt(m.num('diff'), 2)}, from K/V repeated per head "
                        f"{fmt(m.num('diff_repeat'), 2)}, "
                        f"over {int(m.num('layers'))} layers ({int(m.num('heads'))} query heads, "
                        f"{int(m.num('kv_heads'))} K/V heads, head dim {int(m.num('head_dim'))}, "
                        f"{int(m.num('L'))} tokens)."),
    judge=_gqa_judge,
    slow=True,
)

CLAIMS: tuple[Claim, ...] = (LLM_SINKS, LLM_DRAIN, LLM_WINDOW, LLM_WINDOW_2048, LLM_GQA)
