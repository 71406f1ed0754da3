"""Training lab: the tables of a shipped result (one row per cell, one per run, the printed table) and the
sentence that says what made it (command, machine, sizes, corpus, commit).

Pure functions of a result dict (the JSON written by ``python -m attncore.training.experiments``); no
streamlit calls. The cells are computed from the runs, as the verdicts are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from attncore.training.train import best_val
from attncore.training.verdicts import (
    converged,
    runs_by,
    seed_of,
    stats_of,
)
from ui.views.training import STREAM_KEYS, sink_counts

__all__ = [
    "cells_frame",
    "cells_note",
    "provenance",
    "runs_frame",
    "table_frame",
]


def provenance(d: dict[str, Any]) -> str:
    """One sentence: the command, machine, sizes, corpus and time that made a result file."""
    m = d.get("machine") or {}
    c = (d.get("sizes") or {}).get("config") or {}
    corpus = d.get("corpus") or {}
    sha = f"SHA-256 {corpus['sha256'][:12]}…, " if corpus.get("sha256") else ""  # the file, wherever it is
    names = {"n_layer": "{} layer{}", "n_head": "{} head{}", "d_model": "d_model {}", "context": "context {}",
             "batch": "batch {}", "steps": "{} step{}", "lr": "lr {}"}
    size = ", ".join(names[k].format(v, "" if v == 1 else "s") for k, v in c.items() if k in names)
    threads = m.get("torch_threads")
    where = f"{m.get('device', '?')} ({m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores"
    where += f", {threads} torch thread{'s' if threads != 1 else ''})" if threads else ")"
    wall = d.get("wall_s")
    took = ""
    if isinstance(wall, int | float):
        took = f" in {wall:.0f} s" if wall < 90 else f" in {wall / 60:.1f} min"
    runs = d.get("runs") or []
    # the seeds the runs used (a file's "seeds" is the command's --seeds, which null_attention does not
    # take: it runs its own number of seeds from the first); the recorded list only when no run says
    seeds = sorted({r["config"]["seed"] for r in runs if isinstance(r.get("config"), dict)
                    and isinstance(r["config"].get("seed"), int)}) or d.get("seeds") or ["?"]
    kept = d.get("reused") or []
    reuse = ""
    if kept:
        commits = sorted({str(k.get("from_commit", "?"))[:10] for k in kept})
        check = d.get("reuse_check") or {}
        reuse = (f" {len(kept)} of the {len(runs)} runs were kept from commit {', '.join(commits)} (same "
                 f"config, same machine type, one thread): the run '{check.get('name', '?')}' was trained "
                 f"again first and came out {'bit-identical' if check.get('identical') else 'different'}.")
    return (f"Made by `{d.get('command', '?')}` on {where}{took}, torch {m.get('torch', '?')}, commit "
            f"{str(d.get('git_commit', '?'))[:10]}, scale '{d.get('scale', '?')}', seeds "
            f"{', '.join(str(x) for x in seeds)}. Models: {size or '?'}. Corpus: {corpus.get('name', '?')} "
            f"({sha}{corpus.get('chars', 0):,} characters, {corpus.get('vocab', '?')} distinct).{reuse}")


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float | np.floating) and math.isnan(v))


def table_frame(table: dict[str, Any]) -> pd.DataFrame:
    """A result file's printed table as a DataFrame, one type per column (Arrow needs it): a numeric
    column keeps a ``None`` cell as a missing number (the sd of a one-seed cell; a column of whole
    numbers stays whole, as pandas' nullable Int64); any other column shows it as empty text."""
    rows = table.get("rows") or []
    df = pd.DataFrame(rows, columns=table.get("columns") or None)
    for i, col in enumerate(df.columns):
        if not df[col].isna().any():
            continue
        raw = [None if _missing(r[i]) else r[i] for r in rows]
        present = [v for v in raw if v is not None]
        if present and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in present):
            df[col] = pd.array([None if v is None else int(v) for v in raw], dtype="Int64")
        elif present and all(isinstance(v, int | float | np.number) and not isinstance(v, bool)
                             for v in present):
            df[col] = df[col].astype(np.float64)
        else:
            df[col] = df[col].astype(object).where(df[col].notna(), "")
    return df


