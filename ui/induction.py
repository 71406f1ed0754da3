"""The Training lab's section "An induction head forms": the shipped run (3 seeds) and a live run.

Widgets (in the sidebar: show the section, the seed whose maps are drawn, the live run's steps) -> cached
call (:func:`ui.cached_results.induction_runs`, the shipped file read once per change) -> view
(:mod:`ui.views.induction`) -> text (every sentence made from :func:`attncore.training.induction.summarize`).
The live run is a job of :data:`ui.jobs.QUEUE` (one at a time, admitted like every training job), estimated
before it is queued (:func:`ui.job_panel.time_estimate`) and followed with progress, Stop and its curves.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from attncore.errors import AttnInputError
from attncore.training import TrainConfig
from attncore.training.induction import SEEDS, seed_summary, summarize, train_induction
from attncore.training.induction_model import FORMED_SCORE, SIZE, induction_config
from ui import cached_results, widgets
from ui.job_panel import job_panel, run_button, time_estimate
from ui.jobs import JOB_ID_PATTERN, QUEUE
from ui.page import PageContext
from ui.state import Param
from ui.views import induction as view

__all__ = ["IND_PARAMS", "JOB_KEY", "P_IND", "live_config", "section"]

P_IND = Param("tr_ind", False)
P_ISEED = Param("tr_ind_seed", 0, options=SEEDS)
P_ISTEPS = Param("tr_ind_steps", 800, lo=100, hi=3000)  # shipped: 1,000 steps, phase change by ~625
P_IJOB = Param("tr_ind_job", "", pattern=JOB_ID_PATTERN)
IND_PARAMS = (P_IND, P_ISEED, P_ISTEPS, P_IJOB)
JOB_KEY = P_IJOB.key
POLL_S = 1.0
TASK = "repeated random tokens"
SMOLLM2_QUERY = {"snk_view": "decoder"}  # Attention sinks' real-decoder part: its induction heads are there


def live_config(steps: int, seed: int) -> TrainConfig:
    """The live run's config: the shipped size with ``steps`` steps and the page's seed."""
    return induction_config(seed, steps=int(steps))


def ind_label(config: TrainConfig) -> str:
    """'induction · seed 0' (the job's name while it runs)."""
    return f"induction · seed {config.seed}"


def section(ctx: PageContext) -> None:
    """The section, drawn when its switch in the sidebar is on."""
    where = ctx.controls
    where.markdown("#### An induction head forms")
    st.header("An induction head forms")
    if not widgets.toggle(P_IND, "Show it", where=where,
                          help="A 2-layer attention-only model learning to copy (Olsson et al. 2022)."):
        st.caption("A 2-layer attention-only transformer learns to continue a repeated random sequence, in a "
                   "sudden phase change (Olsson et al. 2022). Turn on **Show it** under *An induction head "
                   "forms* in the sidebar.")
        return
    st.markdown("Sequences of random tokens repeated once: the first copy cannot be predicted, the second "
                "can, by copying the token that followed the current one last time. A *previous-token head* "
                "in layer 0 and an *induction head* in layer 1 do this together, and they form suddenly.")
    st.latex(r"\text{induction score} = \frac{1}{T}\sum_{i=T}^{2T-1} A_{i,\,i-T+1}\qquad"
             r"\text{previous-token score} = \frac{1}{2T-1}\sum_{i=1}^{2T-1} A_{i,\,i-1}")
    shipped(ctx)
    st.page_link("pages/4_Attention_sinks.py", label="The same stripe in SmolLM2-135M: Attention sinks → a "
                 "real decoder → Induction heads", icon=":material/open_in_new:", query_params=SMOLLM2_QUERY)
    live(ctx)


def shipped(ctx: PageContext) -> None:
    """The shipped run: curves over seeds, the verdict, one seed's maps before and after."""
    header, runs = cached_results.induction_runs()
    if not runs:
        st.info("No shipped induction run is in this app yet (make it with python -m "
                "attncore.training.induction --out attncore/training/results).", icon=":material/draft:")
        return
    try:
        s = summarize(runs)
    except (KeyError, TypeError, ValueError, IndexError, AttnInputError) as exc:
        st.warning(f"The shipped induction run is not in the form this page reads ({type(exc).__name__}).",
                   icon=":material/draft:")
        return
    phases = [x["phase_step"] for x in s["seeds"]]
    st.plotly_chart(view.curves_figure(runs, phases), key="chart_tr_ind_curves")
    st.markdown(f"**Verdict.** {view.verdict_sentence(s)}")
    st.markdown(f"{view.phase_sentence(s)} {view.scores_sentence(s, len(runs[0]['ids']) // 2)}")
    seeds = [int(r["config"]["seed"]) for r in runs]
    seed = int(widgets.select(P_ISEED, "Maps of seed", where=ctx.controls,
                              help="The shipped seed whose two heads' maps are drawn before and after."))
    rec = runs[seeds.index(seed)] if seed in seeds else runs[0]
    st.plotly_chart(view.maps_figure(rec), key="chart_tr_ind_maps")
    st.caption(f"Seed {rec['config']['seed']}, the first evaluation sequence ({len(rec['ids']) // 2} random "
               "tokens, twice). Before: the evaluation point before the second copy's loss had made 10% of "
               "its fall; after: the first point at which it had made 90%. The induction head's stripe runs "
               "T − 1 below the diagonal in the second copy; the previous-token head's just below the "
               "diagonal.")
    st.caption(view.scale_sentence(header) + " " + provenance(header, runs))


def provenance(header: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """Who made the shipped file, and how long its runs took."""
    took = [float(r.get("wall_s") or 0) for r in runs]
    return (f"Made by `{header.get('command', '?')}` on {header.get('machine', '?')} from commit "
            f"{str(header.get('git_commit') or '?')[:10]}; the runs took {min(took):.0f}–{max(took):.0f} s "
            "each while other work shared the machine.")


def live(ctx: PageContext) -> None:
    """A live run: steps in the sidebar, the estimate, Run, then the job's progress, Stop and curves."""
    st.markdown("##### Watch it form: a live run")
    steps = int(widgets.slider(P_ISTEPS, "Live run: steps", step=100, where=ctx.controls,
                               help="Adam steps of the live run (the shipped runs: "
                                    f"{int(SIZE['steps'])}); the seed is the Compute seed."))
    problem = None
    try:
        configs = [live_config(steps, ctx.seed)]
    except AttnInputError as exc:
        configs, problem = [], str(exc)
    if configs:
        c = configs[0]
        line = (f"One run of {steps} steps × {c.batch} sequences of {c.context} tokens on {ctx.device_label}"
                + (", one CPU thread." if ctx.device.startswith("cpu") else "."))
        line += time_estimate(QUEUE, configs, "", ctx.device, train_induction,
                              timing="a few steps of the model")
        st.caption(line)
    if problem:
        st.warning(problem, icon=":material/block:")
    run_button(QUEUE, job_key=JOB_KEY, label="Run the induction model", key="tr_ind_run",
               disabled=bool(problem),
               submit=lambda: QUEUE.submit(configs, "", corpus=TASK, device=ctx.device,
                                           runner=train_induction, namer=ind_label),
               status=job_status, poll_s=POLL_S)


def job_status(job_id: str, polling: bool) -> None:
    """The live job: queue position or progress with its curves so far, Stop; then its run."""
    job_panel(QUEUE, job_id, polling, key="tr_ind", live_chart=_live_chart, show_records=_job_records,
              stopped_keeps="a stopped run keeps its curves")


def _live_chart(snap: dict[str, Any]) -> Any:
    return view.live_figure(snap["probes"], title=f"now training: {snap['label']}", total=snap["total"])


def _job_records(records: list[dict[str, Any]]) -> None:
    runs = [r for r in records if len(r.get("steps") or []) >= 2]
    if not runs:
        return
    sums = [seed_summary(r) for r in runs]
    formed = [x["phase_step"] for x in sums if x["formed"]]  # a run with no head formed has no phase change
    st.plotly_chart(view.job_figure(runs, formed), key="chart_tr_ind_job")
    for rec, s in zip(runs, sums, strict=True):
        st.markdown(view.live_outcome(rec, s))
    st.caption("An induction head formed by the rule: its score after the phase change at least "
               f"{FORMED_SCORE:g} and the second copy's loss below half the first copy's.")
