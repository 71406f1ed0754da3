"""Compile the fused entropy kernels for an H100 (sm_90) without a GPU: ``python tests/fused_compile.py``.

Triton's front end, its GPU passes and the bundled ptxas run on any machine, so this catches
what the interpreter cannot (constexpr rules, layouts, tl.dot shapes). Prints one line per
kernel variant with its registers and stack (cuobjdump); exits 1 on the first failure.
``--quick`` compiles the variants the app and bench use by default. Must run in a process
without ``TRITON_INTERPRET`` (tests run it as a subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from attncore.sweeps import fused_kernels as fk  # noqa: E402
from attncore.sweeps.fused_plan import BN, DCH, GROUP, RB, ROWS_PER_WARP  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")

SIG_LOGITS = {"part_ptr": "*fp32", "std_ptr": "*fp32", "z_ptr": "*fp32", "seed": "i64", "key_lo": "i32",
              "key_hi": "i64", "chunk": "i32", "n_rows": "i32", "bias": "fp32", "n_fixed": "i32",
              "SIGMOID": "constexpr", "FIXED": "constexpr", "RB": "constexpr", "GROUP": "constexpr"}
SIG_VECTORS = {"part_ptr": "*fp32", "qhi_ptr": "*fp32", "qlo_ptr": "*fp32", "k_ptr": "*fp32", "v_ptr": "*fp32",
               "seed_k": "i64", "seed_v": "i64", "key_lo": "i32", "key_hi": "i64", "chunk": "i32", "n_rows": "i32",
               "n_dch": "i32", "dv": "i32", "bias": "fp32", "n_fixed": "i32", "SIGMOID": "constexpr",
               "FIXED": "constexpr", "BR": "constexpr", "BN": "constexpr", "DCH": "constexpr", "DVP": "constexpr",
               "DOT_PREC": "constexpr", "FAST": "constexpr"}
# what a launch tells the compiler about its arguments: torch's allocations are 16-byte aligned and
# these sizes are multiples of 16 in the app's launches (Triton specialises on both; without them the
# loads are scalar and the register counts twice the real ones)
ALIGNED = ("chunk", "n_rows", "dv")


def _attrs(sig: dict) -> dict:
    names = list(sig)
    return {(names.index(a),): [["tt.divisibility", 16]] for a in names
            if sig[a].startswith("*") or a in ALIGNED}


def compile_one(fn, sig: dict, const: dict, warps: int = 4, stages: int = 3):
    """Compile one variant for sm_90: (the compiled kernel, a line with its registers and stack)."""
    t0 = time.perf_counter()
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=_attrs(sig)), target=TARGET,
                       options={"num_warps": warps, "num_stages": stages, "enable_fp_fusion": True})
    usage = ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        r = subprocess.run([os.path.join(BIN, "cuobjdump"), "--dump-resource-usage", f.name],
                           capture_output=True, text=True, check=False)
        usage = " ".join(w for w in r.stdout.split() if w.startswith(("REG:", "STACK:")))
    return k, f"{fn.__name__} {const} warps={warps}: {usage} ({time.perf_counter() - t0:.1f} s)"


def variants(quick: bool) -> list[tuple]:
    out = [(fk._logits_kernel, SIG_LOGITS, {"SIGMOID": False, "FIXED": False, "RB": RB, "GROUP": GROUP}, 4)]
    vec = {"SIGMOID": False, "FIXED": False, "BR": 64, "BN": BN, "DCH": DCH, "DVP": 16, "DOT_PREC": "tf32",
           "FAST": True}
    out.append((fk._vectors_kernel, SIG_VECTORS, vec, 64 // ROWS_PER_WARP))
    out.append((fk._logits_floor_kernel, {"out_ptr": "*fp32", "std_ptr": "*fp32", "seed": "i64", "n_keys": "i64",
                                         "chunk": "i32", "n_rows": "i32", "RB": "constexpr", "GROUP": "constexpr",
                                         "FAST": "constexpr"},
                {"RB": RB, "GROUP": GROUP, "FAST": False}, 4))
    if quick:
        return out
    floor_sig = dict(out[2][1])
    out.append((fk._logits_floor_kernel, floor_sig, {"RB": RB, "GROUP": GROUP, "FAST": True}, 4))
    out.append((fk._logits_kernel, SIG_LOGITS, {"SIGMOID": True, "FIXED": False, "RB": RB, "GROUP": GROUP}, 4))
    out.append((fk._logits_kernel, SIG_LOGITS, {"SIGMOID": False, "FIXED": True, "RB": RB, "GROUP": GROUP}, 4))
    for br in (64, 128):
        for dvp in (16, 64, 256):
            for sg in (False, True):
                bn = BN if dvp < 128 else 16  # as attncore.sweeps.fused_plan.launch_plan picks
                out.append((fk._vectors_kernel, SIG_VECTORS, {**vec, "BR": br, "BN": bn, "DVP": dvp, "SIGMOID": sg},
                            br // ROWS_PER_WARP))
    out.append((fk._vectors_kernel, SIG_VECTORS, {**vec, "DCH": 16}, 4))
    out.append((fk._vectors_kernel, SIG_VECTORS, {**vec, "FIXED": True}, 4))
    out.append((fk._draw_logits_kernel, {"z_ptr": "*fp32", "seed": "i64", "n_keys": "i32", "n_rows": "i32",
                                        "RB": "constexpr", "GROUP": "constexpr"}, {"RB": RB, "GROUP": GROUP}, 4))
    out.append((fk._draw_vectors_kernel, {"k_ptr": "*fp32", "v_ptr": "*fp32", "seed_k": "i64", "seed_v": "i64",
                                         "n_keys": "i32", "n_dch": "i32", "BN": "constexpr", "DCH": "constexpr",
                                         "DVP": "constexpr", "FAST": "constexpr"},
                {"BN": BN, "DCH": DCH, "DVP": 16, "FAST": True}, 4))
    for fast in (False, True):
        out.append((fk._normals_kernel, {"out_ptr": "*fp32", "seed": "i64", "n": "i32", "BLOCK": "constexpr",
                                         "FAST": "constexpr"}, {"BLOCK": 1024, "FAST": fast}, 4))
    return out


def main() -> int:
    if triton.knobs.runtime.interpret:
        print("TRITON_INTERPRET is set: nothing to compile.")
        return 2
    for fn, sig, const, warps in variants("--quick" in sys.argv):
        try:
            stages = 1 if fn is fk._vectors_kernel else 3  # as the launches ask
            print(compile_one(fn, sig, const, warps, stages)[1], flush=True)
        except Exception as exc:  # report the variant, then fail
            print(f"FAILED {fn.__name__} {const} warps={warps}: {type(exc).__name__}: {exc}"[:2000], flush=True)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
