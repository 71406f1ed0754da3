"""`pip install .` ships all of attncore: every package and every data file it reads.

The Dockerfile copies the source tree, so only a wheel (`pip install .`, `pip wheel .`) depends
on pyproject.toml's package lists; a package or a result file missing from them imports fine
from a checkout and fails in an installed copy. These checks read pyproject.toml the way
setuptools does (package discovery with its include patterns, package-data globs relative to
each package) and compare with the files on disk, without building a wheel.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages() -> set[str]:
    """The packages a build would include, as setuptools resolves the configuration."""
    if "packages" in CONFIG and isinstance(CONFIG["packages"], list):
        return set(CONFIG["packages"])
    include = CONFIG["packages"]["find"].get("include", ["*"])
    return set(find_packages(where=str(ROOT), include=include))


def _on_disk_packages() -> set[str]:
    return {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "attncore").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }


def test_every_attncore_package_is_built() -> None:
    missing = _on_disk_packages() - _packages()
    assert not missing, f"packages a wheel would leave out: {sorted(missing)}"


def test_every_data_file_is_package_data() -> None:
    """Each non-Python file under attncore matches a package-data glob of the package it sits in."""
    data = CONFIG.get("package-data", {})
    packages = _packages()
    unshipped = []
    for f in (ROOT / "attncore").rglob("*"):
        if not f.is_file() or f.suffix in {".py", ".pyc"} or "__pycache__" in f.parts:
            continue
        rel = f.relative_to(ROOT)
        shipped = False
        # setuptools matches a glob against the path relative to the package that declares it
        for k in range(len(rel.parts) - 1, 0, -1):
            pkg = ".".join(rel.parts[:k])
            if pkg in packages:
                inside = "/".join(rel.parts[k:])
                shipped = any(fnmatch.fnmatch(inside, g) and inside.count("/") == g.count("/")
                              for g in data.get(pkg, []))
                break
        if not shipped:
            unshipped.append(str(rel))
    assert not unshipped, f"data files a wheel would leave out: {unshipped}"


def test_checks_can_fail() -> None:
    """The old configuration (two packages, two globs) fails both checks."""
    old_packages = {"attncore", "attncore.training"}
    assert _on_disk_packages() - old_packages
    old_globs = ["results/*.json", "results/causal_model/*"]
    model = next((ROOT / "attncore/training/results/null_attention_models").rglob("model.json"))
    inside = str(model.relative_to(ROOT / "attncore/training"))
    assert not any(fnmatch.fnmatch(inside, g) and inside.count("/") == g.count("/") for g in old_globs)
