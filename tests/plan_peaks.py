"""Measure every SmolLM2 plan's peak memory against its estimate, in this (fresh) process.

``python -m tests.plan_peaks 64 394 1024`` loads SmolLM2 once and prints one JSON line per (kind, L):
``{"kind", "L", "tokens", "estimate", "peak", "kept"}`` in bytes. The peak is Linux's peak resident set
(VmHWM of /proc/self/status) over the resident set before the call, with the peak mark reset just before it
(``echo 5 > /proc/self/clear_refs``) and the allocator's free memory handed back first (``malloc_trim(0)``
after a garbage collection), so it counts what the call itself made resident: torch's CPU tensors (which
tracemalloc does not see) and anything transformers allocates. Run it with ``MALLOC_MMAP_THRESHOLD_=65536`` (as
``tests/test_plan_memory.py`` does, and as :mod:`attncore.kernels.memory` measures kernels): every block of
64 KiB or more is then its own mapping, returned when freed, so the peak counts the tensors alive together and
not the order earlier calls left glibc's heap in (with its default, sliding threshold of up to 32 MiB the same
pass measured 0-35 MB higher after other kinds had run: fragmentation of the heap, not the pass). Each kind
runs once unmeasured at 16 tokens first (thread pools, lazily made buffers: paid once per process).
``kept`` is the resident growth that stays while the result is held (what a cache of it costs).
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from attncore.decoder import plans
from attncore.decoder.patching import MAX_PATCH_TOKENS, PARTS, PairIds
from attncore.decoder.text import shipped_text, text_tokens
from attncore.kernels.memory import proc_status_kib, reset_peak_rss
from attncore.models import load_model
from attncore.plan import Plan

KINDS = ("maps", "entropy", "generation", "text", "stream", "qkv", "next", "deletion", "gu", "lens",
         "induction_ablation", "spread", "scaling", "patching")
GEN_NEW = 64


def _plans(lm: Any, L: int) -> dict[str, Callable[[], Plan[Any]]]:
    ids = text_tokens(lm.tokenizer, shipped_text(), L, min_tokens=2).ids  # (1, L)
    text = lm.tokenizer.decode(ids[0])
    n = min(GEN_NEW, L // 2)
    prompt = lm.tokenizer.decode(ids[0, : L - n])
    from attncore.decoder.streaming import default_settings

    newline = int(lm.tokenizer("\n", add_special_tokens=False)["input_ids"][0])

    return {
        "maps": lambda: plans.pass_plan(lm.model, ids, maps=((0, 0), (7, 4), (29, 8))),
        "entropy": lambda: plans.entropy_plan(lm.model, ids),
        "generation": lambda: plans.generation_plan(lm, prompt, n),
        "text": lambda: plans.text_plan(lm, text, layers=(7,)),
        "stream": lambda: plans.stream_plan(lm.model, ids, default_settings(L, (max(1, L // 4),))[:2]),
        "qkv": lambda: plans.qkv_plan(lm, text),
        "next": lambda: plans.next_logits_plan(lm, text),
        "deletion": lambda: plans.deletion_plan(lm.model, ids),
        # Gu et al.'s inputs are read at up to 256 tokens (attncore.decoder.position.gu_inputs)
        "gu": lambda: plans.gu_plan(lm.model, ids[:, :256], seed=0, prefix_id=newline, prefix_text="\n"),
        "lens": lambda: plans.lens_plan(lm.model, ids),
        # one random set per size: the passes run one at a time, so the peak does not depend on the count
        "induction_ablation": lambda: plans.induction_ablation_plan(
            lm.model, plans.induction_plan(lm.model, max(2, L // 2), 0).run(), sets=1, seed=0),
        "spread": lambda: plans.spread_plan(lm.model, ids),
        # two factors: the passes run one at a time, so the peak does not depend on the count
        "scaling": lambda: plans.scaling_plan(lm.model, ids, (1.0, 8.0)),
        # a pair is at most MAX_PATCH_TOKENS (64) tokens: the text's first min(L, 64) and the same with its
        # token 1 changed, the heads' part only past 16 tokens (its widest pass has L rows either way; the
        # residual part's N passes of L rows of L tokens take minutes at 64)
        "patching": lambda: plans.patching_plan(lm.model, _pair(ids[:, :min(L, MAX_PATCH_TOKENS)]),
                                                parts=PARTS if L <= 16 else ("heads",)),
    }


def _pair(ids: Any) -> PairIds:
    other = ids.clone()
    other[0, 1] = (int(ids[0, 1]) + 1) % 1000 + 1000  # another token, so the logit differences differ
    return PairIds(clean=ids, corrupted=other, answer=int(ids[0, -1]), wrong=int(other[0, 1]))


def _measure(plan: Plan[Any], libc: Any) -> tuple[int, int, float]:
    gc.collect()
    libc.malloc_trim(0)
    if not reset_peak_rss():
        raise OSError("this kernel does not let a process reset its peak resident set")
    base = proc_status_kib("VmRSS")
    t0 = time.perf_counter()
    out = plan.run()
    wall = time.perf_counter() - t0
    peak = (proc_status_kib("VmHWM") - base) * 1024
    gc.collect()
    libc.malloc_trim(0)
    kept = (proc_status_kib("VmRSS") - base) * 1024
    del out
    return peak, kept, wall


def main(lengths: list[int]) -> None:
    libc = ctypes.CDLL(None)
    lm = load_model("smollm2")
    for make in _plans(lm, 16).values():  # warm-up: paid once per process
        make().run()
    for L in lengths:
        for kind, make in _plans(lm, L).items():
            plan = make()
            peak, kept, wall = _measure(plan, libc)
            print(json.dumps({"kind": kind, "L": L, "label": plan.label, "estimate": plan.nbytes, "peak": peak,
                              "kept": kept, "seconds": plan.seconds, "wall": wall}), flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [64, 394, 1024])
