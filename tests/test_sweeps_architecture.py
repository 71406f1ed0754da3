"""attncore.sweeps has no import circle, and the engine choice lives in one module (issue 24, section 4).

The modules form layers: a module imports only modules of lower layers, counting imports inside
functions too (a deferred import hides a circle from Python, not from this test), and nothing
in the package imports the package itself. Each module also imports alone in a fresh
interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "attncore" / "sweeps"
NAME = "attncore.sweeps"

# The layers, bottom up. dispatch is the only module that knows both engines: it picks one.
LAYERS: dict[str, int] = {
    "spec": 0, "progress": 0, "fused_kernels": 0,
    "rng": 1, "draws": 1, "reduce": 1,
    "engine": 2, "fused_plan": 2, "reference": 2,
    "fused": 3,
    "dispatch": 4, "fused_replay": 4,
}
MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")


def sweeps_imports(module: str) -> set[str]:
    """The attncore.sweeps modules ``module`` imports anywhere in its source ("" for the package itself)."""
    tree = ast.parse((PKG / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == NAME or a.name.startswith(NAME + "."):
                    found.add(a.name[len(NAME) + 1:].split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative: from . import x / from .x import y
                base = mod.split(".")[0] if mod else ""
                found.update([base] if base else [a.name for a in node.names])
            elif mod == NAME:
                found.update(a.name if a.name in MODULES else "" for a in node.names)
            elif mod.startswith(NAME + "."):
                found.add(mod[len(NAME) + 1:].split(".")[0])
    return found


def test_every_module_has_a_layer() -> None:
    assert sorted(LAYERS) == MODULES, "place a new attncore.sweeps module in LAYERS"


@pytest.mark.parametrize("module", MODULES)
def test_modules_import_only_lower_layers(module: str) -> None:
    deps = sweeps_imports(module)
    assert "" not in deps, f"{module} imports the attncore.sweeps package itself (a circle through __init__)"
    upward = sorted(d for d in deps if LAYERS[d] >= LAYERS[module])
    assert not upward, f"attncore.sweeps.{module} (layer {LAYERS[module]}) imports {upward}"


def test_the_import_graph_has_no_cycle() -> None:
    graph = {m: sweeps_imports(m) - {""} for m in MODULES}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 1:
            raise AssertionError("import circle: " + " -> ".join([*path, m]))
        if state.get(m) == 2:
            return
        state[m] = 1
        for d in sorted(graph[m]):
            visit(d, [*path, m])
        state[m] = 2

    for m in MODULES:
        visit(m, [])


def test_the_engine_choice_lives_in_dispatch_only() -> None:
    # the two engines do not know each other
    assert "fused" not in sweeps_imports("engine") and "engine" not in sweeps_imports("fused")
    knows_both = [m for m in MODULES if {"engine", "fused"} <= sweeps_imports(m)]
    assert knows_both == ["dispatch"]
    # and the choice is defined there alone
    defined: dict[str, list[str]] = {}
    for m in MODULES:
        for node in ast.parse((PKG / f"{m}.py").read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                names = []
            for name in names:
                defined.setdefault(name, []).append(m)
    for name in ("choose_engine", "engine_choice", "ENGINE_ENV", "ENGINES", "CROSSOVERS", "max_sweep_n",
                 "check_sweep", "run_sweep_set"):
        assert defined.get(name) == ["dispatch"], (name, defined.get(name))


def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {[f'{NAME}.{m}' for m in MODULES] + [NAME]!r}:\n"
        "    for k in [k for k in sys.modules if k == 'attncore' or k.startswith('attncore.')]:\n"
        "        del sys.modules[k]\n"
        "    importlib.import_module(m)\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_the_checker_sees_a_deferred_circle(tmp_path: Path) -> None:
    """The graph test can fail: a function-level import back into a higher layer is found."""
    src = (PKG / "spec.py").read_text() + "\n\ndef _late() -> None:\n    from attncore.sweeps.fused import _plan\n"
    tree = ast.parse(src)
    found = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "attncore.sweeps.fused" in found  # what sweeps_imports would report for spec: an upward import
