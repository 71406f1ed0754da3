"""The eviction run: every policy of :mod:`attncore.decoder.eviction` at four budgets on SmolLM2, on the
shipped text and on a code text, written to a JSON-lines file one (text, policy, budget) at a time, so a
stopped run resumes where it stopped; and what it measures: how much of a window's loss the kept first
tokens explain.

Shape legend as in :mod:`attncore.decoder.eviction`: ``L`` tokens, ``T`` = L - 1 steps, ``Bk`` a budget,
``N`` layers.

Run it (the lead starts the full run; ``--tokens 256`` for a small one)::

    python -m attncore.decoder.eviction_run --out attncore/decoder/results/eviction_2048.jsonl

The file: line 1 a header (the command, the machine, torch and its threads, the git commit, the date, the
model, L, the budgets, the policies, the texts by name with the SHA-256 of the exact characters read, no
machine paths); then one row per (text, policy, budget): the per-step losses (nats, 5 decimals), the seconds,
the share of each layer's cache slots holding the first token and the first 4, and the cache occupancy of
the middle layer on a coarse (position block x step block) grid. When every row is in, the header is
rewritten with the total seconds and ``complete``. Dense is one row per text (budget null).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attncore.decoder.eviction import SINKS, EvictionSetting, evict_decode
from attncore.decoder.probe import MAX_DECODER_TOKENS
from attncore.decoder.stream_run import RESULTS_DIR, _load, machine_label
from attncore.decoder.streaming import mean_se
from attncore.decoder.text import SHIPPED_TEXT_NAME, shipped_text, text_tokens
from attncore.errors import AttnInputError
from attncore.models.loading import MAX_TEXT_CHARS
from attncore.provenance import git_commit

__all__ = [
    "CODE_MODULE",
    "EVICTION_RUN_FILE",
    "EVICTION_RUN_LENGTH",
    "GRID",
    "RUN_POLICIES",
    "EvictionRun",
    "Remainder",
    "code_text",
    "load_eviction_run",
    "main",
    "remainder",
    "run_budgets",
    "run_rows",
    "run_settings",
    "run_texts",
]

EVICTION_RUN_LENGTH = MAX_DECODER_TOKENS
EVICTION_RUN_FILE = RESULTS_DIR / "eviction_2048.jsonl"
RUN_POLICIES: tuple[str, ...] = ("window", "streaming", "h2o", "tova")
CODE_MODULE = "json.decoder"  # a standard-library module of plain code (short docstrings), ~12 KB
GRID = 32  # the occupancy map's cells per side


def run_budgets(L: int) -> tuple[int, ...]:
    """The budgets L/16, L/8, L/4, L/2 (128 .. 1,024 keys at 2,048 tokens), at least the first 4 + 1 (a short
    text may give fewer than four distinct ones)."""
    return tuple(dict.fromkeys(max(SINKS + 1, L // d) for d in (16, 8, 4, 2)))


def run_settings(L: int) -> tuple[EvictionSetting, ...]:
    """Dense, then every policy at every budget (StreamingLLM keeping the first 4): 17 settings."""
    evicting = tuple(EvictionSetting(p, b) for b in run_budgets(L) for p in RUN_POLICIES)
    return (EvictionSetting("dense"), *evicting)


def code_text() -> tuple[str, str]:
    """(name, text): the source of :data:`CODE_MODULE` from this Python's standard library (its first
    :data:`MAX_TEXT_CHARS` characters). The name carries the Python version; the header adds its SHA-256."""
    import importlib

    mod = importlib.import_module(CODE_MODULE)
    text = Path(str(mod.__file__)).read_text(encoding="utf-8")[:MAX_TEXT_CHARS]
    v = sys.version_info
    return f"Python {v.major}.{v.minor} standard library, {CODE_MODULE.replace('.', '/')}.py", text


def run_texts() -> dict[str, tuple[str, str]]:
    """key -> (name, text): ``prose`` the shipped text, ``code`` :func:`code_text`."""
    return {"prose": (SHIPPED_TEXT_NAME, shipped_text()), "code": code_text()}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _occupancy(kept: Tensor, L: int, grid: int = GRID) -> list[list[float]]:
    """(T, Bk) positions of one layer's cache -> (grid, grid) share of each (step block, position block)'s
    cells that are kept, among the causal ones (position <= step); rows: steps, columns: positions."""
    T = int(kept.shape[0])
    m = torch.zeros(T, L + 1)
    kp = kept.long()
    m.scatter_(1, torch.where(kp < 0, L, kp), 1.0)
    m = m[:, :L]  # (T, L)
    causal = torch.ones(T, L).tril()
    rs = torch.linspace(0, T, grid + 1).round().long().tolist()
    cs = torch.linspace(0, L, grid + 1).round().long().tolist()
    out = []
    for a, b in zip(rs[:-1], rs[1:], strict=True):
        row = []
        for c, d in zip(cs[:-1], cs[1:], strict=True):
            n = float(causal[a:b, c:d].sum())
            row.append(round(float(m[a:b, c:d].sum()) / n, 4) if n > 0 else -1.0)
        out.append(row)
    return out


def _row(key: str, s: EvictionSetting, d: Any, L: int) -> dict[str, Any]:
    kept = d.kept.long()  # (N, T, Bk)
    full = (kept >= 0).all(dim=-1)  # (N, T)
    shares: dict[str, list[float]] = {}
    for k in (1, SINKS):
        per = []
        for i in range(kept.shape[0]):
            rows = kept[i][full[i]]
            per.append(round(float(((rows >= 0) & (rows < k)).double().mean()), 5) if rows.numel() else -1.0)
        shares[str(k)] = per
    mid = kept.shape[0] // 2
    return {"kind": "row", "text": key, "policy": s.policy, "budget": s.budget,
            "sinks": s.sinks if s.policy == "streaming" else 0, "seconds": round(d.seconds, 2),
            "nll": [round(float(x), 5) for x in d.nll], "first_share": shares,
            "occupancy_layer": mid, "occupancy": _occupancy(d.kept[mid], L)}


@dataclass(frozen=True)
class EvictionRun:
    """A run file read back: its ``header``, and ``rows`` keyed by (text, policy, budget) with (T,) losses."""

    header: dict[str, Any]
    rows: dict[tuple[str, str, int | None], dict[str, Any]]

    def nll(self, text: str, policy: str, budget: int | None) -> Tensor:
        """(T,) per-step losses of one row."""
        return torch.tensor(self.rows[(text, policy, budget)]["nll"], dtype=torch.float64)

    def ppl(self, text: str, policy: str, budget: int | None, start: int = 0) -> float:
        """exp(mean loss) over steps ``start``..T-1."""
        return math.exp(float(self.nll(text, policy, budget)[start:].mean()))


def load_eviction_run(path: Path | str = EVICTION_RUN_FILE) -> EvictionRun:
    """Read a run file (:class:`AttnInputError` when it is missing or not one)."""
    path = Path(path)
    if not path.is_file():
        raise AttnInputError(f"no stored eviction run at {path.name}.")
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    if not lines or lines[0].get("kind") != "header":
        raise AttnInputError(f"{path.name} does not start with an eviction run's header.")
    rows = {(r["text"], r["policy"], r["budget"]): r for r in lines[1:] if r.get("kind") == "row"}
    return EvictionRun(lines[0], rows)


def _write(path: Path, header: dict[str, Any], rows: Sequence[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in (header, *rows)), encoding="utf-8")
    tmp.replace(path)


def run_rows(model: Any, tokenizer: Any, out: Path, L: int, texts: dict[str, tuple[str, str]],
             header: dict[str, Any], log: Any = print) -> EvictionRun:
    """Decode every text under :func:`run_settings` (L), appending each row to ``out`` as it is done; the
    rows already in ``out`` (same L, budgets, policies, texts by SHA-256) are skipped, another run refused."""
    ids = {k: text_tokens(tokenizer, t, L, min_tokens=2).ids for k, (_, t) in texts.items()}
    for k, v in ids.items():
        if int(v.shape[1]) < L:
            raise AttnInputError(f"the {k} text gives {int(v.shape[1]):,} tokens, fewer than {L:,}.")
    settings = run_settings(L)
    same = ("length", "budgets", "policies", "texts")
    if out.is_file():
        old = load_eviction_run(out)
        if any(old.header.get(k) != header.get(k) for k in same):
            raise AttnInputError(f"{out.name} holds a different run (length, budgets, policies or texts); "
                                 "choose another --out.")
        header = {**old.header, "resumed": [*old.header.get("resumed", []), header["date"]]}
        rows = list(old.rows.values())
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        _write(out, header, rows)
    done = {(r["text"], r["policy"], r["budget"]) for r in rows}
    todo = [(k, s) for k in texts for s in settings if (k, s.policy, s.budget) not in done]
    for j, (k, s) in enumerate(todo):
        d = evict_decode(model, ids[k], s)
        row = _row(k, s, d, L)
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        rows.append(row)
        log(f"{j + 1}/{len(todo)} {k} {s.label}: ppl {math.exp(sum(row['nll']) / len(row['nll'])):.3f}, "
            f"{d.seconds:.1f} s")
    if len(rows) == len(texts) * len(settings):
        header = {**header, "complete": True, "seconds": round(sum(r["seconds"] for r in rows), 1),
                  "load_average_end": _load()}
        _write(out, header, rows)
    return load_eviction_run(out)


@dataclass(frozen=True)
class Remainder:
    """How much of a window's extra loss the kept first tokens explain, at one budget on one text.

    Every number is a mean over the steps past the budget of a per-step loss difference (nats per token),
    with its block standard error (:func:`attncore.decoder.streaming.mean_se`).

    Attributes:
        window: (mean, se) window - dense: what the window loses.
        sinks: (mean, se) window - (window + first k): what keeping the first k tokens recovers.
        lacks: (mean, se) (window + first k) - dense: what the window truly lacks beyond the sink.
        best: (mean, se) best policy - dense, ``best_policy`` the policy of lowest mean loss.
        explained: sinks / window, the share of the window's loss the first tokens explain (NaN when the
            window loses nothing).
    """

    window: tuple[float, float]
    sinks: tuple[float, float]
    lacks: tuple[float, float]
    best: tuple[float, float]
    best_policy: str
    explained: float


def remainder(dense: Tensor, by_policy: dict[str, Tensor], start: int) -> Remainder:
    """:class:`Remainder` from per-step losses (T,): ``dense`` and ``by_policy`` (policy -> losses at one
    budget, with at least ``window`` and ``streaming``), over steps ``start``.."""
    if "window" not in by_policy or "streaming" not in by_policy:
        raise AttnInputError("the remainder needs the window and StreamingLLM rows at the same budget.")
    d = dense.double()[start:]
    w = by_policy["window"].double()[start:]
    s = by_policy["streaming"].double()[start:]
    best = min(by_policy, key=lambda p: float(by_policy[p].double()[start:].mean()))
    b = by_policy[best].double()[start:]
    win = mean_se(w - d)
    explained = (win[0] - float((s - d).mean())) / win[0] if win[0] else math.nan
    return Remainder(window=win, sinks=mean_se(w - s), lacks=mean_se(s - d), best=mean_se(b - d),
                     best_policy=best, explained=explained)


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or resume) the eviction run and write ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m attncore.decoder.eviction_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=EVICTION_RUN_FILE,
                        help="the .jsonl file to write or resume")
    parser.add_argument("--tokens", type=int, default=EVICTION_RUN_LENGTH, help="L (default 2,048)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from attncore.evidence.decoder import MODEL_LABEL
    from attncore.models import load_model

    t0 = time.perf_counter()
    lm = load_model("smollm2")
    texts = run_texts()
    L = int(args.tokens)
    print(f"model loaded in {time.perf_counter() - t0:.1f} s; {len(run_settings(L))} settings x {len(texts)} "
          f"texts at {L} tokens", flush=True)
    header = {"kind": "header", "format": 1,
              # the command without --out (the file it wrote; a machine path has no place in it)
              "command": "python -m attncore.decoder.eviction_run " + shlex.join(
                  [f"--tokens={L}"] + ([f"--threads={args.threads}"] if args.threads > 0 else [])),
              **machine_label(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "commit": git_commit(), "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
              "load_average": _load(), "model": MODEL_LABEL, "device": "cpu", "length": L,
              "budgets": list(run_budgets(L)), "policies": list(RUN_POLICIES), "sinks": SINKS,
              "texts": {k: {"name": n, "sha256": _sha(t), "chars": len(t)} for k, (n, t) in texts.items()}}
    run = run_rows(lm.model, lm.tokenizer, args.out, L, texts, header,
                   log=lambda m: print(m, flush=True))
    for k in texts:
        for b in run_budgets(L):
            by = {p: run.nll(k, p, b) for p in RUN_POLICIES if (k, p, b) in run.rows}
            if ("window" in by and "streaming" in by) and (k, "dense", None) in run.rows:
                r = remainder(run.nll(k, "dense", None), by, b)
                print(f"{k} budget {b}: window {r.window[0]:+.4f} nats, first {SINKS} recover "
                      f"{r.sinks[0]:.4f} ({r.explained:.0%}), lacks {r.lacks[0]:.4f}; best {r.best_policy} "
                      f"{r.best[0]:+.4f}")
    print(f"wrote {args.out.name} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