CELL_KEYS = {"lr_sweep": ("variant", "lr"), "scaling": ("variant", "d_head"), "sinks": ("label",)}


def _ms(runs: Sequence[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    st = stats_of(runs, key)
    if st is None:
        return None, None
    return round(st.mean, 4), (round(st.sd, 4) if st.sd is not None else None)


def cells_frame(d: dict[str, Any]) -> pd.DataFrame:
    """One row per cell of an experiment (a setting, over its seeds): how many seeds, mean and sd of
    the final training and validation losses and of the best validation loss, the median step of
    that best point, and how many runs diverged; for sinks also the sink heads and the streaming
    losses. Computed from the runs, as the verdicts are."""
    keys = CELL_KEYS[d["experiment"]]
    rows = []
    for key, runs in runs_by(d["runs"], *keys).items():
        done = converged(runs)
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row["seeds"] = len(runs)
        for name, field in (("final train", "final_train_loss"), ("final val", "final_val_loss"),
                            ("best val", "best_val_loss")):
            row[f"{name} (mean)"], row[f"{name} (sd)"] = _ms(runs, field)
        steps = [best_val(r["steps"], r["val_loss"])[1] for r in done]
        row["best val step (median)"] = float(np.median(steps)) if steps else None
        if d["experiment"] == "sinks":
            with_alpha = [r for r in done if r.get("sink_alpha") is not None]
            row["sink heads (all seeds)"] = sum(sink_counts(r)[0] for r in with_alpha)
            for skey, sname in STREAM_KEYS:
                vals = [float(r["streaming"][skey]) for r in with_alpha]
                row[f"{sname} (mean)"] = round(float(np.mean(vals)), 4) if vals else None
        row["diverged"] = len(runs) - len(done)
        rows.append(row)
    return table_frame({"columns": list(rows[0]) if rows else [], "rows": [list(r.values()) for r in rows]})


def cells_shown(frame: pd.DataFrame) -> Any:
    """The cells table as the page shows it: a one-seed setting's empty sd cells read "one seed" (issue 34:
    they printed "None"); the numbers stay numbers (a pandas Styler over :func:`cells_frame`)."""
    sd = [c for c in frame.columns if str(c).endswith("(sd)")]
    one = frame["seeds"] == 1 if "seeds" in frame else pd.Series(False, index=frame.index)
    return frame.style.format(na_rep="one seed", precision=4, subset=pd.IndexSlice[one, sd])


def cells_note(frame: pd.DataFrame) -> str | None:
    """What an empty sd cell of :func:`cells_frame` means, where there is one: a setting run with one seed."""
    one = int((frame["seeds"] == 1).sum()) if "seeds" in frame else 0
    if not one:
        return None
    many = sorted({int(n) for n in frame["seeds"] if n > 1})
    head = (f"{one} of {len(frame)} settings ran one seed, so their sd cells say “one seed” (no spread from "
            "one run)")
    if not many:
        return head + "; with one seed no comparison here has a spread."
    return (f"{head}; the others ran {' or '.join(map(str, many))} seeds, and the verdicts compare only "
            "those.")


def runs_frame(d: dict[str, Any]) -> pd.DataFrame:
    """Every run of an experiment: its cell, seed, final and best losses (the CSV download)."""
    keys = CELL_KEYS[d["experiment"]]
    rows = []
    for r in d["runs"]:
        best, at = best_val(r["steps"], r["val_loss"])
        rows.append([*(r[k] for k in keys), seed_of(r), r.get("final_train_loss"), r.get("final_val_loss"),
                     best, at, r.get("diverged_at"), r.get("reused_from", "")])
    return table_frame({"columns": [*keys, "seed", "final train", "final val", "best val", "best val step",
                                    "diverged at", "kept from commit"], "rows": rows})
