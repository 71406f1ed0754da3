"""Experiment: what weight decay does to the sink. Softmax on the league's task and size at weight decay
0, 0.1, 0.5, 1 and 5 x 3 seeds.

``python -m attncore.training.wd_sweep --out DIR`` trains the league's model
(:data:`~attncore.training.league.LEAGUE` ``["base"]``: Bigram-Backcopy, 2 layers x 4 heads) with softmax
attention at one learning rate
(:data:`WD_SWEEP`) and each weight decay of :data:`WEIGHT_DECAYS` (AdamW's decoupled decay on the 2-D
weights), 3 seeds each, and measures every run as the league does (:func:`~attncore.training.league.
league_record`: sink rate at ε = 0.3, weight sent nowhere, largest activation, kurtosis, task loss). The file
``DIR/wd_sweep.jsonl`` has the league's format (a header naming the command, the corpus by name and SHA-256,
the machine and the commit; one run a line, with its seconds) and resumes the same way. Gu et al.
(ICLR 2025, Table 2) report that at their scale the sink rate rises with moderate weight decay and vanishes
at a large one.

Shape legend: ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from attncore.errors import AttnInputError
from attncore.training.league import LEAGUE, TABLE_KEYS, load_league, run_key
from attncore.training.league import main as league_main
from attncore.training.sink_stats import t_interval

__all__ = ["FILE", "SHIPPED_FILES", "WD_SWEEP", "WEIGHT_DECAYS", "load_sweep", "main", "shipped_sweep",
           "sweep_key", "wd_table"]

FILE = "wd_sweep.jsonl"

WEIGHT_DECAYS: tuple[float, ...] = (0.0, 0.1, 0.5, 1.0, 5.0)
"""The sweep's weight decays (Gu et al.'s Table 2 spans 0 to 5.0)."""

WD_SWEEP: dict[str, Any] = {
    "base": dict(LEAGUE["base"]),
    "lrs": [1e-3],
    "variants": [dict(variant="standard", weight_decay=w) for w in WEIGHT_DECAYS],
    "seeds": [0, 1, 2],
}
"""The sweep's settings in the league's shape: softmax at lr 1e-3 (the league's stable learning rate) x each
weight decay x 3 seeds, seed by seed (a partial file covers every weight decay at its first seeds)."""


def sweep_key(config: dict[str, Any]) -> str:
    """A run's identity in the sweep's file: the league's (:func:`~attncore.training.league.run_key`) and its
    weight decay."""
    key = json.loads(run_key(config))
    key["weight_decay"] = float(config["weight_decay"])
    return json.dumps(key, sort_keys=True)


def load_sweep(path: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, runs) of a sweep file (the league's reader, :func:`~attncore.training.league.load_league`)."""
    return load_league(path)


SHIPPED_FILES = (FILE, "wd_sweep.partial.jsonl")
"""The sweep's shipped result files, the complete one first."""


def shipped_sweep(results_dir: str | Path | None = None) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """(file name, header, runs) of the shipped sweep: the complete file when it ships, else the partial one;
    ("", {}, []) when neither does."""
    from attncore.training.io import RESULTS_DIR

    base = Path(results_dir) if results_dir is not None else RESULTS_DIR
    for name in SHIPPED_FILES:
        if (base / name).is_file():
            header, runs = load_league(base / name)
            return name, header, runs
    return "", {}, []


def wd_table(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per weight decay, ascending: the seeds (a repeated seed counts once), the diverged seeds, and for each
    of :data:`~attncore.training.league.TABLE_KEYS` the mean over the seeds that did not diverge with its
    t interval (:func:`~attncore.training.sink_stats.t_interval`)."""
    cells: dict[float, list[dict[str, Any]]] = {}
    for r in runs:
        cell = cells.setdefault(float(r["config"]["weight_decay"]), [])
        if all(x["config"]["seed"] != r["config"]["seed"] for x in cell):
            cell.append(r)
    out = []
    for wd in sorted(cells):
        cell = cells[wd]
        ok = [r for r in cell if r.get("diverged_at") is None]
        out.append({"weight_decay": wd, "lr": float(cell[0]["config"]["lr"]),
                    "seeds": [r["config"]["seed"] for r in cell],
                    "diverged": [r["config"]["seed"] for r in cell if r.get("diverged_at") is not None],
                    **{k: t_interval([r.get(k) for r in ok]) for k in TABLE_KEYS}})
    return out


def _summary(runs: list[dict[str, Any]]) -> None:
    for c in wd_table(runs):
        r = c["sink_rate"]
        half = "" if r["half"] is None else f" ± {r['half']:.3f}"
        mean = "n/a" if r["mean"] is None else f"{r['mean']:.3f}{half}"
        print(f"  weight decay {c['weight_decay']:g}: sink rate {mean} over {r['n']} seed(s)",
              file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (the league's options); returns the exit status."""
    return league_main(argv, prog="python -m attncore.training.wd_sweep", file=FILE,
                       experiment="weight_decay", settings=WD_SWEEP, key=sweep_key, summary=_summary,
                       description=(__doc__ or "").split("\n")[0])


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except AttnInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
