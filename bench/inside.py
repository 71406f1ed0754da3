"""Benchmark: issue 40's tools inside SmolLM2-135M, each beside plain transformers where there is a baseline.

Prints, in one run, with the machine's load average at the start and the end:

* **why this head attends here**, redrawn from the cached q/k pass (no new forward): the rotary factors, one
  query's decomposition, the first token's summary and the section's two figures and table at 256 tokens
  (target 0.3 s), beside one plain SDPA forward of the same tokens (what redrawing would cost with a pass);
* **the logit lens** of the last position at 256 tokens including its hooked pass
  (:func:`attncore.decoder.lens.logit_lens`, target 1.5 s), beside plain transformers: one SDPA forward with
  ``output_hidden_states=True`` and every hidden state read through the final norm and ``lm_head``;
* **head patching**, 270 heads on a pair of at most 24 tokens (:func:`attncore.decoder.patching`, one batched
  pass per layer; target 30 s), beside the notebook way: one single-row forward per head with a hook that
  patches it (timed on one layer's heads and scaled to all 270, said so); the residual part (every layer x
  position) is timed too.

Run: python -m bench.inside  (``--repeats N``: medians of N, default 3; ``--threads T``: torch threads,
e.g. 1 on a machine shared with other work, where two spinning threads per process cost more than they give)
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch

from attncore import qkv
from attncore.decoder import why as dec_why
from attncore.decoder.lens import logit_lens
from attncore.decoder.patching import activation_patching, clean_activations, pair_ids
from attncore.decoder.probe import decoder_shape
from attncore.decoder.text import shipped_text, text_tokens
from attncore.models import load_model
from bench.common import median_time, row
from ui.views import why as why_views

TOKENS = 256
WHY_TARGET_S, LENS_TARGET_S, PATCH_TARGET_S = 0.3, 1.5, 30.0
CLEAN = "After a long day at work, when Mary and John went to the big store in town, John gave a drink to"
CORRUPT = "After a long day at work, when John and Mary went to the big store in town, Mary gave a drink to"


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.1f} / {b:.1f} / {c:.1f}"


def _target(label: str, t: float, target: float, cpu: float | None = None) -> str:
    verdict = "PASS" if t <= target else "over"
    spent = "" if cpu is None else f"    (CPU {cpu:.2f} s over {torch.get_num_threads()} threads)"
    return f"{label:<52} ours {t:9.3f} s    target {target:6.2f} s    {verdict}{spent}"


def _cpu(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call: on a shared machine the CPU time is what an idle one would take."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"load average (1/5/15 min) at the start: {_load()}; {os.cpu_count()} CPUs, "
          f"{torch.get_num_threads()} torch threads")
    lm = load_model("smollm2")
    model = lm.model
    ids = text_tokens(lm.tokenizer, shipped_text(), TOKENS).ids  # (1, 256)
    text = lm.tokenizer.decode(ids[0])

    def plain_forward() -> None:
        model.config._attn_implementation = "sdpa"
        try:
            with torch.inference_mode():
                model(input_ids=ids, use_cache=False)
        finally:
            model.config._attn_implementation = "eager"

    # 1. why: the page's redraw from the cached head vectors
    hv = qkv.capture(lm, text)
    L = len(hv.tokens)
    layer, head, query = 3, 4, L - 1
    labels = [t[:14] for t in hv.tokens]

    def redraw() -> None:
        rot = dec_why.rotary_of(model, L)
        q, k = hv.q[layer, head], hv.k[layer, head]
        w = dec_why.decompose(q, k, rot, query, scale=hv.scale)
        dec_why.sink_summary(q, k, w)
        j = int(w.logits[1:].argmax()) + 1
        why_views.pairs_figure(w, j, labels, view="b-pairs")
        why_views.norm_cos_figure(w, labels, view="b-normcos")
        why_views.parts_frame(w, labels)

    t_why = median_time(redraw, repeats=max(3, args.repeats))
    t_fwd = median_time(plain_forward, repeats=args.repeats)
    print(row(f"why redraw, {L} tokens (vs one SDPA forward)", t_why, t_fwd, "forward"))
    print(_target("why redraw from the cached pass", t_why, WHY_TARGET_S, _cpu(redraw)[1]))

    # 2. the logit lens at 256 tokens, including its pass
    norm, unembed = model.model.norm, model.get_output_embeddings()

    def plain_lens() -> None:
        model.config._attn_implementation = "sdpa"
        try:
            with torch.inference_mode():
                hs = model(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states
                for h in hs:
                    unembed(norm(h[0, -1])).softmax(-1).topk(10)
        finally:
            model.config._attn_implementation = "eager"

    t_lens = median_time(lambda: logit_lens(model, ids, L - 1), repeats=args.repeats)
    t_plain = median_time(plain_lens, repeats=args.repeats)
    print(row(f"logit lens, one position, {L} tokens + pass", t_lens, t_plain, "plain"))
    print(_target("logit lens at 256 tokens including the pass", t_lens, LENS_TARGET_S,
                  _cpu(lambda: logit_lens(model, ids, L - 1))[1]))

    # 3. patching 270 heads on a pair of <= 24 tokens
    pair = pair_ids(lm.tokenizer, CLEAN, CORRUPT, " Mary", " John")
    P = pair.length
    if P > 24:
        raise SystemExit(f"the bench pair has {P} tokens; the issue's case is at most 24")
    shape = decoder_shape(model)
    n_heads = shape.layers * shape.heads
    got: list = []
    t_heads, c_heads = _cpu(lambda: got.append(activation_patching(model, pair, parts=("heads",))))
    r = got[0]
    E = shape.head_dim
    _, z, _ = clean_activations(model, pair.clean)
    blocks = model.model.layers

    def one_head(li: int, h: int) -> None:  # the notebook way: a hook that patches one head, one row
        def hook(_m, a):  # noqa: ANN001, ANN202
            x = a[0].clone()
            x[..., h * E:(h + 1) * E] = z[li][:, h * E:(h + 1) * E]
            return (x,)
        handle = blocks[li].self_attn.o_proj.register_forward_pre_hook(hook)
        try:
            model.config._attn_implementation = "sdpa"
            with torch.inference_mode():
                model(input_ids=pair.corrupted, use_cache=False).logits[0, -1]
        finally:
            handle.remove()
            model.config._attn_implementation = "eager"

    t0 = time.perf_counter()
    for h in range(shape.heads):
        one_head(shape.layers // 2, h)
    t_loop = (time.perf_counter() - t0) / shape.heads * n_heads
    print(row(f"head patching, {n_heads} heads, {P}-token pair", t_heads, t_loop, "loop"))
    print(f"{'':<52} (the loop: {shape.heads} heads of layer {shape.layers // 2} timed, scaled to {n_heads})")
    print(_target(f"head patching of {n_heads} heads", t_heads, PATCH_TARGET_S, c_heads))
    t_resid, c_resid = _cpu(lambda: activation_patching(model, pair, parts=("resid",)))
    print(_target(f"residual patching, {shape.layers} layers x {P} positions", t_resid, PATCH_TARGET_S,
                  c_resid))
    top = torch.topk(r.heads.flatten(), 3)
    print("top heads: " + ", ".join(f"L{int(i) // shape.heads}H{int(i) % shape.heads} {float(v):+.3f}"
                                    for v, i in zip(top.values, top.indices, strict=True)))
    print(f"load average (1/5/15 min) at the end: {_load()}")


if __name__ == "__main__":
    main()
