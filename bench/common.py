"""Timing helpers shared by the benchmarks (median of repeats, after a warm-up)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def median_time(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds (CUDA work is synchronised)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(label: str, ours: float, base: float, base_name: str) -> str:
    """One line: ours, the baseline and ours/baseline."""
    return (f"{label:<44} ours {ours * 1e3:9.2f} ms   {base_name} {base * 1e3:9.2f} ms   "
            f"ratio ours/{base_name} {ours / base:6.2f}")


def json_on_tree(ref: str, bench_file: str, args: list[str]) -> Any:
    """Run the bench module ``bench_file`` (this tree's copy: the same measuring code) on the committed tree
    of ``ref`` (``git archive`` into a temporary folder, this virtual environment) with ``--json`` and
    ``args``; return the JSON its last line prints. A failed run stops the bench with its error."""
    root = Path(__file__).resolve().parents[1]
    name = Path(bench_file).stem
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        archive = Path(tmp) / "tree.tar"
        subprocess.run(["git", "-C", str(root), "archive", "--format=tar", "-o", str(archive), ref],
                       check=True)
        tree = Path(tmp) / "tree"
        tree.mkdir()
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        (tree / "bench").mkdir(exist_ok=True)
        (tree / "bench" / f"{name}.py").write_text(Path(bench_file).read_text())
        (tree / "bench" / "common.py").write_text(Path(__file__).read_text())  # what the module imports
        (tree / "bench" / "__init__.py").touch()
        if (root / ".streamlit").is_dir() and not (tree / ".streamlit").exists():
            (tree / ".streamlit").symlink_to(root / ".streamlit")
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run([sys.executable, "-m", f"bench.{name}", "--json", *args], cwd=tree, env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"measuring {ref} failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
