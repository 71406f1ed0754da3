"""A shipped StreamingLLM run: SmolLM2 on the shipped text at 2,048 tokens with more windows than the page's
live panel, its per-position losses written to one small file and read back as a :class:`StreamResult`.

Shape legend as in :mod:`attncore.decoder.streaming`: ``L`` tokens, ``P`` settings.

Run it (about 10 s a pass on a laptop CPU, 16 passes)::

    python -m attncore.decoder.stream_run --out attncore/decoder/results/stream_2048.npz

The file is a numpy ``.npz`` (no pickles): ``nll`` (P, L - 1) float32 losses in nats, ``window`` (P,)
int (-1 = dense), ``sinks`` (P,) int, ``seconds`` (P,) float64, and ``header``, a JSON string (the
command, the machine, torch, its threads, the git commit the run started from, the date, the load average
before and after, the model, the text, L). Every loss is
what :func:`attncore.decoder.streaming.stream_losses` computes for that setting; since the model is causal,
the loss at query i depends only on tokens 0..i + 1, so any prefix of a stored row can be recomputed live
at a shorter length (the tests do).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attncore.decoder.probe import MAX_DECODER_TOKENS
from attncore.decoder.streaming import StreamResult, StreamSetting, default_settings, stream_losses
from attncore.decoder.text import SHIPPED_TEXT_NAME, shipped_text, text_tokens
from attncore.device import cpu_model
from attncore.errors import AttnInputError
from attncore.models.bundled import SMOLLM2
from attncore.provenance import git_commit, portable_command

__all__ = [
    "RESULTS_DIR",
    "SHIPPED_STREAM_FILE",
    "STREAM_RUN_LENGTH",
    "STREAM_RUN_SINKS",
    "STREAM_RUN_WINDOWS",
    "StreamRun",
    "load_stream_run",
    "machine_label",
    "main",
    "run_settings",
    "save_stream_run",
    "shipped_stream_ids",
    "stream_run",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SHIPPED_STREAM_FILE = RESULTS_DIR / "stream_2048.npz"
STREAM_RUN_LENGTH = MAX_DECODER_TOKENS
STREAM_RUN_WINDOWS: tuple[int, ...] = (64, 128, 256, 512, 1024)
STREAM_RUN_SINKS: tuple[int, ...] = (1, 4)


def run_settings(windows: Sequence[int] = STREAM_RUN_WINDOWS, sinks: Sequence[int] = STREAM_RUN_SINKS
                 ) -> tuple[StreamSetting, ...]:
    """Dense, then each window alone and with the first k tokens kept: 16 settings by default."""
    return default_settings(STREAM_RUN_LENGTH, windows, sinks)


@dataclass(frozen=True)
class StreamRun:
    """A stored run: its losses as the live panel's :class:`StreamResult` and the header it was written with.

    Attributes:
        result: settings (P,), nll (P, L - 1) float32, length L, seconds (P,).
        header: the command, machine, cpu, cores, torch, threads, commit, date, model, text, length.
    """

    result: StreamResult
    header: dict[str, Any]

    @property
    def seconds_per_pass(self) -> float:
        """Mean seconds of one pass over the L tokens."""
        s = self.result.seconds
        return sum(s) / len(s) if s else float("nan")


def machine_label() -> dict[str, Any]:
    """The CPU model (from /proc/cpuinfo, else :func:`platform.processor`), its logical cores, the OS."""
    return {"cpu": cpu_model(), "cores": os.cpu_count() or 0, "platform": platform.platform()}


def _load() -> float:
    """The machine's 1-minute load average (NaN where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def shipped_stream_ids(tokenizer: Any, L: int = STREAM_RUN_LENGTH) -> torch.Tensor:
    """(1, L) ids of the shipped text's first L tokens, as the page's panel reads them."""
    tt = text_tokens(tokenizer, shipped_text(), L, min_tokens=2)
    if tt.length < L:
        raise AttnInputError(f"the shipped text gives {tt.length:,} tokens, fewer than {L:,}.")
    return tt.ids


