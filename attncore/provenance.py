"""What a shipped result file says about how it was made, with nothing of the machine that made it.

A result's header records the command that wrote it and the input file it read. Both are shown to
users (the Training lab quotes the command), so neither may name a folder of the build machine:
:func:`portable_command` writes the command as a user can run it from a checkout (an absolute path
becomes its path inside the repository, or its last name), and :func:`file_record` names an input
file by its name and its SHA-256, which says which file it was wherever it lies.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["REPO", "file_record", "git_commit", "portable_command", "portable_path"]

REPO = Path(__file__).resolve().parents[1]


def portable_path(value: str, root: Path = REPO) -> str:
    """``value`` as a command line may show it: a relative path unchanged; an absolute one relative to
    ``root`` (the repository) when it lies inside, else its last name (``/data/x/corpus.txt`` ->
    ``corpus.txt``)."""
    if not os.path.isabs(value):
        return value
    path = Path(value)
    for base in (root, root.resolve()):
        for p in (path, path.resolve()):
            if p == base:
                return "."
            if p.is_relative_to(base):
                return str(p.relative_to(base))
    return path.name or "."


def portable_command(program: str, argv: Sequence[str], root: Path = REPO) -> str:
    """``program`` and its arguments as a user can type them from a checkout: every absolute path
    (an argument, or the value of ``--option=value``) through :func:`portable_path`, shell-quoted."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg.partition("=")
            out.append(f"{name}={portable_path(value, root)}")
        else:
            out.append(portable_path(arg, root))
    return " ".join([program, *(shlex.quote(a) for a in out)]) if out else program


def file_record(path: Path, text: str | None = None) -> dict[str, Any]:
    """An input file by name and content: ``name``, ``sha256`` (of its bytes) and, when its ``text`` is
    given, ``chars`` and ``vocab`` (distinct characters)."""
    rec: dict[str, Any] = {"name": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    if text is not None:
        rec |= {"chars": len(text), "vocab": len(set(text))}
    return rec


def git_commit(root: Path = REPO) -> str:
    """The commit of the checkout at ``root``, with " (with uncommitted changes)" when tracked files differ
    from it; "unknown" outside a git checkout (an installed package)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")
