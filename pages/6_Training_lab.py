"""Training lab: does the scaling choice matter once a model learns? Shipped experiments, then live runs."""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from attncore.errors import AttnInputError
from attncore.training import RESULT_NAMES, VARIANT_INFO, VARIANTS, build_vocab
from attncore.training.inspect import QKStatistics, init_qk_statistics
from attncore.training.train import split_text
from ui import cached_results, induction, learned, sink_grid, widgets
from ui import corpus as corpora
from ui.job_cost import SIZES, job_tokens, make_configs
from ui.job_panel import job_panel, other_job_caption, run_button, time_estimate
from ui.jobs import JOB_ID_PATTERN, QUEUE, list_runs, session_id
from ui.league import LEAGUE_PARAMS, league_section
from ui.nav import real_models
from ui.page import PageContext, run_page
from ui.state import Param
from ui.text import plain
from ui.views import training as view
from ui.views import training_runs as runs_view
from ui.views import training_tables as tables_view

LR_OPTIONS = ("0.0001", "0.0003", "0.001", "0.003", "0.01", "0.03", "0.1", "0.3", "1", "3", "10")
P_VARS = Param("tr_var", ("standard", "fully_scaled"), options=VARIANTS, multi=True)
P_LRS = Param("tr_lr", ("0.003",), options=LR_OPTIONS, multi=True)
P_SIZE = Param("tr_size", "tiny", options=tuple(SIZES))
P_STEPS = Param("tr_steps", 200, lo=10, hi=1000)
P_CORPUS = Param("tr_corpus", "stdlib", options=("stdlib", "upload", "folder"))
P_FILE = Param("tr_file", "")
P_CMP = Param("tr_cmp", (), multi=True)
P_JOB = Param("tr_job", "", pattern=JOB_ID_PATTERN)  # this page's job: a reloaded page finds it again
# The shipped experiments are tabs, one drawn at a time (issue 34: the first screen is one lesson, not 13
# charts); which one is open is in the URL.
P_TAB = Param("tr_tab", view.TAB_TITLES[RESULT_NAMES[0]],
              options=tuple(view.TAB_TITLES[n] for n in RESULT_NAMES))
PARAMS = (P_TAB, P_VARS, P_LRS, P_SIZE, P_STEPS, P_CORPUS, P_FILE, P_CMP, P_JOB, *learned.TRAINING_PARAMS,
          *sink_grid.GRID_PARAMS, *induction.IND_PARAMS, *LEAGUE_PARAMS)

JOB_KEY = P_JOB.key  # this session's job id
INTRO = ("Most pages draw attention from random inputs; Heatmaps and Attention sinks also show trained "
         "models (" + real_models("the character model trained here") + "). This page is about *training* "
         "itself: a "
         "small character transformer learns with attention in one of several variants. Four experiments "
         "that ship with the app (three on tiny Shakespeare, trained with three seeds each, and one on a "
         "task built from its character statistics) test published claims about training; your own runs "
         "are below.")
POLL_S = 1.0
TITLES = view.TAB_TITLES
# One sentence above each experiment's first chart: the question, and where the claim is published.
QUESTIONS = {
    "lr_sweep": "Does fully scaled attention train *worse* than standard attention, as Graphcore's "
                "\"Almost-scaled dot-product attention\" post reports?",
    "scaling": "Does training without the 1/√d scaling suffer more the larger the head dim, as the \"When "
               "Scaling Matters Most\" table of the \"Scaled Attention: Why √d Matters\" tutorial predicts? "
               "(The comparison itself is the tutorial's scaling-ablation exercise.)",
    "sinks": "Does a character model trained on Shakespeare put spare attention on its first token, do "
             "softmax1, a learned sink logit and a gate change that, and does keeping the first tokens "
             "rescue a sliding window (StreamingLLM)? For a task on which a sink is known to form, see the "
             "tab **4 · A sink forms**.",
}


# ---------------------------------------------------------------------------- cached reads


@st.cache_resource(show_spinner=False)
def _stdlib() -> corpora.Corpus:
    return corpora.stdlib_corpus()


