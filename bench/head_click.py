"""What a click on Heatmaps' real-text view costs the server and sends (issue 34 item 5): CPU time per click
and the charts (and their bytes of Plotly JSON) the rerun sends, measured in Streamlit's AppTest.

For each model (the bundled MiniLM encoder and the SmolLM2 decoder) the page opens at ``?rt_src=real``; then
``--clicks`` clicks of each kind are sent as the browser sends them (the chart's selection JSON with the
fragment id of the ``st.fragment`` it is drawn in, so Streamlit reruns that fragment alone, as in
``tests/test_apptest_realtext_select.fragment_click``):

* **head**: a tile of the head grid (``chart_rt_heads``), a new head of the shown layer each time;
* **overview, same layer**: a tile of the layers x heads overview in the shown layer;
* **overview, new layer**: a tile of the overview in another layer;
* **token**: a row of the map (``chart_rt_weights``).

Per kind: the median and the quartiles of the process's CPU time (``time.process_time``: the script thread's
work; the other programs of a shared machine do not count, but they still slow it through its caches) and
of the wall time (``time.perf_counter``), then the charts the rerun drew, their bytes of JSON, and the bytes
of those whose JSON differs from what the browser already has (an unchanged chart is sent by Streamlit as a
reference to the browser's cached message and is not drawn anew).

``--against REF`` runs the same measurement on the committed tree of ``REF`` (``git archive`` into a
temporary folder, same virtual environment), after this tree's, in one run. ``--profile`` prints the
functions that took the most time over the head clicks (cProfile of the script thread).

A benchmark, not an assertion: prints, never fails on a number.

Run:  HF_HUB_OFFLINE=1 python -m bench.head_click [--clicks 15] [--models minilm,smollm2] [--against main]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import statistics
import sys
import threading
import time
from pathlib import Path

from bench.common import json_on_tree

ROOT = Path(__file__).resolve().parents[1]
HEATMAPS = "pages/1_Heatmaps.py"
KINDS = ("head", "overview, same layer", "overview, new layer", "token")


def _element_charts(at) -> dict[str, str]:
    """Every plotly chart the last run drew: its key -> its JSON (spec and config)."""
    return {getattr(e, "key", None) or e.proto.id: e.proto.spec + e.proto.config
            for e in at.get("plotly_chart")}


def _click(at, key: str, customdata: list):
    """A click on a pick point of the chart ``key``, sent with its fragment id as the browser sends it."""
    import streamlit.testing.v1.local_script_runner as local_script_runner
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

    (el,) = [e for e in at.get("plotly_chart") if getattr(e, "key", None) == key]
    ws = at._tree.get_widget_states()
    w = ws.widgets.add()
    w.id = el.proto.id
    w.string_value = json.dumps({"selection": {
        "points": [{"curve_number": 1, "point_number": 0, "point_index": 0, "customdata": customdata}],
        "point_indices": [0], "box": [], "lasso": []}})
    meta = at._session_state._state.get_widget_metadata(el.proto.id)
    fid = None if meta is None else meta.fragment_id
    if fid:
        local_script_runner.RerunData = functools.partial(RerunData, fragment_id_queue=[fid])
    try:
        return at._run(ws)
    finally:
        local_script_runner.RerunData = RerunData


def _profile_threads(prof: cProfile.Profile):
    """Profile every thread started from now on (AppTest runs each script run in a new thread)."""
    def start(*_args):
        prof.enable()  # replaces this hook in the new thread with cProfile's own
    threading.setprofile(start)


def measure(model: str, clicks: int, profile: bool) -> dict:
    sys.path.insert(0, str(Path.cwd()))
    import torch
    from streamlit.testing.v1 import AppTest

    torch.set_num_threads(1)
    at = AppTest.from_file(str(Path.cwd() / "app.py"), default_timeout=600)
    at.switch_page(HEATMAPS)
    at.query_params["rt_src"] = "real"
    if model != "minilm":
        at.query_params["rt_model"] = model
    at.run()
    if at.exception:
        raise SystemExit(f"{model}: {at.exception[0].value}")
    meta = json.loads([e for e in at.get("plotly_chart") if e.key == "chart_rt_overview"][0].proto.spec)
    layers, heads = int(meta["layout"]["meta"]["layers"]), int(meta["layout"]["meta"]["heads"])
    tokens = len(at.selectbox(key="rt_tok").options)
    shown = _element_charts(at)  # what the browser has, by chart key
    out: dict = {"model": model, "layers": layers, "heads": heads, "tokens": tokens, "kinds": {}}
    prof = cProfile.Profile() if profile else None
    state = {"layer": 0, "head": 0, "tok": 1}

    def plan(kind: str, i: int) -> tuple[str, list]:
        if kind == "head":
            state["head"] = (state["head"] + 1) % heads
            return "chart_rt_heads", [state["layer"], state["head"]]
        if kind == "overview, same layer":
            state["head"] = (state["head"] + 1) % heads
            return "chart_rt_overview", [state["layer"], state["head"]]
        if kind == "overview, new layer":
            state["layer"] = (state["layer"] + 1) % layers
            return "chart_rt_overview", [state["layer"], state["head"]]
        state["tok"] = 1 + (state["tok"] % (tokens - 1))
        return "chart_rt_weights", [state["tok"], 0, 0.0]

    for kind in KINDS:
        cpu, wall, sent, new = [], [], [], []
        charts: list[str] = []
        for i in range(clicks + 1):  # the first click warms the caches of its kind
            key, cd = plan(kind, i)
            if not any(getattr(e, "key", None) == key for e in at.get("plotly_chart")):
                at.run()  # AppTest keeps what the last (fragment) run drew: a page run draws the chart again
                shown.update(_element_charts(at))
            if prof is not None and kind == "head" and i > 0:
                _profile_threads(prof)
            c0, w0 = time.process_time(), time.perf_counter()
            at = _click(at, key, cd)
            c1, w1 = time.process_time(), time.perf_counter()
            threading.setprofile(None)
            if at.exception:
                raise SystemExit(f"{model} {kind}: {at.exception[0].value}")
            drawn = _element_charts(at)
            if i == 0:
                shown.update(drawn)
                continue
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
            sent.append(sum(len(v) for v in drawn.values()))
            new.append(sum(len(v) for k, v in drawn.items() if shown.get(k) != v))
            charts = sorted(drawn)
            shown.update(drawn)
        out["kinds"][kind] = {"cpu": cpu, "wall": wall, "sent": sent, "new": new, "charts": charts}
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
        out["profile"] = s.getvalue()
    return out


def _against(ref: str, models: list[str], clicks: int) -> list[dict]:
    """The same measurement on the committed tree of ``ref``, in a subprocess."""
    return json_on_tree(ref, __file__, ["--clicks", str(clicks), "--models", ",".join(models)])


def _q(xs: list[float]) -> str:
    if not xs:
        return "-"
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{q[1] * 1e3:6.0f} ({q[0] * 1e3:.0f}-{q[2] * 1e3:.0f})"


def report(rows: list[dict], label: str) -> None:
    for r in rows:
        print(f"\n[{label}] {r['model']}: {r['layers']} layers x {r['heads']} heads, {r['tokens']} tokens")
        print(f"  {'click':<22} {'CPU ms (IQR)':>18} {'wall ms (IQR)':>18} {'charts':>6} {'KB sent':>8} "
              f"{'KB changed':>10}  charts")
        for kind, k in r["kinds"].items():
            print(f"  {kind:<22} {_q(k['cpu']):>18} {_q(k['wall']):>18} {len(k['charts']):>6} "
                  f"{statistics.median(k['sent']) / 1024:8.1f} {statistics.median(k['new']) / 1024:10.1f}  "
                  + ", ".join(c.removeprefix("chart_") for c in k["charts"]))
        if r.get("profile"):
            print(r["profile"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clicks", type=int, default=15, help="clicks of each kind (after one warm-up click)")
    ap.add_argument("--models", default="minilm,smollm2", help="comma-separated: minilm, smollm2")
    ap.add_argument("--against", default="", help="a git ref to measure after this tree, in the same run")
    ap.add_argument("--profile", action="store_true", help="cProfile the head clicks")
    ap.add_argument("--json", action="store_true", help="print the measurement as JSON (one line)")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    ours = [measure(m, a.clicks, a.profile) for m in models]
    if a.json:
        print(json.dumps(ours))
        return
    report(ours, "this tree")
    if a.against:
        report(_against(a.against, models, a.clicks), a.against)


if __name__ == "__main__":
    main()
