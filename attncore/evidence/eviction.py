"""The eviction run's claim: keeping the sink tokens recovers most of a window's loss, judged over the texts,
budgets and policies of the shipped run (:mod:`attncore.decoder.eviction_run`, read, not rerun here).

For every (text, budget) of the run with dense, the window and the window + first 4 (StreamingLLM), the
window's extra loss past the budget is split (:func:`attncore.decoder.eviction_read.split`): what the first 4
recover, what stays above dense; "most" is tested as (window - window + first 4) - (window - dense) / 2 > 0,
a 95% t interval over blocks of 64 tokens. The other policies (H2O, TOVA) say whether choosing keys by
attention recovers more than the sink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attncore.citations import quoted
from attncore.decoder.eviction import SINKS
from attncore.decoder.eviction_read import POLICY_NAMES, expected_decodes, from_run, split
from attncore.decoder.eviction_run import EVICTION_RUN_FILE, load_eviction_run
from attncore.errors import AttnInputError
from attncore.evidence.decoder import LLM_WINDOW, MODEL_LABEL
from attncore.evidence.records import CAVEAT, FAILS, HOLDS, SHIPPED, Claim, Judgement, Measurement, Setting

_XIAO = quoted("xiao2023.t1.0+1024")

__all__ = ["CLAIMS", "LLM_SINK_RECOVERS", "cells", "measure_sink_recovery", "shipped_run_path"]


def shipped_run_path() -> Path:
    """The complete run's file when present, else the partial one (``.partial.jsonl``) it grows from."""
    if EVICTION_RUN_FILE.is_file():
        return EVICTION_RUN_FILE
    return EVICTION_RUN_FILE.with_name(EVICTION_RUN_FILE.stem + ".partial.jsonl")


def cells(run: Any) -> list[dict[str, Any]]:
    """One dict per (text, budget) the run can split: the intervals (mean, lo, hi) in nats/token and the best
    policy, with what it gains beyond the window + first 4 (``beyond``)."""
    out: list[dict[str, Any]] = []
    for text in run.header.get("texts", {}):
        try:
            pl = from_run(run, text)
        except AttnInputError:
            continue
        for b in pl.budgets:
            if ("window", b) not in pl.rows or ("streaming", b) not in pl.rows:
                continue
            sp = split(pl, b)
            others = [p for p in pl.policies(b) if p not in ("window", "streaming")]
            beyond = (pl.diff("streaming", b, against=sp.best_policy) if sp.best_policy != "streaming"
                      else None)
            out.append({"text": text, "budget": b, "explained": sp.explained, "best": sp.best_policy,
                        "others": others,
                        **{k: (v.mean, v.lo, v.hi) for k, v in (("window", sp.window), ("sink", sp.sink),
                                                                  ("lacks", sp.lacks), ("most", sp.most))},
                        "beyond": (beyond.mean, beyond.lo, beyond.hi) if beyond is not None else None})
    return out


def measure_sink_recovery(setting: Setting, path: Path | str | None = None) -> Measurement:
    """The cells of the shipped eviction run (the complete file, else the partial one)."""
    try:
        run = load_eviction_run(path if path is not None else shipped_run_path())
        cs = cells(run)
    except (AttnInputError, OSError, ValueError, KeyError) as exc:
        return Measurement(basis=SHIPPED, missing=f"the shipped eviction run cannot be read: "
                                                  f"{str(exc).splitlines()[0][:200]}")
    if not cs:
        return Measurement(basis=SHIPPED, missing="the shipped eviction run holds no budget with dense, the "
                                                  "window and the window + first 4 decoded yet.")
    h = run.header
    total = expected_decodes(run)
    done = (f"all {total} decodes" if len(run.rows) >= total else
            f"{len(run.rows)} of {total} decodes in, the rest still to be computed")
    scale = (f"{MODEL_LABEL}, {int(h['length']):,} tokens, token-by-token decodes with a cache of each "
             "budget; "
             f"shipped run ({h.get('date', '?')}, {h.get('cpu', '?')}; {done}); StreamingLLM's "
             f"{_XIAO.where}: {_XIAO.model}, {_XIAO.data}")
    return Measurement({"cells": tuple(cs), "decodes": len(run.rows), "expected": total}, basis=SHIPPED,
                       scale=scale)