@st.cache_data(max_entries=2, show_spinner=False)
def _folder(key: str, mtime: float) -> corpora.Corpus:
    return corpora.read_folder_file(key)


# ---------------------------------------------------------------------------- shipped experiments


def lead(name: str) -> None:
    st.markdown(QUESTIONS[name])


def claim_and_measure(d: dict[str, Any], measured: str, verdict: list[str]) -> None:
    left, right = st.columns(2)
    with left.container(border=True):
        st.markdown("**The claim**")
        st.markdown(d.get("claim", ""))
    with right.container(border=True):
        st.markdown("**This run measured**")
        st.markdown(measured)
    st.markdown("**Verdict.**\n" + "\n".join(f"- {sentence}" for sentence in verdict))


FULLY_SCALED_LATEX = (r"\text{fully scaled: } o=\sqrt{T/e}\;"
                      r"\mathrm{softmax}\!\left(\tfrac{QK^\top}{\sqrt{E}}+M\right)V\qquad"
                      r"\text{per row: } "
                      r"o_i=\sqrt{n_i/e}\;\mathrm{softmax}\!\left(\tfrac{q_i K^\top}{\sqrt{E}}"
                      r"+M_i\right)V")
FULLY_SCALED_TERMS = ("$e$ is Euler's number (2.718…), $E$ the head dim, $T$ the number of keys (the "
                      "training context), $n_i$ the number of keys query $i$ sees under the causal mask ($i "
                      "+ 1$), $M$ the mask (0 or −∞).")


CELLS_TITLE = "Every setting: seeds, mean and sd, the best validation point (table, every run as CSV)"


def cells_open(name: str) -> str:
    """The session key of experiment ``name``'s table expander (a view, not a setting: not in the URL)."""
    return f"tr_cells_{name}_open"


def cells_table(name: str, d: dict[str, Any]) -> None:
    """Per cell: seeds, mean and sd, best validation point; every run as CSV; in an expander computed and sent
    only when opened (issue 34: its grid is about 1.5 MB of JavaScript that a new tab loaded and ran beside
    Plotly's before it drew the first chart)."""
    box = widgets.lazy_expander(CELLS_TITLE, cells_open(name), icon=":material/table:")
    if box is None:
        return
    with box:
        frame = tables_view.cells_frame(d)
        widgets.table(tables_view.cells_shown(frame))
        note = tables_view.cells_note(frame)
        if note:
            st.caption(note)
        widgets.csv_download(tables_view.runs_frame(d), f"{name}_runs.csv", label="Download every run (CSV)",
                             key=f"dl_tr_{name}")


def lr_sweep_section(d: dict[str, Any], ctx: PageContext) -> None:
    lead("lr_sweep")
    st.latex(FULLY_SCALED_LATEX)
    st.caption(FULLY_SCALED_TERMS)
    left, right = st.columns(2)
    left.plotly_chart(view.lr_sweep_figure(d), key="chart_tr_lr")
    right.plotly_chart(view.lr_sweep_curves(d), key="chart_tr_lr_curves")
    claim_and_measure(d, view.lr_sweep_measured(d), view.lr_sweep_verdict(d))
    cells_table("lr_sweep", d)
    st.caption(tables_view.provenance(d))


@st.cache_data(max_entries=4, show_spinner=False)
def _init_qk(config: dict[str, Any], device: str) -> QKStatistics:
    return init_qk_statistics(config, _stdlib().text, device)


