"""ruff over the whole tree (config in pyproject.toml) is part of `make test`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("ruff is not installed (requirements-dev.txt)")
        pytest.skip("ruff is not installed")
    out = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
