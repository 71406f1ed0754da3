"""Every SmolLM2 plan's memory estimate bounds the peak it makes resident (issue 44, F2-F4).

One fresh subprocess (``python -m tests.plan_peaks``, whose docstring says how the peak is measured: Linux's
peak resident set, reset before each call, after the allocator's free memory is handed back) loads the model
once (glibc's mmap threshold fixed: see there) and runs every kind at 64, 394 (the map limit) and 1,024 tokens (the token limit): the forward pass with
maps, the entropy pass, generation (64 new tokens after the rest), the Heatmaps real-text pass, a StreamingLLM
pass without weights, the q/k/v capture, the next-token logits, deleting the first token, Gu et al.'s inputs
(at up to 256 tokens), the logit lens, the induction heads' ablation (one random set per size), the scaled-logit
statistics, the 1/sqrt(E) intervention (two factors) and activation patching (a pair of at most 64 tokens, the
heads' part). The estimate is what the UI admits
(``ui.cached.Planned``) and what attncore checks against its budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plan_peaks import KINDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500),  # one subprocess runs every kind: ~13 passes at 1,024
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc peak marks")]
ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (64, 394, 1024)


@pytest.fixture(scope="module")
def peaks() -> dict[tuple[str, int], dict]:
    pytest.importorskip("transformers")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-m", "tests.plan_peaks", *map(str, LENGTHS)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        if "could not" in last or "needs the" in last:  # SmolLM2 not installed here
            pytest.skip(last[:200])
        raise AssertionError(out.stderr[-3000:])
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {(r["kind"], r["L"]): r for r in rows}


@pytest.mark.parametrize("kind", KINDS)
def test_the_estimate_bounds_the_measured_peak(peaks: dict[tuple[str, int], dict], kind: str) -> None:
    for L in LENGTHS:
        r = peaks[(kind, L)]
        assert r["peak"] <= r["estimate"], (
            f"{kind} at {L} tokens ({r['label']}): peak {r['peak'] / 2**20:.0f} MiB over the estimate "
            f"{r['estimate'] / 2**20:.0f} MiB")
        assert r["kept"] <= r["estimate"]  # what a cache of the result holds is inside it too