def _name(c: Mapping[str, Any]) -> str:
    return f"{c['text']} at {int(c['budget']):,} keys"


def _judge(m: Measurement) -> Judgement:
    cs: Sequence[Mapping[str, Any]] = m["cells"]  # type: ignore[assignment]
    judged = [c for c in cs if c["window"][1] > 0]
    partial = (f" (from {int(m.num('decodes'))} of {int(m.num('expected'))} decodes; the rest still to be "
               "computed)" if m.num("decodes") < m.num("expected") else "")
    if not judged:
        return Judgement(CAVEAT, "the window alone is within noise of dense at every budget measured: "
                                 "there is "
                                 f"no loss for the first tokens to recover{partial}.")
    ok = [c for c in judged if c["most"][1] > 0]
    bad = [c for c in judged if c["most"][2] < 0]
    shares = [float(c["explained"]) for c in judged]
    span = (f"{min(shares):.0%}" if len(shares) == 1 else f"{min(shares):.0%} to {max(shares):.0%}")
    gain = [c for c in judged if c["beyond"] is not None and c["beyond"][1] > 0]
    policies = (f"; choosing keys by attention recovers significantly more than the first {SINKS} in "
                f"{len(gain)} of {len(judged)} (" + ", ".join(f"{POLICY_NAMES[c['best']]} {_name(c)}"
                                                            for c in gain) + ")"
                if gain else f"; no other policy beats the window + first {SINKS} beyond noise")
    rest = [c for c in judged if c["lacks"][1] > 0]
    lacks = (f"; what stays above dense is context the window lacks in {len(rest)} of {len(judged)}"
             if rest else "")
    if len(ok) == len(judged):
        where = ("the one text and budget cell" if len(judged) == 1
                 else f"all {len(judged)} text and budget cells")
        said = (f"the first {SINKS} tokens recover {span} of the window's loss, more than half in "
                f"{where} (95% t intervals over blocks of 64 tokens){lacks}{policies}")
        if partial:  # a run still growing cannot speak for the budgets and texts it lacks
            return Judgement(CAVEAT, f"{said}; only {partial.strip(' ()')}, so the other budgets and "
                                     "texts are not judged yet.")
        return Judgement(HOLDS, f"{said}.")
    if not ok and len(bad) == len(judged):
        return Judgement(FAILS, f"the first {SINKS} tokens recover less than half of the window's loss "
                                f"in every cell ({span}){policies}{partial}.")
    miss = [c for c in judged if c not in ok]
    return Judgement(CAVEAT, f"more than half in {len(ok)} of {len(judged)} cells; not in "
                             + ", ".join(f"{_name(c)} ({float(c['explained']):.0%})" for c in miss)
                             + f"{lacks}{policies}{partial}.")


def _describe(m: Measurement) -> str:
    cs: Sequence[Mapping[str, Any]] = m["cells"]  # type: ignore[assignment]
    bits = [f"{_name(c)}: window +{c['window'][0]:.3f}, first {SINKS} recover {c['sink'][0]:.3f} "
            f"({float(c['explained']):.0%}), left {c['lacks'][0]:.3f}" for c in cs]
    return "nats/token past the budget against dense — " + "; ".join(bits) + "."


LLM_SINK_RECOVERS = Claim(
    key="llm_sink_recovers",
    source="sdpa",
    quote=LLM_WINDOW.quote,
    test=f"{MODEL_LABEL}, decoded token by token with a KV cache of T/16 to T/2 keys (the shipped "
         "eviction run "
         "on a Shakespeare excerpt and a standard-library module's source, read, not rerun here): does "
         "keeping "
         f"the first {SINKS} tokens (the sink; the quote's global tokens) recover most of a window's "
         "extra loss, "
         "at every text and budget, and do H2O or TOVA recover more?",
    tolerance=f"holds: in every cell where the window loses (95% t interval above 0), the first {SINKS} "
              "recover "
              "more than half of that loss (the t interval of (window - window + first 4) - (window - "
              "dense)/2 "
              "above 0); fails: below half in every cell",
    measure=measure_sink_recovery,
    describe=_describe,
    judge=_judge,
    cites=("xiao2023",),
)

CLAIMS: tuple[Claim, ...] = (LLM_SINK_RECOVERS,)
