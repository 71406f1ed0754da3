"""Training corpora for the Training lab: the standard library's source, an upload, or a mounted folder.

* **built-in**: the source text of a fixed list of Python standard-library modules, read from
  ``sysconfig.get_paths()["stdlib"]``; always installed, nothing downloaded, no file of ours.
* **upload**: a ``.txt`` of at most :data:`MAX_CORPUS_BYTES`, UTF-8, no NUL bytes. The uploader's
  types (:data:`UPLOADER_TYPES`) include the MIME type, so Streamlit leaves the name to
  :func:`decode_text`, which refuses another type with a plain message (Streamlit's own check
  runs before the page and ends it in its generic error box).
* **folder**: ``.txt`` files directly inside the directories listed in ``ATTNLAB_CORPUS_DIRS``
  (separated by ``os.pathsep``); a name that leaves its directory (``..``, a symlink pointing
  elsewhere) is refused.

Every problem is an :class:`~attncore.errors.AttnInputError` with a plain message.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from attncore.errors import AttnInputError

__all__ = [
    "CORPUS_DIRS_ENV",
    "MAX_CORPUS_BYTES",
    "STDLIB_MODULES",
    "UPLOADER_TYPES",
    "UPLOAD_SUFFIX",
    "Corpus",
    "corpus_dirs",
    "decode_text",
    "folder_files",
    "read_folder_file",
    "stdlib_corpus",
]

CORPUS_DIRS_ENV = "ATTNLAB_CORPUS_DIRS"
MAX_CORPUS_BYTES = 5 * 1024**2
UPLOAD_SUFFIX = ".txt"  # the one type a corpus file may have (uploaded or in a folder)
# ``type`` of the file uploader: the browser offers .txt and text/plain files; with a MIME type in the
# list Streamlit skips its server-side name check and decode_text checks it.
UPLOADER_TYPES: tuple[str, ...] = ("txt", "text/plain")
# A fixed, ordered choice of pure-Python modules (about 290 kB): the same text on every install
# of one Python version.
STDLIB_MODULES: tuple[str, ...] = ("argparse.py", "difflib.py", "textwrap.py", "string.py",
                                   "fractions.py", "heapq.py", "calendar.py")


@dataclass(frozen=True)
class Corpus:
    """A training text and where it came from (``name`` is shown on the page; ``uploaded``: a user's file,
    whose name only the session that uploaded it sees in the kept runs)."""

    name: str
    text: str
    uploaded: bool = False


def stdlib_corpus() -> Corpus:
    """The built-in corpus: :data:`STDLIB_MODULES` concatenated in that order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    used: list[str] = []
    for name in STDLIB_MODULES:
        path = root / name
        try:
            parts.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        used.append(name)
    if not parts:
        raise AttnInputError("the Python standard library's source was not found on this server; "
                             "upload a .txt file instead.")
    return Corpus(f"Python standard library source ({', '.join(used)})", "\n".join(parts))


def decode_text(name: str, data: bytes) -> Corpus:
    """An uploaded file's bytes as text: a .txt name, not empty, at most 5 MB, no NUL bytes, valid UTF-8."""
    if not name.lower().endswith(UPLOAD_SUFFIX):
        raise AttnInputError(f"{name} is not a {UPLOAD_SUFFIX} file; the uploader accepts plain-text "
                             f"{UPLOAD_SUFFIX} files (UTF-8, at most {MAX_CORPUS_BYTES // 1024**2} MB).")
    if len(data) == 0:
        raise AttnInputError(f"{name} is empty; a corpus needs text to learn from.")
    if len(data) > MAX_CORPUS_BYTES:
        raise AttnInputError(f"{name} is {len(data) / 1024**2:.1f} MB; the limit is "
                             f"{MAX_CORPUS_BYTES // 1024**2} MB.")
    if b"\x00" in data:
        raise AttnInputError(f"{name} looks binary (it contains NUL bytes), not like a text file.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AttnInputError(f"{name} is not UTF-8 text (byte {exc.start} cannot be decoded).") from exc
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise AttnInputError(f"{name} holds only white space; a corpus needs text to learn from.")
    return Corpus(name, text, uploaded=True)


def corpus_dirs() -> list[Path]:
    """The directories in ``ATTNLAB_CORPUS_DIRS`` that exist (resolved), in the order given."""
    out: list[Path] = []
    for raw in os.environ.get(CORPUS_DIRS_ENV, "").split(os.pathsep):
        if raw.strip():
            p = Path(raw.strip()).expanduser().resolve()
            if p.is_dir() and p not in out:
                out.append(p)
    return out


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except (ValueError, OSError):
        return False
    return True


def _choosable(name: str) -> bool:
    """A file name :func:`read_folder_file` accepts: a .txt name with no path separator of any system."""
    return bool(name) and "/" not in name and "\\" not in name and name not in {".", ".."} \
        and name.lower().endswith(UPLOAD_SUFFIX)


def folder_files() -> list[str]:
    """Choosable files as ``"<dir index>/<file name>"``: ``.txt`` files directly in each folder (a name
    :func:`read_folder_file` would refuse, e.g. one with a backslash, is not offered)."""
    out: list[str] = []
    for i, root in enumerate(corpus_dirs()):
        try:
            entries = sorted(root.iterdir())
        except OSError:
            continue
        for p in entries:
            if _choosable(p.name) and _inside(p, root) and p.resolve().is_file():
                out.append(f"{i}/{p.name}")
    return out


def read_folder_file(key: str) -> Corpus:
    """The text of a file named by :func:`folder_files` (checked again: inside its folder, <= 5 MB)."""
    dirs = corpus_dirs()
    index, _, name = key.partition("/")
    if not index.isdigit() or int(index) >= len(dirs) or not _choosable(name):
        raise AttnInputError(f"{key!r} is not a .txt file in the folders of {CORPUS_DIRS_ENV}.")
    root = dirs[int(index)]
    path = root / name
    if not _inside(path, root):
        raise AttnInputError(f"{name} points outside its folder; it is refused.")
    if not path.is_file():
        raise AttnInputError(f"{name} is not a file in {root.name}.")
    if path.stat().st_size > MAX_CORPUS_BYTES:
        raise AttnInputError(f"{name} is larger than {MAX_CORPUS_BYTES // 1024**2} MB.")
    corpus = decode_text(name, path.read_bytes())
    return Corpus(f"{root.name}/{name}", corpus.text)
