"""A sink that forms in training (the Bigram-Backcopy task of Guo et al. 2024), in two places:

* the Training lab's tab "A sink forms": the shipped ``null_attention`` result (:func:`shipped_section`),
  then live runs of the task through the Training lab's job queue (:func:`live_section`);
* the Attention sinks page's part "learned here" (:func:`learned_part`): the shipped softmax model and
  one fixed variant on a sequence regenerated from the seed or typed by the user, side by side.

Widgets -> cached call (:mod:`ui.cached`) -> view (:mod:`ui.views.learned_sinks`) -> text.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st
import torch

from attncore.errors import AttnInputError
from attncore.synthetic import make_generator
from attncore.training import TrainConfig
from attncore.training.bbm import (
    BIGRAM,
    COPY,
    MAX_VIEW_TOKENS,
    N_TRIGGERS,
    SINK_THRESHOLD,
    BigramBackcopy,
    bbm_label,
    eval_sequences,
)
from attncore.training.inspect import char_label
from attncore.training.null_attention import (
    CLAIM,
    COPY_TOL,
    KL_TOL,
    MODEL_NOTE,
    SHIPPED,
    live_test_sizes,
    train_and_test,
)
from attncore.training.null_verdicts import Z
from attncore.training.sink_stats import LAST_POINTS, t_level
from attncore.training.sink_verdicts import SinkClaims, streaming_claim_sentence
from ui import cached_results, sink_grid, widgets
from ui.corpus import Corpus
from ui.job_cost import MAX_JOB_TOKENS, SIZES, flops_per_token
from ui.job_panel import job_panel, run_button, time_estimate
from ui.jobs import JOB_ID_PATTERN, QUEUE
from ui.state import Param
from ui.text import plain
from ui.views import learned_sinks as view
from ui.views.training_tables import provenance

__all__ = ["SINKS_PARAMS", "TRAINING_PARAMS", "learned_part", "live_section", "shipped_section"]

FIXES = tuple(k for k in SHIPPED if k != "softmax")
LIVE_VARIANTS = ("standard", "softmax1", "sink_logit", "sigmoid", "gated", "relu")
LIVE_LABELS = {"standard": "softmax", "softmax1": "softmax1", "sink_logit": "sink logit (b₀ below)",
               "sigmoid": "sigmoid (b = −log n)", "gated": "gated output", "relu": "ReLU ÷ n"}
P_LVARS = Param("sk_vars", ("standard", "softmax1"), options=LIVE_VARIANTS, multi=True)
P_LB0 = Param("sk_b0", 0.0, lo=-10.0, hi=10.0)
P_LSEEDS = Param("sk_seeds", 1, lo=1, hi=5)
P_LSTEPS = Param("sk_steps", 600, lo=50, hi=2000)
P_LLAYERS = Param("sk_layers", 1, lo=1, hi=3)
P_LHEADS = Param("sk_heads", "1", options=("1", "2", "4"))
P_LLR = Param("sk_lr", "0.01", options=("0.001", "0.003", "0.01", "0.03"))
P_LJOB = Param("sk_job", "", pattern=JOB_ID_PATTERN)  # this tab's job: a reloaded page finds it again
TRAINING_PARAMS = (P_LVARS, P_LB0, P_LSEEDS, P_LSTEPS, P_LLAYERS, P_LHEADS, P_LLR, P_LJOB)

DEFAULT_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."
P_FIX = Param("snk_lfix", "softmax1", options=FIXES)
P_SRC = Param("snk_lsrc", "seed", options=("seed", "text"))
P_LEN = Param("snk_llen", 64, lo=8, hi=MAX_VIEW_TOKENS)
P_TEXT = Param("snk_ltext", DEFAULT_TEXT)
SINKS_PARAMS = (P_FIX, P_SRC, P_LEN, P_TEXT)

JOB_KEY = P_LJOB.key
POLL_S = 1.0
WIDTH, CONTEXT, BATCH = 64, 64, 64  # the shipped experiment's model and batch
MEDIUM = TrainConfig(**SIZES["medium"])
MAX_JOB_FLOPS = MAX_JOB_TOKENS * flops_per_token(MEDIUM)  # the text runs' largest Run, in FLOPs
TASK_LATEX = (r"x_0=\mathrm{BOS},\qquad x_{i+1}=\begin{cases}x_{i-1} & x_i\in\text{triggers (copy)}\\"
              r"\sim P(\cdot\mid x_i) & \text{otherwise (bigram)}\end{cases}")
PAPER = ('Guo et al. 2024 ("Active-Dormant Attention Heads: Mechanistically Demystifying Extreme-Token '
         'Phenomena in LLMs")')


# ---------------------------------------------------------------------------- shipped result (Training lab)


def _task_sentence(task: dict[str, Any]) -> str:
    trig = ", ".join(f"'{plain(char_label(c))}'" for c in task["triggers"])  # a corpus's own characters
    return (f"BOS is a token of its own, the {N_TRIGGERS} triggers (the corpus's most frequent characters) "
            f"are {trig}, and the vocabulary has {task['vocab_size']} tokens.")


def shipped_section(d: dict[str, Any], ctx: Any = None) -> None:
    """The shipped ``null_attention`` result: curves, the verdict over settings (the sink grid, with its
    controls in ``ctx.controls``), maps, where the weight goes, the tests, verdicts."""
    st.markdown("Does a head that must *sometimes* do nothing learn to park its weight on the first token "
                f"(a sink), and which fix removes the need? The Bigram-Backcopy task of {PAPER}:")
    st.latex(TASK_LATEX)
    summary = view.summary_of(d["runs"])
    sizes = d.get("sizes") or {}
    window = sizes.get("window")
    st.plotly_chart(view.bos_curves_figure(summary), key="chart_sk_curves")
    seeds = max((s["n"] for s in summary.values()), default=0)
    p0 = d["runs"][0]["probes"][0]
    st.caption(f"Line: mean over {seeds} seeds; band: their range; measured every "
               f"{(sizes.get('config') or {}).get('eval_every', '?')} steps on the same held-out sequences "
               f"({p0['n_other']:,} non-trigger and {p0['n_trigger']:,} trigger positions). "
               + _task_sentence(d["task"]))
    judged = view.verdict_lines(summary, window)
    left, right = st.columns(2)
    with left.container(border=True):
        st.markdown("**The claim**")
        st.markdown(CLAIM)
    with right.container(border=True):
        st.markdown("**This run measured**")
        st.markdown(view.measured_text(summary))
    if ctx is not None:
        sink_grid.grid_section(ctx)
    cfg = sizes.get("config") or {}
    shipped_at = (f"rotary, lr {cfg['lr']:g}, {cfg['steps']:,} steps" if "lr" in cfg and "steps" in cfg else
                  "as shipped")
    st.markdown(f"**At the shipped setting** ({shipped_at}). " + judged["overall"][0])
    with st.expander("Every variant's verdict at the shipped setting, with the numbers it is drawn from",
                     expanded=False, icon=":material/gavel:"):
        st.caption(f"Rules: a run has learned the task when its copy loss is at most {COPY_TOL:g} nats and "
                   f"its loss at non-trigger positions is within {KL_TOL:g} nats of the bigram entropy "
                   "(measured as the mean KL divergence from the true bigram rows); a sink when non-trigger "
                   "positions put more than 0.3 of their weight on BOS, averaged over the last "
                   f"{LAST_POINTS} evaluation points; two means differ when they are more than {Z:g} "
                   "standard errors apart "
                   f"(standard error over seeds: with {seeds} seeds that is about a "
                   f"{100 * t_level(Z, seeds - 1):.0f}% interval, not 95%); a test matters when it moves the "
                   "loss by more than that and 0.01 nats.")
        for label, lines in judged.items():
            if label != "overall":
                st.markdown(f"**{label}**\n" + "\n".join(f"- {plain(line)}" for line in lines))
    maps_section(d)
    left, mid, right = st.columns(3)
    left.plotly_chart(view.nowhere_figure(summary), key="chart_sk_nowhere")
    gate = view.gate_figure(summary)
    if gate is not None:
        mid.plotly_chart(gate, key="chart_sk_gate")
    right.plotly_chart(view.value_figure(summary), key="chart_sk_value")
    st.caption("Nowhere: softmax1's and the sink logit's extra slot, what sigmoid and ReLU leave unspent; 0 "
               "for softmax and gated by construction (the gate scales the output instead: middle). Value "
               "ratio: below 1, BOS writes less than a typical token (Guo et al.'s value-state drain, where "
               "there is a sink to drain).")
    if "softmax" in summary:
        st.markdown("**StreamingLLM in this toy.** " + streaming_claim_sentence(summary["softmax"], window))
    table = view.summary_frame(summary)
    widgets.table(table)
    st.caption(f"Sink share: the share of heads whose mean weight on the first token, over every query "
               f"(BOS's own row included), exceeds {SINK_THRESHOLD:g}: Gu et al.'s metric, as in the "
               "Training lab's Shakespeare tab; the sink verdicts above use the non-trigger positions' "
               "weight instead. "
               f"Ablation Δ: the loss change when BOS is hidden from every query (softmax renormalises over "
               f"the rest). window / window+BOS / full: StreamingLLM's caches on "
               f"{sizes.get('stream_seqs', '?')} held-out sequences of {sizes.get('stream_len', '?')} tokens "
               f"({sizes.get('stream_len', 0) // max((sizes.get('config') or {}).get('context', 1), 1)}× the "
               f"training length), a window of {window} tokens, loss at non-trigger positions past the "
               "training length.")
    widgets.csv_download(table, "null_attention_summary.csv", label="Download the summary (CSV)",
                         key="dl_sk_summary")
    widgets.csv_download(lambda: view.runs_frame(d["runs"]), "null_attention_runs.csv",
                         label="Download every run (CSV)", key="dl_sk_runs")
    st.caption(provenance(d) + " " + MODEL_NOTE)


MAPS_OPEN = "sk_maps_open"  # the expander's open state (a view choice, not a setting: not in the URL)


def maps_section(d: dict[str, Any]) -> None:
    """Every shipped variant's head on the first held-out sequence, in an expander computed and drawn only
    when it is opened (seven maps: two thirds of the tab's chart bytes)."""
    box = st.expander("Every variant's head on one held-out sequence", key=MAPS_OPEN, on_change="rerun",
                      icon=":material/grid_view:")
    if not box.open:
        return
    with box:
        _maps(d)


def _maps(d: dict[str, Any]) -> None:
    try:
        task = cached_results.learned_task()
        ids = _first_held_out(task, int((d.get("sizes") or {}).get("config", {}).get("context", CONTEXT)))
        views = [(SHIPPED[name], cached_results.learned_view(name, ids, "cpu").value) for name in SHIPPED]
    except AttnInputError as exc:
        st.info(plain(f"The shipped models cannot be shown: {exc}"), icon=":material/draft:")
        return
    first = views[0][1]
    roles = first.roles.tolist()
    st.plotly_chart(view.maps_grid_figure([(label, v.weights[0, 0].numpy()) for label, v in views], roles),
                    key="chart_sk_maps")
    trig = [i for i, r in enumerate(roles) if r == COPY]
    st.caption(f"Seed 0 of each variant on the first held-out sequence ({len(roles)} tokens; rows are "
               "queries, columns keys, the first column is BOS). Trigger rows (▸ left of each map): "
               f"{', '.join(map(str, trig)) or 'none'}; there the head must read the token just before (the "
               "sub-diagonal); elsewhere it has nothing to read. The Attention sinks page shows any "
               "sequence, larger.")


def _first_held_out(task: BigramBackcopy, context: int) -> tuple[int, ...]:
    return tuple(int(i) for i in eval_sequences(task, context, n=1)[0, :-1])


# ---------------------------------------------------------------------------- live runs (Training lab)


def live_controls(where: Any) -> dict[str, Any]:
    where.markdown("#### A sink forms: live run")
    variants = widgets.multiselect(P_LVARS, "Variants", labels=LIVE_LABELS, where=where,
                                   help="Each variant trains once per seed on the Bigram-Backcopy task of "
                                        "the corpus chosen under Live run.")
    b0 = widgets.number(P_LB0, "Initial sink logit b₀", step=0.5, where=where,
                        help="Where the sink-logit variant's learned logit starts (0 = softmax1 at the "
                             "start).")
    seeds = widgets.number(P_LSEEDS, "Seeds", step=1, where=where,
                           help="Seeds per variant: the page's seed, then the next ones. Two or more give "
                                "standard errors and verdicts.")
    steps = widgets.slider(P_LSTEPS, "Steps per run", step=50, where=where)
    layers = widgets.slider(P_LLAYERS, "Layers", step=1, where=where)
    heads = widgets.select(P_LHEADS, "Heads per layer", where=where)
    lr = widgets.select(P_LLR, "Peak learning rate", where=where,
                        help="AdamW, warm-up over the first 10% of steps (at most 50), cosine decay. The "
                             "shipped experiment used 0.01.")
    return {"variants": variants, "b0": float(b0), "seeds": int(seeds), "steps": int(steps),
            "layers": int(layers), "heads": int(heads), "lr": float(lr)}


def live_configs(c: dict[str, Any], seed: int) -> list[TrainConfig]:
    """One config per (variant, seed): width 64, context 64, batch 64 as shipped."""
    return [TrainConfig(variant=v, n_layer=c["layers"], n_head=c["heads"], d_model=WIDTH, context=CONTEXT,
                        batch=BATCH, steps=c["steps"], warmup=min(50, c["steps"] // 10), lr=c["lr"],
                        eval_every=max(5, c["steps"] // 12), seed=seed + k,
                        sink_init=c["b0"] if v == "sink_logit" else 0.0)
            for k in range(c["seeds"]) for v in dict.fromkeys(c["variants"])]  # a repeat would train twice


def job_flops(configs: list[TrainConfig], vocab: int) -> float:
    """Training FLOPs of a job (:func:`ui.job_cost.flops_per_token` x tokens)."""
    return sum(c.steps * c.batch * c.context * flops_per_token(c, vocab) for c in configs)


def live_section(ctx: Any, corpus: Corpus | None) -> None:
    """Live runs of the task on the Live run corpus: controls in the sidebar, the job here."""
    c = live_controls(ctx.controls)
    st.markdown("##### Live runs of this task")
    st.markdown("Train the same model on the Bigram-Backcopy task of the corpus chosen under **Live run** in "
                "the sidebar (the built-in one unless you change it): fresh sequences every step, the head "
                "probed on fixed held-out sequences as it learns, then the BOS ablation and the streaming "
                "test." + _shipped_time())
    problem, configs, task = None, [], None
    if not c["variants"]:
        problem = "Pick at least one variant under 'A sink forms: live run' in the sidebar."
    elif corpus is None:
        problem = "Choose a corpus under Live run in the sidebar (an uploaded file that is not there yet)."
    else:
        try:
            task = _task_of(corpus)
            configs = live_configs(c, ctx.seed)
        except AttnInputError as exc:
            problem = str(exc)
    if task is not None and configs:
        flops = job_flops(configs, task.size)
        if flops > MAX_JOB_FLOPS:
            problem = (f"That is {len(configs)} runs and {flops:.3g} training FLOPs; one Run may take at "
                       f"most {MAX_JOB_FLOPS:.3g} (what {MAX_JOB_TOKENS:,} tokens of the medium character "
                       "model take). Pick fewer steps, seeds, variants or layers.")
        else:
            tokens = sum(cf.steps * cf.batch * cf.context for cf in configs)
            line = (f"{len(configs)} run{'s' if len(configs) != 1 else ''} × {c['steps']} steps = {tokens:,} "
                    f"training tokens of the task built from {plain(corpus.name)} ({task.size - 1} distinct "
                    f"characters; {_task_sentence(task.to_dict())}) on {ctx.device_label}.")
            line += time_estimate(QUEUE, configs, corpus.text, ctx.device, train_and_test,
                                  timing="a few steps of the task", included=", probes and tests included")
            st.caption(line)
    if problem:
        st.warning(plain(problem), icon=":material/block:")
    run_button(QUEUE, job_key=JOB_KEY, label="Run on the task", key="sk_run", disabled=bool(problem),
               submit=lambda: QUEUE.submit(configs, corpus.text, corpus=corpus.name, device=ctx.device,
                                           runner=train_and_test, namer=bbm_label, upload=corpus.uploaded),
               status=job_status, poll_s=POLL_S)


def _shipped_time() -> str:
    """' The shipped runs of this size took a–b s each ...' from the shipped file ('' without one)."""
    try:
        d = cached_results.training_result("null_attention")
    except AttnInputError:
        return ""
    took = [float(r.get("wall_s") or 0) + float(r.get("test_s") or 0) for r in d.get("runs") or []]
    if not took:
        return ""
    m = d.get("machine") or {}
    return (f" The shipped runs (this size, {d['runs'][0]['config']['steps']} steps) took {min(took):.0f}–"
            f"{max(took):.0f} s each, training, probes and tests, on {m.get('torch_threads', '?')} thread(s) "
            f"of {m.get('cpu', '?')} while other work shared the machine.")


@st.cache_resource(max_entries=4, show_spinner=False)
def _task_cached(name: str, text: str) -> BigramBackcopy:
    return BigramBackcopy.from_text(text)


def _task_of(corpus: Corpus) -> BigramBackcopy:
    return _task_cached(corpus.name, corpus.text)


def job_status(job_id: str, polling: bool) -> None:
    """The task job: queue position or progress with the BOS-weight curve so far, Stop; then its runs."""
    job_panel(QUEUE, job_id, polling, key="sk", live_chart=_live_chart, show_records=_job_records,
              stopped_keeps="a stopped run keeps its curves; its tests and verdict are left out")


def _live_chart(snap: dict[str, Any]) -> Any:
    return view.live_figure(snap["probes"], title=f"now training: {snap['label']}", total=snap["total"])


def _job_records(records: list[dict[str, Any]]) -> None:
    st.plotly_chart(view.job_figure(records), key="chart_sk_job")
    for rec in records:
        st.markdown(outcome(rec))
    finished = [r for r in records if not r.get("cancelled")]
    if finished:
        summary = view.summary_of(finished)
        judged = view.verdict_lines(summary, live_test_sizes(CONTEXT)["window"])
        st.markdown("**What these runs show.** " + plain(judged["overall"][0]))
        for label, lines in judged.items():
            if label != "overall":
                st.markdown(f"**{label}**\n" + "\n".join(f"- {plain(line)}" for line in lines))


def outcome(rec: dict[str, Any]) -> str:
    """One line per finished run of the task; never a NaN."""
    head = f"**{plain(rec['label'])}**: "
    if rec.get("diverged_at") is not None:
        return head + f"diverged at step {rec['diverged_at']}; its curve stops there and no test was run."
    probes = rec.get("probes") or []
    if not probes:
        return head + "no evaluation point."
    p = probes[-1]
    best = max((v for row in p["bos_other"] for v in (row or []) if v is not None), default=None)
    stopped = " (stopped)" if rec.get("cancelled") else ""
    parts = [f"after {len(rec.get('batch_loss') or [])} steps{stopped}"]
    if best is not None:
        parts.append(f"weight on BOS from non-trigger positions {best:.3f}")
    if p.get("copy_loss") is not None:
        parts.append(f"copy loss {p['copy_loss']:.3f} nats")
    if p.get("bigram_excess") is not None:
        parts.append(f"elsewhere {p['bigram_excess']:.3f} nats from the true bigram rows "
                     "(mean KL divergence)")
    parts.append(f"{rec.get('tokens_per_s', 0):,.0f} tokens/s on {rec.get('device', '?')}")
    return head + ", ".join(parts) + "."


# ---------------------------------------------------------------------------- learned here (Attention sinks)


def learned_controls(where: Any) -> dict[str, Any]:
    where.markdown("#### Learned here")
    fix = widgets.select(P_FIX, "Beside softmax", labels=SHIPPED, where=where,
                         help="The variant shown next to the softmax model (seed 0 of each, as shipped).")
    src = widgets.radio(P_SRC, "Sequence", labels={"seed": "generated from the seed", "text": "typed"},
                        where=where, horizontal=False,
                        help="Generated: a fresh Bigram-Backcopy sequence from the sidebar's seed. Typed: "
                             "your characters after BOS (characters the corpus lacks are dropped).")
    length = text = None
    if src == "seed":
        length = widgets.slider(P_LEN, "Tokens (BOS included)", step=1, where=where)
    else:
        text = widgets.text_area(P_TEXT, "Characters after BOS", where=where, max_chars=MAX_VIEW_TOKENS * 4,
                                 help=f"At most {MAX_VIEW_TOKENS - 1} characters are shown.")
    return {"fix": fix, "src": src, "length": length, "text": text}


def _sequence(c: dict[str, Any], task: BigramBackcopy, seed: int) -> tuple[tuple[int, ...], str | None]:
    """The token ids to show and a note on what was dropped or cut."""
    if c["src"] == "seed":
        ids = task.sample(1, int(c["length"]), make_generator(seed))[0]
        return tuple(int(i) for i in ids), None
    ids, dropped = task.encode(c["text"] or "")
    notes = []
    if dropped:
        notes.append(f"{dropped} character{'s' if dropped != 1 else ''} outside the corpus's vocabulary "
                     f"{'were' if dropped != 1 else 'was'} dropped")
    if len(ids) > MAX_VIEW_TOKENS:
        notes.append(f"{len(ids) - MAX_VIEW_TOKENS} characters past the first {MAX_VIEW_TOKENS - 1} were cut")
        ids = ids[:MAX_VIEW_TOKENS]
    if len(ids) < 2:
        raise AttnInputError("type at least one character the corpus has (plain English letters work).")
    return tuple(int(i) for i in ids), ("; ".join(notes) + ".") if notes else None


def learned_part(ctx: Any) -> None:
    """The shipped softmax model and one fixed variant on one sequence, side by side."""
    c = learned_controls(ctx.controls)
    try:
        task = cached_results.learned_task()
    except AttnInputError as exc:
        st.warning(plain(exc), icon=":material/draft:")
        return
    st.markdown("##### A sink learned here")
    st.markdown(f"Two models trained by this app on the Bigram-Backcopy task of {PAPER} (the Training lab's "
                "tab *A sink forms*): after a trigger (▸) the head must fetch the token just before; "
                "elsewhere it has nothing to read, yet softmax must still spend a weight of 1 on some token. "
                "The variant beside it has another way out: a slot that no value stands behind, weights that "
                "need not sum to 1, or a gate on what the head writes.")
    st.markdown(settings_note(cached_results.sink_claims()[0]))
    if c["src"] == "text" and not c["text"]:
        st.info("Type characters in the sidebar's box (Characters after BOS): both models' maps are drawn on "
                "them.", icon=":material/edit_note:")
        return
    ids, note = _sequence(c, task, ctx.seed)
    if note:
        st.caption(plain(note))
    soft = cached_results.learned_view("softmax", ids, ctx.device)
    fix = cached_results.learned_view(c["fix"], ids, ctx.device)
    names = ("softmax", SHIPPED[c["fix"]])
    roles = soft.value.roles.numpy()
    chars = soft.value.chars
    cols = st.columns(2)
    for col, name, v, key in zip(cols, names, (soft.value, fix.value), ("soft", "fix"), strict=True):
        col.markdown(f"**{name}** (seed 0)")
        col.plotly_chart(view.map_figure(v.weights[0, 0].numpy(), chars, roles, view=f"snk-learned-{key}"),
                         key=f"chart_snk_learned_{key}")
    metrics(names, (soft.value, fix.value), roles)
    series = [(n, v.bos[0, 0].numpy()) for n, v in zip(names, (soft.value, fix.value), strict=True)]
    st.plotly_chart(view.bos_position_figure(chars, roles, series), key="chart_snk_learned_bos")
    widgets.caption_compute(ctx.device_label, soft.seconds + fix.seconds,
                            f"Two 1-layer, 1-head models (width 64) on {len(ids)} tokens; "
                            f"{_task_sentence(task.to_dict())}")
    widgets.csv_download(lambda: view.position_frame(chars, roles, series), "learned_sink_positions.csv",
                         label="Download the weights on BOS (CSV)", key="dl_snk_learned")


def settings_note(claims: SinkClaims) -> str:
    """Where these models were trained, and the verdict over settings (the Training lab's, word for word)."""
    shipped = next((c.setting for c in claims.cells if c.source == "shipped"), None)
    where = f" ({shipped.text()})" if shipped is not None else ""
    return (f"Both are seed 0 of the shipped run{where}: one setting. **Over settings** (the Training lab's "
            f"sink grid, tab *A sink forms*, where each setting is listed): {plain(claims.fixes.headline)}")


def metrics(names: tuple[str, str], views: tuple[Any, Any], roles: np.ndarray) -> None:
    """Mean weight on BOS from non-trigger and trigger positions, and the weight sent nowhere, per model."""
    cols = st.columns(4)
    other, trig = roles == BIGRAM, roles == COPY
    i = 0
    for name, v in zip(names, views, strict=True):
        bos = v.bos[0, 0].double().numpy()
        for mask, where in ((other, "non-trigger"), (trig, "trigger")):
            value = f"{bos[mask].mean():.3f}" if mask.any() else "none here"
            cols[i].metric(f"{name}: on BOS from {where}", value,
                           help=f"Mean weight on BOS over the {int(mask.sum())} {where} positions of this "
                                "sequence.")
            i += 1
    if not other.any():
        return
    if views[1].gates is not None:  # the gated variant: softmax weights, so nothing goes nowhere
        st.caption(_gate_sentence(names[1], views[1], other, trig))
        return
    nowhere = torch.as_tensor(views[1].nowhere[0, 0]).numpy()
    trig_part = (f"and {_f3(nowhere[trig].mean())} of the trigger positions'." if trig.any() else
                 "(this sequence has no trigger position).")
    st.caption(f"{names[1]} sends {_f3(nowhere[other].mean())} of the non-trigger positions' weight "
               "nowhere " + trig_part + " Softmax can send none: its rows sum to 1.")


def _f3(x: float) -> str:
    """Three decimals, never '-0.000' (a row sum of 1 in float32 can leave -1e-8 'nowhere')."""
    return f"{round(float(x), 3) + 0.0:.3f}"


def _gate_sentence(name: str, v: Any, other: np.ndarray, trig: np.ndarray) -> str:
    """The gated variant: its rows sum to 1 like softmax's; its mean gate at non-trigger and trigger
    positions of this sequence."""
    g = v.gates[0, 0].double().numpy()
    out = (f"{name}'s weights are a softmax: its rows sum to 1 too, so no weight goes nowhere; instead "
           f"its output gate scales what the head writes: {_f3(g[other].mean())} at non-trigger positions")
    return out + (f" and {_f3(g[trig].mean())} at trigger positions." if trig.any() else ".")
