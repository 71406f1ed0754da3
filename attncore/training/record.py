"""Bookkeeping of the training experiments: the result file a run writes as it goes, the machine and
commit it records, the plain-text tables the command prints, and keeping earlier runs (``--resume``).

:mod:`attncore.training.experiments` and :mod:`attncore.training.null_attention` both write through
:class:`Recorder`; this module imports neither of them.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attncore.device import cpu_model  # re-exported: the results' headers share one reader
from attncore.errors import AttnInputError
from attncore.provenance import file_record
from attncore.training.config import TrainConfig
from attncore.training.train import TrainResult, best_val, train

__all__ = [
    "shard_and_corpus",
    "REPO",
    "Recorder",
    "ReuseError",
    "best_of",
    "config_key",
    "cpu_model",
    "curves_differ",
    "default_corpus",
    "format_table",
    "git_commit",
    "log",
    "machine_info",
    "sig",
    "run_record",
    "train_logged",
]

REPO = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    """The checkout's commit, ``+dirty`` when attncore has uncommitted changes (``unknown`` outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        # the code that trains, not the result files that a running experiment rewrites
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "attncore",
                                ":!attncore/training/results"],
                               cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "") if head else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info(device: torch.device) -> dict[str, Any]:
    """CPU model, core count, torch version and threads, and the device's name."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_count": __import__("os").cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "python": platform.python_version(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def default_corpus() -> Path:
    """``../shared/data/tinyshakespeare.txt`` next to the repository (or next to the main
    checkout when this is a git worktree)."""
    rel = Path("shared") / "data" / "tinyshakespeare.txt"
    candidates = [REPO.parent / rel]
    try:
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=REPO,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if common:
            candidates.append(Path(common).parent.parent / rel)
    except (OSError, subprocess.SubprocessError):
        pass
    for c in candidates:
        if c.is_file():
            return c
    return candidates[0]


def shard_and_corpus(shard: str, corpus: Path | None) -> tuple[int, int, str] | None:
    """What a sharded training command (the sink grid, the league) reads from ``--shard I/N`` and ``--corpus``
    (default :func:`default_corpus`): (I, N, the corpus text), or None after a plain message on stderr (a
    malformed shard; an unreadable file, named by its file name only)."""
    try:
        i, n = (int(x) for x in shard.split("/"))
        if not 0 <= i < n:
            raise ValueError
    except ValueError:
        print(f"--shard takes I/N with 0 <= I < N; got {shard!r}", file=sys.stderr)
        return None
    path = corpus or default_corpus()
    try:
        return i, n, path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"cannot read the corpus {path.name}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return None


def sig(x: float | None, digits: int = 5) -> float | None:
    """``x`` rounded to ``digits`` significant digits for the result files (None for None, inf or NaN)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def run_record(name: str, result: TrainResult, **extra: Any) -> dict[str, Any]:
    """The JSON record of one run: its config and curves (rounded), and ``extra`` facts."""
    return {
        "name": name,
        "variant": result.config.variant,
        "config": result.config.to_dict(),
        "steps": result.steps,
        "train_loss": [sig(v) for v in result.train_loss],
        "val_loss": [sig(v) for v in result.val_loss],
        "saturated_share": [sig(v, 4) for v in result.saturated_share],
        "saturated_share_by_layer": [[sig(v, 4) for v in row] for row in result.saturated_share_by_layer],
        "qk_grad_norm": [sig(v, 4) for v in result.qk_grad_norm],
        "diverged_at": result.diverged_at,
        "final_train_loss": sig(result.final_train_loss),
        "final_val_loss": sig(result.final_val_loss),
        "best_val_loss": sig(result.best_val_loss),
        "best_val_step": result.best_val_step,
        "tokens_per_s": sig(result.tokens_per_s, 4),
        "wall_s": sig(result.wall_s, 4),
        **extra,
    }


def format_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A plain text table (numbers to 4 significant digits, None as '-')."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    cells = [[cell(v) for v in r] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


class ReuseError(AttnInputError):
    """A run kept from an earlier result file does not reproduce bit for bit on this machine."""


def config_key(config: TrainConfig | dict[str, Any]) -> str:
    """A canonical string of a training config (fields added later, e.g. dropout, at their
    defaults), so that a run made before a field existed matches the same run made now."""
    cfg = config if isinstance(config, TrainConfig) else TrainConfig.from_dict(config)
    return json.dumps(cfg.to_dict(), sort_keys=True)


# Run fields compared when a kept run is checked against a retraining of the same config.
CURVE_KEYS = ("steps", "train_loss", "val_loss", "saturated_share", "saturated_share_by_layer",
              "qk_grad_norm", "diverged_at", "final_train_loss", "final_val_loss")


# Facts measured on the trained model, compared too where both records have them.
MEASURE_KEYS = ("sink_alpha", "sink_share", "streaming")


