"""Save and load a trained character model: tensors via torch.save, everything else as JSON.

``weights.pt`` holds the state dict (tensors only) and is read back with
``torch.load(..., weights_only=True)``, so no arbitrary object is ever unpickled;
``model.json`` holds the config, the vocabulary and free-form facts (``meta``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from attncore.errors import AttnInputError
from attncore.training.config import TrainConfig
from attncore.training.model import CharTransformer

__all__ = [
    "read_runs",
    "MAX_MODEL_BYTES",
    "RESULTS_DIR",
    "RESULT_NAMES",
    "load_result",
    "load_model",
    "load_shipped_model",
    "save_model",
    "shipped_model_path",
]

FORMAT = 1
WEIGHTS = "weights.pt"
META = "model.json"
MAX_MODEL_BYTES = 512 * 1024**2
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def save_model(model: CharTransformer, directory: str | Path) -> Path:
    """Write ``weights.pt`` and ``model.json`` into ``directory`` (created); returns the directory."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    torch.save(state, out / WEIGHTS)
    info: dict[str, Any] = {
        "format": FORMAT,
        "config": model.config.to_dict(),
        "vocab": model.vocab,
        "meta": model.meta,
    }
    (out / META).write_text(json.dumps(info, indent=1, ensure_ascii=False), encoding="utf-8")
    return out


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> CharTransformer:
    """The model saved by :func:`save_model` in ``directory``, in eval mode on ``device``.

    Raises AttnInputError when a file is missing, too large, or does not match its config.
    """
    d = Path(directory)
    wpath, mpath = d / WEIGHTS, d / META
    if not wpath.is_file() or not mpath.is_file():
        raise AttnInputError(f"no saved character model in the folder {d.name} (need {WEIGHTS} and {META}).")
    if wpath.stat().st_size > MAX_MODEL_BYTES:
        raise AttnInputError(f"{wpath.name} is larger than {MAX_MODEL_BYTES // 1024**2} MB.")
    try:
        info = json.loads(mpath.read_text(encoding="utf-8"))
        if info.get("format") != FORMAT:
            raise AttnInputError(f"{mpath.name} has an unknown format {info.get('format')!r}.")
        config = TrainConfig.from_dict(info["config"])
        vocab = str(info["vocab"])
        meta = dict(info.get("meta") or {})
    except (ValueError, KeyError, TypeError) as exc:
        raise AttnInputError(f"{mpath.name} is not a valid model description: {exc}") from exc
    try:
        state = torch.load(wpath, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        raise AttnInputError(f"{wpath.name} is not a file of plain tensors: {exc}") from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise AttnInputError(f"{wpath.name} does not hold a dict of tensors.")
    with torch.device("meta"):
        model = CharTransformer(config, vocab, meta)
    model.to_empty(device="cpu")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise AttnInputError(f"{wpath.name} does not match {mpath.name}: {exc}") from exc
    return model.to(device).eval()


def shipped_model_path() -> Path:
    """Where the app's causal model lives (made by ``python -m attncore.training.experiments lr_sweep``)."""
    return RESULTS_DIR / "causal_model"


def load_shipped_model(device: str | torch.device = "cpu") -> CharTransformer:
    """The shipped causal character model (the best ``standard`` run of the learning-rate sweep)."""
    return load_model(shipped_model_path(), device)


RESULT_NAMES: tuple[str, ...] = ("lr_sweep", "scaling", "sinks", "null_attention")


def load_result(name: str, directory: str | Path | None = None) -> dict[str, Any]:
    """A shipped experiment result (``lr_sweep``, ``scaling``, ``sinks`` or ``null_attention``) as a dict.

    Reads ``directory/NAME.json`` (default: the results shipped in this package). Raises
    AttnInputError when the name is unknown or the file is missing or unreadable.
    """
    if name not in RESULT_NAMES:
        raise AttnInputError(f"unknown experiment {name!r}; choose one of {', '.join(RESULT_NAMES)}.")
    path = Path(directory or RESULTS_DIR) / f"{name}.json"
    if not path.is_file():
        raise AttnInputError(
            f"no result file for {name} ({path.name}); make it with "
            f"python -m attncore.training.experiments {name} --out DIR."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:  # its text would hold the full path
        raise AttnInputError(f"{path.name} cannot be read: {exc.strerror or type(exc).__name__}.") from exc
    except ValueError as exc:
        raise AttnInputError(f"{path.name} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or data.get("experiment") != name:
        raise AttnInputError(f"{path.name} is not a result of the {name} experiment.")
    return data


def read_runs(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, runs) of a resumable result file, one JSON object a line: the line whose ``kind`` is
    ``"header"``, and every line with a ``config`` object, in file order. A missing file gives an empty header
    and no runs; a line that is not a JSON object (a run cut off mid-write) is skipped. The sink grid, the
    league, the weight-decay sweep and the induction run read their files through it."""
    p = Path(path)
    header: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    if not p.is_file():
        return header, runs
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("kind") == "header":
            header = rec
        elif isinstance(rec.get("config"), dict):
            runs.append(rec)
    return header, runs
