"""Local model folders: which directories may be loaded from, and the safety checks on a folder.

Any local Hugging Face model folder (a ``config.json`` plus weights) that returns attentions, inside
one of the directories listed in the ``ATTNLAB_MODEL_DIRS`` environment variable (separated by
``os.pathsep``). Paths are resolved (symlinks and ``..`` included) before the check, and so is every
file inside the folder (a file that links outside is refused), so nothing outside those directories
is ever opened. Model code from the folder is never executed (``trust_remote_code=False``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from attncore.budget import check_limit
from attncore.errors import AttnInputError

__all__ = ["MAX_MODEL_BYTES", "MODEL_DIRS_ENV", "allowed_model_dirs", "discover_models",
           "resolve_model_folder"]

MODEL_DIRS_ENV = "ATTNLAB_MODEL_DIRS"
MAX_MODEL_BYTES = 2 * 1024**3  # weight files of a local model (about 500M float32 parameters)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack")


def allowed_model_dirs() -> list[Path]:
    """Resolved directories from ``ATTNLAB_MODEL_DIRS`` that exist (empty when unset)."""
    raw = os.environ.get(MODEL_DIRS_ENV, "")
    dirs: list[Path] = []
    for part in raw.split(os.pathsep):
        part = part.strip()
        if part:
            p = Path(part).expanduser().resolve()
            if p.is_dir() and p not in dirs:
                dirs.append(p)
    return dirs


def resolve_model_folder(path: str) -> Path:
    """The model folder ``path`` refers to, after every safety check.

    Raises :class:`AttnInputError` with a plain message when no directories are
    allowed, when the resolved path lies outside them, when it does not exist,
    is not a folder, has no ``config.json`` or has weights over :data:`MAX_MODEL_BYTES`.
    A relative path is taken inside the first allowed directory.
    """
    text = (path or "").strip()
    if not text:
        raise AttnInputError("type the path of a model folder.")
    if "\x00" in text or len(text) > 4096:
        raise AttnInputError("that is not a usable folder path.")
    roots = allowed_model_dirs()
    if not roots:
        raise AttnInputError(
            f"local models are switched off: set {MODEL_DIRS_ENV} to the directories that may be "
            "loaded from (separated by ':'), then restart the app."
        )
    raw = Path(text).expanduser()
    folder = (raw if raw.is_absolute() else roots[0] / raw).resolve()
    if not any(folder == r or folder.is_relative_to(r) for r in roots):
        raise AttnInputError(
            f"{text} is outside the allowed model directories ({', '.join(map(str, roots))}); "
            f"only folders inside {MODEL_DIRS_ENV} may be loaded."
        )
    if not folder.exists():
        raise AttnInputError(f"there is no folder {folder}.")
    if not folder.is_dir():
        raise AttnInputError(f"{folder} is a file; give the folder that holds config.json.")
    if not (folder / "config.json").is_file():
        raise AttnInputError(
            f"{folder} has no config.json, so it is not a Hugging Face model folder."
        )
    size = 0
    for f in _folder_files(folder):
        # every file the loader may read is resolved too: a file (or sub-folder) that is a symlink
        # to somewhere outside the allowed directories is refused, not followed
        real = f.resolve()
        if not any(real == r or real.is_relative_to(r) for r in roots):
            raise AttnInputError(
                f"{f.relative_to(folder)} in {folder.name} links to a place outside the allowed model "
                f"directories; only files inside {MODEL_DIRS_ENV} may be loaded."
            )
        if real.is_file() and f.suffix in _WEIGHT_SUFFIXES:
            size += real.stat().st_size
    check_limit(size, MAX_MODEL_BYTES, f"the weights in {folder.name}", "bytes, to stay inside memory",
                "Pick a smaller model.")
    return folder


def _folder_files(folder: Path, limit: int = 10_000) -> list[Path]:
    """Every entry under ``folder`` (without following symlinked sub-folders), at most ``limit``."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        base = Path(dirpath)
        # a symlinked sub-folder is listed (and checked) as an entry but not walked into
        out += [base / n for n in filenames] + [base / d for d in dirnames if (base / d).is_symlink()]
        if len(out) > limit:
            raise AttnInputError(f"{folder.name} holds more than {limit:,} files: not a model folder.")
    return out


def discover_models(limit: int = 50) -> list[Path]:
    """Model folders (holding ``config.json``) up to two levels inside the allowed directories."""
    found: list[Path] = []
    for root in allowed_model_dirs():
        candidates = [root]
        try:
            level1 = sorted(p for p in root.iterdir() if p.is_dir())[:200]
        except OSError:
            continue
        candidates += level1
        for d in level1:
            with contextlib.suppress(OSError):  # an unreadable folder is simply skipped
                candidates += sorted(p for p in d.iterdir() if p.is_dir())[:50]
        found += [c for c in candidates if (c / "config.json").is_file()]
        if len(found) >= limit:
            break
    return found[:limit]