def curves_differ(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The :data:`CURVE_KEYS` (and :data:`MEASURE_KEYS` both records hold) whose values differ
    between two run records (empty: identical)."""
    keys = [*CURVE_KEYS, *(k for k in MEASURE_KEYS if k in a and k in b)]
    return [k for k in keys if a.get(k) != b.get(k)]


class Recorder:
    """Collects one experiment's runs and writes its JSON after every run (``complete`` false
    until the end), so a long run shows progress and loses nothing when stopped.

    :meth:`run` trains one config, or, when ``reuse`` (the runs of an earlier result file)
    holds a run of the identical config, keeps that run instead. Before it keeps any, it
    retrains the first such run and compares every curve: a difference raises
    :class:`ReuseError` (the earlier runs cannot stand beside new ones), equality is written
    into the file (``reuse_check``) with the list of kept runs and their commit (``reused``).
    """

    def __init__(self, name: str, out: Path, *, scale: str, device: torch.device, corpus: Path,
                 text: str, sizes: dict[str, Any], command: str, seeds: list[int] | None = None,
                 reuse: dict[str, Any] | None = None, budget: int | None = None) -> None:
        self.path = out / f"{name}.json"
        self.t0 = time.perf_counter()
        self.seeds = list(seeds or [0])
        self.text = text
        self.device = device
        self.budget = budget
        self.trained = 0
        self._reuse: dict[str, dict[str, Any]] = {}
        self._reuse_commit = ""
        if reuse:
            self._reuse_commit = str(reuse.get("git_commit", "unknown"))
            for r in reuse.get("runs") or []:
                if r.get("reused_from"):  # a kept run keeps the commit that made it
                    self._reuse.setdefault(config_key(r["config"]), r)
                else:
                    self._reuse.setdefault(config_key(r["config"]), {**r, "reused_from": self._reuse_commit})
        self._checked = not self._reuse
        self.doc: dict[str, Any] = {
            "experiment": name,
            "complete": False,
            "command": command,
            "scale": scale,
            "sizes": sizes,
            "seeds": self.seeds,
            "machine": machine_info(device),
            "git_commit": git_commit(),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "corpus": file_record(corpus, text),  # by name and SHA-256: no folder of this machine
            "runs": [],
        }
        if reuse:
            self.doc["reused"] = []
        out.mkdir(parents=True, exist_ok=True)

    def run(self, cfg: TrainConfig, name: str, measure: Callable[[TrainResult], dict[str, Any]] | None = None,
            **extra: Any) -> tuple[dict[str, Any], TrainResult | None]:
        """Train ``cfg`` (or keep an identical earlier run); record and return it with its result
        (None for a kept run: it has no model). ``measure(result)`` adds facts measured on the
        trained model (a kept run already holds them)."""
        old = self._reuse.get(config_key(cfg))
        if old is not None and self._checked:
            record = {**old, "name": name, **extra, "seed": cfg.seed, **best_of(old)}
            self.doc["reused"].append({"name": name, "seed": cfg.seed, "from_commit": old["reused_from"]})
            self.add(record)
            return record, None
        r = train_logged(cfg, self.text, self.device, name, self.budget)
        self.trained += 1
        record = run_record(name, r, seed=cfg.seed, **extra, **(measure(r) if measure is not None
                                                                   and r.diverged_at is None else {}))
        if old is not None:  # the first kept run: retrained to check that the old runs reproduce
            differ = curves_differ(old, record)
            check = {"name": name, "seed": cfg.seed, "from_commit": old["reused_from"],
                     "identical": not differ, "differing": differ}
            if differ:
                raise ReuseError(
                    f"the earlier run '{name}' (commit {old['reused_from'][:10]}) does not reproduce bit "
                    f"for bit here ({', '.join(differ)} differ), so earlier runs cannot be kept; run "
                    "without --resume."
                )
            self.doc["reuse_check"] = check
            self._checked = True
            log(f"  reuse check: '{name}' retrained, identical to commit {old['reused_from'][:10]}'s run")
        self.add(record)
        return record, r

    def add(self, record: dict[str, Any]) -> None:
        """Append a run and rewrite the file."""
        self.doc["runs"].append(record)
        self.write()

    def finish(self, **fields: Any) -> dict[str, Any]:
        """Add the tables and findings, mark complete, write."""
        self.doc.update(fields)
        self.doc["complete"] = True
        if self.trained or self._reuse:  # runs made through run() (null_attention adds its own)
            self.doc["runs_trained"] = self.trained
        self.write()
        return self.doc

    def write(self) -> None:
        """Rewrite the JSON file (atomically: a temporary file, then a rename)."""
        self.doc["wall_s"] = round(time.perf_counter() - self.t0, 1)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.doc, indent=1), encoding="utf-8")
        tmp.replace(self.path)


def best_of(record: dict[str, Any]) -> dict[str, Any]:
    """``best_val_loss`` and ``best_val_step`` of a run record, from its validation curve."""
    v, s = best_val(record.get("steps") or [], record.get("val_loss") or [])
    return {"best_val_loss": v, "best_val_step": s}


def log(msg: str) -> None:
    """A progress line on standard error (the tables go to standard output)."""
    print(msg, file=sys.stderr, flush=True)


def train_logged(cfg: TrainConfig, text: str, device: torch.device, label: str,
                 budget: int | None = None) -> TrainResult:
    """:func:`~attncore.training.train.train` with a line on standard error: losses, time, tokens/s."""
    t0 = time.perf_counter()
    r = train(cfg, text, device=device, max_bytes=budget)
    state = (f"diverged at {r.diverged_at}" if r.diverged_at
             else f"train {r.final_train_loss:.4f} val {r.final_val_loss:.4f} (best {r.best_val_loss:.4f} "
                  f"at {r.best_val_step})")
    took = time.perf_counter() - t0
    log(f"  {label} seed {cfg.seed}: {state}  ({took:.0f} s, {r.tokens_per_s:.0f} tok/s)")
    return r