def stream_run(model: Any, ids: torch.Tensor, settings: Sequence[StreamSetting],
               progress: Callable[[int, int, StreamSetting, float], None] | None = None) -> StreamResult:
    """Per-position losses (P, L - 1) of ``ids`` (1, L) under each setting, one pass each (any number of
    settings; :func:`stream_losses` takes at most 12 at a time)."""
    rows: list[torch.Tensor] = []
    secs: list[float] = []
    for i, s in enumerate(settings):
        r = stream_losses(model, ids, (s,))
        rows.append(r.nll[0].float())
        secs.append(r.seconds[0])
        if progress is not None:
            progress(i + 1, len(settings), s, r.seconds[0])
    return StreamResult(tuple(settings), torch.stack(rows), int(ids.shape[1]), tuple(secs))


def save_stream_run(path: Path, result: StreamResult, header: dict[str, Any]) -> None:
    """Write ``result`` and ``header`` (JSON-serialisable) to ``path`` (.npz, compressed, no pickles)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    window = np.array([-1 if s.window is None else s.window for s in result.settings], dtype=np.int64)
    sinks = np.array([s.sinks for s in result.settings], dtype=np.int64)
    with path.open("wb") as f:
        np.savez_compressed(f, nll=result.nll.numpy().astype(np.float32), window=window, sinks=sinks,
                            seconds=np.asarray(result.seconds, dtype=np.float64),
                            header=np.array(json.dumps(header, sort_keys=True)))


def load_stream_run(path: Path | str = SHIPPED_STREAM_FILE) -> StreamRun:
    """Read a run written by :func:`save_stream_run`: losses (P, L - 1) as a :class:`StreamResult`.

    Raises :class:`AttnInputError` when the file is missing or its arrays disagree in shape.
    """
    path = Path(path)
    if not path.is_file():
        raise AttnInputError(f"no stored StreamingLLM run at {path.name}.")
    with np.load(path, allow_pickle=False) as z:
        nll = np.asarray(z["nll"], dtype=np.float32)  # (P, L - 1)
        window, sinks, seconds = z["window"], z["sinks"], z["seconds"]
        header = json.loads(str(z["header"]))
    P = nll.shape[0]
    if nll.ndim != 2 or not (len(window) == len(sinks) == len(seconds) == P):
        raise AttnInputError(f"{path.name}: {P} loss rows but {len(window)} settings.")
    settings = tuple(StreamSetting(None if int(w) < 0 else int(w), int(k)) for w, k in zip(window, sinks,
                                                                                           strict=True))
    result = StreamResult(settings, torch.from_numpy(nll), nll.shape[1] + 1,
                          tuple(float(s) for s in seconds))
    return StreamRun(result, header)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the 16 settings on SmolLM2 at 2,048 tokens and write the file (``--out``)."""
    parser = argparse.ArgumentParser(prog="python -m attncore.decoder.stream_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED_STREAM_FILE, help="the .npz file to write")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from attncore.models import load_model

    t0 = time.perf_counter()
    lm = load_model("smollm2")
    ids = shipped_stream_ids(lm.tokenizer)
    settings = run_settings()
    print(f"model loaded in {time.perf_counter() - t0:.1f} s; {len(settings)} settings at "
          f"{STREAM_RUN_LENGTH} tokens", flush=True)

    def progress(done: int, total: int, s: StreamSetting, secs: float) -> None:
        print(f"{done}/{total} {s.label}: {secs:.1f} s", flush=True)

    started, commit = _dt.datetime.now(_dt.UTC), git_commit()  # the code that runs, not the tree at the end
    load_before = _load()
    result = stream_run(lm.model, ids, settings, progress)
    header = {"command": portable_command("python -m attncore.decoder.stream_run",
                                          sys.argv[1:] if argv is None else list(argv)),
              **machine_label(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "commit": commit, "date": started.strftime("%Y-%m-%d %H:%M UTC"),
              "load_average": [load_before, _load()],
              "model": SMOLLM2.description, "text": SHIPPED_TEXT_NAME, "length": STREAM_RUN_LENGTH,
              "device": "cpu"}
    save_stream_run(args.out, result, header)
    dense = StreamSetting(None)
    for s in result.settings:
        start = s.window or 0
        print(f"{s.label:>22}: ppl {result.ppl(s):8.3f}  past the window {result.ppl(s, start):8.3f} "
              f"(x{result.ppl(s, start) / result.ppl(dense, start):.3f} dense)  "
              f"{result.seconds[result.index(s)]:.1f} s")
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