def scaling_section(d: dict[str, Any], ctx: PageContext) -> None:
    lead("scaling")
    st.latex(r"\operatorname{Var}(q\cdot k)=d_{\text{head}}\ \text{(independent entries of variance 1)}:\quad"
             r"\text{standard } \mathrm{softmax}\!\left(\tfrac{QK^\top}{\sqrt{d_{\text{head}}}}\right)V"
             r"\quad\text{vs. unscaled } \mathrm{softmax}(QK^\top)V")
    cfg = dict(d["sizes"]["config"])
    middle = d["sizes"]["d_heads"][len(d["sizes"]["d_heads"]) // 2]
    stats = _init_qk({**cfg, "n_head": cfg["d_model"] // middle}, ctx.device)
    st.markdown(view.init_variance_sentence(stats, cfg["d_model"]))
    st.plotly_chart(view.scaling_figure(d), key="chart_tr_scaling")
    st.caption("Same total width at every head dim (fewer, wider heads as d_head grows). A row counts as "
               "saturated when its largest weight exceeds 0.99, measured on a fixed validation batch. Each "
               "line is the mean over the seeds; the gradient norm (before clipping) is read at the "
               "evaluation points only.")
    claim_and_measure(d, view.scaling_measured(d), view.scaling_verdict(d))
    cells_table("scaling", d)
    st.caption(tables_view.provenance(d))


def sinks_section(d: dict[str, Any], ctx: PageContext) -> None:
    lead("sinks")
    st.latex(r"\alpha_0^{(\ell,h)}=\frac{1}{L}\sum_{i}A^{(\ell,h)}_{i0}\quad"
             r"\text{(mean weight on the first token; a sink head has }\alpha_0>\varepsilon)")
    labels = view.sink_labels(d)
    for start in range(0, len(labels), 2):  # two per row: the α₀ labels stay readable
        for col, label in zip(st.columns(2), labels[start : start + 2], strict=False):
            col.plotly_chart(view.sinks_alpha_figure(d, label), key=f"chart_tr_sinks_{label}")
    st.plotly_chart(view.streaming_figure(d), key="chart_tr_streaming")
    st.caption("StreamingLLM test: token-by-token decoding of a text several times the training context. "
               "'window' keeps only the last keys; 'window + first tokens' also keeps the first ones; losses "
               "are over the tokens beyond the training context. The bars start at zero; the error bars are "
               "±1 standard deviation over the seeds.")
    claim_and_measure(d, view.sinks_measured(d), view.sinks_verdict(d))
    cells_table("sinks", d)
    st.caption(tables_view.provenance(d))


def null_attention_section(d: dict[str, Any], ctx: PageContext) -> None:
    learned.shipped_section(d, ctx)


SECTIONS = {"lr_sweep": lr_sweep_section, "scaling": scaling_section, "sinks": sinks_section,
            "null_attention": null_attention_section}


def shipped(ctx: PageContext) -> Any:
    """The shipped experiments, one tab each, only the open one computed and drawn; returns the "A sink
    forms" tab when it is open (its live runs go there), else None."""
    st.subheader("Shipped experiments")
    tabs = st.tabs([TITLES[n] for n in RESULT_NAMES], key=P_TAB.key, on_change="rerun")
    for tab, name in zip(tabs, RESULT_NAMES, strict=True):
        if not tab.open:
            continue
        with tab:
            try:
                d = cached_results.training_result(name)
            except AttnInputError as exc:
                st.warning(plain(exc), icon=":material/draft:")
                continue
            if not d.get("complete"):
                st.caption(tables_view.provenance(d))
                st.info("This result file was written while the experiment was still running "
                        f"({len(d.get('runs') or [])} runs so far); its curves, tables and verdict appear "
                        "once it is complete.", icon=":material/hourglass_top:")
                continue
            try:
                SECTIONS[name](d, ctx)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                st.warning(plain(f"The result file {name}.json is not in the form this page reads "
                                 f"({type(exc).__name__}: {exc}); remake it with python -m "
                                 f"attncore.training.experiments {name}."), icon=":material/draft:")
    sink_tab = tabs[RESULT_NAMES.index("null_attention")]
    return sink_tab if sink_tab.open else None


# ---------------------------------------------------------------------------- live runs


def corpus_choice(where: Any) -> corpora.Corpus | None:
    """The chosen corpus, or None after a plain message (nothing uploaded yet, a bad file)."""
    kind = widgets.radio(P_CORPUS, "Corpus", where=where, horizontal=False,
                         labels={"stdlib": "Python standard library source (built in)",
                                 "upload": "upload a .txt", "folder": "a .txt from ATTNLAB_CORPUS_DIRS"})
    if kind == "stdlib":
        return _stdlib()
    if kind == "upload":
        up = where.file_uploader("Text file (.txt, at most 5 MB)", type=list(corpora.UPLOADER_TYPES),
                                 key="tr_upload", max_upload_size=corpora.MAX_CORPUS_BYTES // 1024**2)
        if up is None:
            st.info("Upload a .txt file in the sidebar to train on it.", icon=":material/upload_file:")
            return None
        try:
            return corpora.decode_text(up.name, up.getvalue())
        except AttnInputError as exc:
            st.warning(plain(exc), icon=":material/block:")
            return None
    files = corpora.folder_files()
    if not files:
        st.info(f"No .txt files found: set {corpora.CORPUS_DIRS_ENV} to folders (separated by "
                f"'{os.pathsep}') that hold .txt files.",
                icon=":material/folder_off:")
        return None
    if st.session_state.get(P_FILE.key) not in files:
        st.session_state[P_FILE.key] = files[0]
    key = where.selectbox("File", files, key=P_FILE.key,
                          help=f"The .txt files directly inside the folders of {corpora.CORPUS_DIRS_ENV}.")
    dirs = corpora.corpus_dirs()
    try:
        path = dirs[int(key.partition("/")[0])] / key.partition("/")[2]
        return _folder(key, path.stat().st_mtime)
    except (AttnInputError, OSError) as exc:
        why = exc if isinstance(exc, AttnInputError) else f"{key} cannot be read ({exc.strerror})."
        st.warning(plain(why), icon=":material/block:")
        return None


def live(ctx: PageContext) -> corpora.Corpus | None:
    """Live runs of the character model; returns the chosen corpus (None when there is none yet)."""
    st.header("Live runs")
    where = ctx.controls
    where.markdown("#### Live run")
    variants = widgets.multiselect(P_VARS, "Variants", where=where,
                                   labels={v: VARIANT_INFO[v]["label"] for v in VARIANTS},
                                   help="Each variant trains once per learning rate.")
    lrs = widgets.multiselect(P_LRS, "Peak learning rates", where=where,
                              help="AdamW; linear warm-up over the first 10% of steps, then cosine decay.")
    size = widgets.select(P_SIZE, "Model size", where=where,
                          labels={k: f"{k}: {s['n_layer']} layer{'s' if s['n_layer'] > 1 else ''}, "
                                     f"{s['n_head']} heads, d_model {s['d_model']}, context {s['context']}, "
                                     f"batch {s['batch']}" for k, s in SIZES.items()})
    steps = widgets.slider(P_STEPS, "Steps per run", step=10, where=where)
    corpus = corpus_choice(where)
    st.markdown("Train the same small character transformer (pre-LayerNorm, rotary positions, tied "
                "embeddings) with the variants and rates chosen in the sidebar. One training job runs at a "
                "time on this server; a second one waits in a queue. Finished runs are kept in the cache "
                "folder and can be compared below.")
    problem = None
    configs = []
    if not variants or not lrs:
        problem = "Pick at least one variant and one learning rate in the sidebar."
    else:
        try:  # the job's size is checked before its configs are built
            configs = make_configs(variants, [float(x) for x in lrs], size, int(steps), ctx.seed)
        except AttnInputError as exc:
            problem = str(exc)
    if corpus is not None and problem is None:
        try:
            vocab = build_vocab(corpus.text)
            split_text(len(corpus.text), configs[0].context)
        except AttnInputError as exc:
            problem = str(exc)
        else:
            n = len(configs)
            line = (f"{n} run{'s' if n > 1 else ''} × {steps} steps = {job_tokens(configs):,} training "
                    f"tokens on {plain(corpus.name)} ({len(corpus.text):,} characters, {len(vocab)} "
                    f"distinct) on {ctx.device_label}"
                    + (", with one CPU thread so that the rest of the app keeps the other cores." if
                       ctx.device.startswith("cpu") else "."))
            line += time_estimate(QUEUE, configs, corpus.text, ctx.device, timing="a few training steps")
            st.caption(line)
    if problem:
        st.warning(plain(problem), icon=":material/block:")
    other_job_caption(QUEUE, (JOB_KEY, learned.JOB_KEY, induction.JOB_KEY), POLL_S)
    run_button(QUEUE, job_key=JOB_KEY, label="Run", key="tr_run", disabled=bool(problem) or corpus is None,
               submit=lambda: QUEUE.submit(configs, corpus.text, corpus=corpus.name, device=ctx.device,
                                           upload=corpus.uploaded),
               status=job_status, poll_s=POLL_S)
    return corpus


def job_status(job_id: str, polling: bool) -> None:
    """The current job: queue position or progress, live curves, Stop; then what it produced."""
    job_panel(QUEUE, job_id, polling, key="tr", live_chart=_live_chart, show_records=_job_records,
              stopped_keeps="a stopped run keeps its steps")


def _live_chart(snap: dict[str, Any]) -> Any:
    return runs_view.live_figure(snap["batch_loss"], snap["eval_steps"], snap["eval_loss"],
                            title=f"now training: {snap['label']}", total=snap["total"])


def _job_records(records: list[dict[str, Any]]) -> None:
    st.plotly_chart(runs_view.compare_figure(records, view="tr-job", title="this job: validation loss"),
                    key="chart_tr_job")
    for rec in records:
        st.markdown(runs_view.outcome(rec))


def compare(ctx: PageContext) -> None:
    st.header("Compare kept runs")
    runs = list_runs()
    by_id = {r["id"]: r for r in runs}
    chosen = [i for i in st.session_state.get(P_CMP.key, []) if i in by_id][: P_CMP.limit]
    st.session_state[P_CMP.key] = chosen
    ctx.controls.markdown("#### Compare")
    ctx.controls.multiselect("Kept runs", list(by_id), key=P_CMP.key, max_selections=P_CMP.limit,
                             format_func=lambda i: runs_view.record_name(by_id[i]),
                             help="Finished runs from the cache folder, newest first.")
    if not runs:
        st.caption("No kept runs yet. Finished runs are kept on this server and listed here.")
        return
    if not chosen:
        st.caption(runs_listed(runs) + ": choose some under Compare in the sidebar to overlay their curves.")
        return
    recs = [by_id[i] for i in chosen]
    st.plotly_chart(runs_view.compare_figure(recs), key="chart_tr_compare")
    me = session_id()
    keys = (JOB_KEY, learned.JOB_KEY, induction.JOB_KEY)
    own = {j.id for j in QUEUE.owned(me)} | {st.session_state.get(k) for k in keys}
    table = runs_view.runs_table(recs, own_jobs=own)  # another session's upload shows no name
    widgets.table(table)
    widgets.csv_download(table, "training_runs.csv", label="Download the runs (CSV)", key="dl_tr_runs")


def runs_listed(runs: list[dict[str, Any]]) -> str:
    """'3 kept runs', and the runs the server's run folder refused (held in memory) counted apart; no
    folder is named (issue 34: nothing of the server's file system is shown)."""
    held = {r["id"] for r in QUEUE.unsaved()}
    n_held = sum(r["id"] in held for r in runs)
    n_kept = len(runs) - n_held
    parts = [f"{n_kept} kept run{'s' if n_kept != 1 else ''}"] if n_kept else []
    if n_held:
        parts.append(f"{n_held} run{'s' if n_held != 1 else ''} that could not be kept on this server, "
                     "listed until the server restarts")
    return "; ".join(parts)


def body(ctx: PageContext) -> None:
    st.title("Training lab")
    st.markdown(INTRO)
    sink_tab = shipped(ctx)
    league_section(ctx)
    induction.section(ctx)
    corpus = live(ctx)
    compare(ctx)
    if sink_tab is not None:
        with sink_tab:
            learned.live_section(ctx, corpus)


run_page(title="Training lab", icon=":material/model_training:", params=PARAMS, body=body)
