"""Benchmark: the bundled decoder, SmolLM2-135M-Instruct, 4-bit (Q4_1) weights dequantised to float32.

Prints, in one run, each beside plain transformers on the same machine:

* the first conversion (``load_model("smollm2")`` into an empty cache folder: dequantise the GGUF, keep
  a float32 copy) against ``AutoTokenizer`` + ``AutoModelForCausalLM.from_pretrained(gguf_file=...)``
  alone (no copy kept), each in a fresh interpreter (torch and attncore imported first, as in the app);
* the load from the converted copy (``load_model("smollm2")``) against ``from_pretrained`` of the same
  folder, fresh interpreters;
* one forward pass with attention weights at 512 and 1,024 tokens as the Heatmaps page runs it
  (``run_text(lm, text, layers=(0,))``: past the 394-token map limit every head's summary and one
  layer's maps) against plain transformers with every map (eager, ``output_attentions=True``) and
  without weights (SDPA), with the peak memory each adds (VmHWM over the resident set before it);
* the Attention sinks page's StreamingLLM panel (7 masked passes at 1,024 tokens) against the same
  passes in plain transformers with eager attention (the model as loaded).

Targets (issue 30): conversion <= 45 s, load from the copy <= 5 s, forward with weights <= 1.5 s at 512
tokens and <= 5 s at 1,024, the StreamingLLM panel <= 20 s. Run: ``python -m bench.models``
(``--no-convert`` skips the two conversions, ~1-3 minutes each); say how loaded the machine was (the
load average is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TEXT = ("When a head has nothing useful to read, softmax still makes it spend all of its attention "
        "somewhere; a trained model learns to park it on the first token. ") * 80

_CONVERT_OURS = """
import time, torch, attncore
t0 = time.perf_counter()
from attncore.models import load_model
lm = load_model("smollm2")
assert lm.converted
print(time.perf_counter() - t0)
"""
_CONVERT_PLAIN = """
import time, torch, attncore
t0 = time.perf_counter()
from attncore.models.bundled import smollm2_gguf
from transformers import AutoModelForCausalLM, AutoTokenizer
p = smollm2_gguf()
tok = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
m = AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name, dtype=torch.float32)
print(time.perf_counter() - t0)
"""
_LOAD_OURS = """
import time, torch, attncore
t0 = time.perf_counter()
from attncore.models import load_model
lm = load_model("smollm2")
assert not lm.converted
print(time.perf_counter() - t0)
"""
_LOAD_PLAIN = """
import time, torch, attncore
t0 = time.perf_counter()
from attncore.models.bundled import converted_copy
from transformers import AutoModelForCausalLM, AutoTokenizer
d = converted_copy()
tok = AutoTokenizer.from_pretrained(d)
m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
print(time.perf_counter() - t0)
"""


def fresh(snippet: str, env: dict[str, str] | None = None, repeats: int = 1) -> float:
    """Median wall seconds printed by ``snippet`` in fresh interpreters."""
    e = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    out = []
    for _ in range(repeats):
        r = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=e, cwd=ROOT,
                           check=True, timeout=1800)
        out.append(float(r.stdout.strip().splitlines()[-1]))
    return statistics.median(out)


def peak_and_time(fn, repeats: int) -> tuple[float, float]:
    """(median seconds, peak MiB added over the resident set before the first call) of ``fn()``.

    The peak counts from before the first (warm-up) call: later calls reuse memory the allocator kept,
    so a peak measured after a warm-up reads ~0 (the first run of this bench printed "+0 MiB" for the
    two baselines that way). Each contender still sees what the one before it left allocated, so the
    analytic estimates printed beside it are the numbers to compare."""
    from attncore.kernels import proc_status_kib, reset_peak_rss

    reset_peak_rss()
    base = proc_status_kib("VmRSS")
    fn()  # warm
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), (proc_status_kib("VmHWM") - base) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-convert", action="store_true", help="skip the two first-conversion timings")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if not args.no_convert:
        with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as tmp:
            ours = fresh(_CONVERT_OURS, {"ATTNLAB_MODEL_CACHE": tmp})
        plain = fresh(_CONVERT_PLAIN)
        print(f"first conversion (GGUF -> float32)     ours {ours:7.1f} s (with the copy kept)   plain "
              f"transformers {plain:7.1f} s   ratio {ours / plain:5.2f}   target <= 45 s")
    from attncore.models import converted_copy, load_model, run_text

    if converted_copy() is None:
        load_model("smollm2")  # make the copy the load timings read
    ours = fresh(_LOAD_OURS, repeats=args.repeats)
    plain = fresh(_LOAD_PLAIN, repeats=args.repeats)
    print(f"load from the float32 copy             ours {ours:7.2f} s   plain transformers {plain:7.2f} s   "
          f"ratio {ours / plain:5.2f}   target <= 5 s")
    lm = load_model("smollm2")
    from transformers import AutoModelForCausalLM

    sdpa = AutoModelForCausalLM.from_pretrained(converted_copy(), dtype=torch.float32,
                                                attn_implementation="sdpa").eval()
    # the weights are memory-mapped: the first pass of each model pages ~540 MB in, which is the model's
    # memory (counted when it loads), not a pass's; touch them once before any peak is read
    with torch.inference_mode():
        for m in (lm.model, sdpa):
            m(lm.tokenizer("warm up", return_tensors="pt")["input_ids"], logits_to_keep=1)
    for L, target in ((512, 1.5), (1024, 5.0)):
        ids = lm.tokenizer(TEXT, return_tensors="pt")["input_ids"][:, :L]
        assert ids.shape[1] == L, ids.shape
        text = lm.tokenizer.decode(ids[0])
        n = len(lm.tokenizer(text)["input_ids"])

        def ours_fn() -> None:
            run_text(lm, text, max_tokens=L, layers=(0,))

        def eager_fn() -> None:
            with torch.inference_mode():
                lm.model(ids, output_attentions=True, logits_to_keep=1)

        def sdpa_fn() -> None:
            with torch.inference_mode():
                sdpa(ids, logits_to_keep=1)

        from attncore.models import decoder_pass_bytes

        est_o = decoder_pass_bytes(lm, L, 1) / 2**20
        est_e = decoder_pass_bytes(lm, L, lm.layers) / 2**20
        print(f"  estimates at {L} tokens: ours {est_o:.0f} MiB (one layer's maps kept), eager with every "
              f"map {est_e:.0f} MiB")
        t_o, m_o = peak_and_time(ours_fn, args.repeats)
        t_e, m_e = peak_and_time(eager_fn, args.repeats)
        t_s, m_s = peak_and_time(sdpa_fn, args.repeats)
        print(f"forward at {min(L, n):5d} tokens with weights    ours {t_o:6.2f} s (+{m_o:5.0f} MiB peak; "
              f"every head's summary, layer 0's maps)   eager all maps {t_e:6.2f} s (+{m_e:5.0f} MiB)   "
              f"sdpa no weights {t_s:6.2f} s (+{m_s:5.0f} MiB)   ours/eager {t_o / t_e:4.2f}   "
              f"target <= {target:g} s")
    stream_panel(lm, args.repeats)
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def stream_panel(lm, repeats: int) -> None:  # noqa: ANN001 - a LoadedModel
    """The Attention sinks page's StreamingLLM panel at 1,024 tokens (7 settings: dense; windows 64 and 128
    alone and with the first 1 or 4 tokens, the page's default windows) as the page runs it
    (``stream_losses``: a pass without weights runs SDPA) against plain transformers running the same
    7 masked passes with the model as loaded (eager attention). Median of ``repeats`` (at least 1)."""
    from attncore.decoder.probe import additive_mask, band_allowed
    from attncore.decoder.streaming import default_settings, stream_losses
    from attncore.decoder.text import shipped_text

    L = 1024
    ids = lm.tokenizer(shipped_text(), return_tensors="pt")["input_ids"][:, :L]
    settings = default_settings(L, (64, 128))

    def ours() -> None:
        stream_losses(lm.model, ids, settings)

    def plain() -> None:
        with torch.inference_mode():
            for st in settings:
                mask = additive_mask(band_allowed(L, st.window, st.sinks))
                out = lm.model(input_ids=ids, attention_mask=mask, use_cache=False)
                torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:], reduction="none")

    n = max(1, min(repeats, 2))
    t_o, m_o = peak_and_time(ours, n)
    t_p, m_p = peak_and_time(plain, n)
    print(f"StreamingLLM panel, {len(settings)} settings at {L} tokens   ours {t_o:6.1f} s "
          f"(+{m_o:5.0f} MiB)   plain eager passes {t_p:6.1f} s (+{m_p:5.0f} MiB)   ratio {t_o / t_p:4.2f}   "
          "target <= 20 s")


if __name__ == "__main__":
    main()
