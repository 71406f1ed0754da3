"""Kernels page in AppTest: every control changes the run; table, charts and verdicts equal attncore.kernels
on the page's own device (a CPU dispatches to its flash kernel, a GPU to cuDNN or memory-efficient)."""

from __future__ import annotations

import re
import time

import numpy as np
import pandas as pd
import pytest

from attncore.kernels import (
    GROUP_CHOICES,
    HEAD_CHOICES,
    HEAD_DIM_CHOICES,
    LENGTH_CHOICES,
    RULES,
    SHAPE_PRESETS,
    KernelSpec,
    check_claims,
    fmt_ratio,
    growth_fit,
    probe,
)
from attncore.kernels.claims import FIT_SIZES
from tests.chart_data import decode, figure, no_errors, page_device, run_app
from ui import cached_kernels
from ui.views import kernels as view

PAGE = "pages/5_Kernels.py"
SMALL = {"k_tmin": "32", "k_tmax": "64", "k_mem": "0", "k_heads": "4"}
BY_LABEL = {v: k for k, v in view.LABELS.items()}
DEVICE = page_device()
ON_CPU = DEVICE == "cpu"

NUMBERS = ("time_ms", "x_default", "gflop_s", "peak_MiB", "max_err", "masked_rows_err", "nonfinite_rows")
NO_NUMBER = {"refused", "skipped", "out of memory", "failed", "not measured", "—", "NaN"}


def table(at) -> pd.DataFrame:
    """The table as shown (every cell text; ``<col>_text``) with its number columns parsed back
    (NaN where a cell holds a word instead of a number)."""
    df = at.dataframe[0].value.copy()
    df["backend"] = df["label"].map(BY_LABEL)
    for c in NUMBERS:
        df[c + "_text"] = df[c]
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def chart_values(at, view_name: str) -> dict[tuple[int, str], float]:
    """(T, backend) -> the y value a chart draws for it (full precision), noise points included."""
    fig = figure(at, view_name)
    out = {}
    for tr in fig["data"]:
        label = str(tr.get("name", "")).split(" · ")[0]
        if label in BY_LABEL and tr.get("x") is not None and list(decode(tr["x"])) != [None]:
            for x, y in zip(decode(tr["x"]), decode(tr["y"]), strict=True):
                out[(int(round(float(x))), BY_LABEL[label])] = float(y)
    return out


def assert_table_matches_attncore(at, spec: KernelSpec, lengths: list[int]) -> pd.DataFrame:
    """Deterministic columns equal a fresh probe's on the page's device; times finite and positive."""
    df = table(at)
    assert sorted(set(df["T"])) == lengths
    for T in lengths:
        want = probe(spec, T, DEVICE, repeats=1, measure_memory=False)
        got = df[df["T"] == T].set_index("backend")
        assert list(got.index) == [r.name for r in want.rows]
        for r in want.rows:
            g = got.loc[r.name]
            assert g["accepted"] == {True: "yes", False: "no", None: "not tried"}[r.accepted], r.name
            assert g["reason"] == r.reason, r.name
            assert (g["default"] == "yes") == r.chosen or r.name == "default"
            if r.name == "default":
                assert g["default"] == f"→ {want.default_backend}"
            if r.status == "ran":
                assert g["max_err_text"] == ("—" if r.max_err is None else view.fmt_err(r.max_err)), r.name
                assert np.isfinite(g["time_ms"]) and g["time_ms"] > 0
                assert np.isfinite(g["gflop_s"]) and g["gflop_s"] > 0
            else:
                word = "skipped" if r.status == "skipped" else r.status
                assert g["max_err_text"] == word and g["peak_MiB_text"] == word, r.name
                assert g["time_ms_text"].startswith(word), r.name
    # no cell is empty, None or NaN-as-None: a number or a word of the legend
    for c in NUMBERS:
        for text in df[c + "_text"]:
            assert isinstance(text, str) and text, (c, text)
            assert text in NO_NUMBER or text.startswith("skipped: needs ~") or np.isfinite(float(text)), (c, text)
    return df


def page_sizes(spec: KernelSpec, lengths: list[int], mem: bool):
    """The results the page drew (the same cached entries it read)."""
    if mem or not ON_CPU:
        return list(cached_kernels.kernel_memory(spec, tuple(lengths), DEVICE).value[0])
    return [cached_kernels.kernel_probe(spec, T, DEVICE).value for T in lengths]


def chart_matches_table(at, df: pd.DataFrame, view_name: str, column: str) -> None:
    """Every number the table shows is a chart point (to the table's three digits), and back."""
    drawn = chart_values(at, view_name)
    drawable = df[df[column].notna() & (df[column] > 0)]  # a log axis draws positive values only
    shown = {(int(r["T"]), r["backend"]): r[column + "_text"] for _, r in drawable.iterrows()}
    assert set(drawn) == set(shown)
    for k, y in drawn.items():
        assert shown[k] == view.fmt(y), k


CLAIMS_OPEN = "k_claims_open"  # section 3's expander: its table is computed and sent only when open


def claims_table(at) -> pd.DataFrame:
    """Section 3's table of claims, read after opening its expander (closed, nothing of it is sent: checked)."""
    assert not at.table and not any("How each verdict is computed" in m.value for m in at.markdown)
    at.session_state[CLAIMS_OPEN] = True
    at.run()
    no_errors(at)
    return at.table[0].value.set_index("topic")


def test_default_view_matches_attncore_and_changes_with_every_control() -> None:
    at = run_app(PAGE, **SMALL)
    no_errors(at)
    spec = KernelSpec(heads=4)
    df = assert_table_matches_attncore(at, spec, [32, 64])
    chart_matches_table(at, df, "kernels_time", "time_ms")
    at64 = df[df["T"] == 64].set_index("backend")
    want = probe(spec, 64, DEVICE, repeats=1, measure_memory=False)
    if ON_CPU:  # the CPU build: flash and math run, the CUDA-only kernels are refused with torch's reason
        assert at64.loc["math", "accepted"] == "yes" and at64.loc["efficient", "accepted"] == "no"
        assert "No viable backend" in at64.loc["cudnn", "reason"]
    assert at64.loc["default", "default"] == f"→ {want.default_backend}"

    changes = [
        ("select_slider", "k_heads", 8, {"heads": 8}),
        ("select_slider", "k_groups", 4, {"groups": 4}),
        ("select_slider", "k_dim", 32, {"head_dim": 32}),
        ("selectbox", "k_mask", "boolean", {"mask": "boolean"}),
        ("slider", "k_drop", 0.1, {"dropout": 0.1}),
    ]
    kw: dict = {"heads": 4}
    for kind, key, value, field in changes:
        getattr(at, kind)(key=key).set_value(value)
        at.run()
        no_errors(at)
        kw.update(field)
        assert_table_matches_attncore(at, KernelSpec(**kw), [32, 64])
        if field == {"mask": "boolean"}:  # query row 3 sees no key: NaN in the notebook version only
            d = table(at)
            assert (d[d.backend == "notebook"]["nonfinite_rows"] == 1).all()
            assert (d[(d.backend != "notebook") & (d.accepted == "yes")]["nonfinite_rows"] == 0).all()
    # dropout: the default dispatch is whatever torch picks on this device, with torch's reasons
    df = table(at).set_index(["T", "backend"])
    want = probe(KernelSpec(**kw), 64, DEVICE, repeats=1, measure_memory=False)
    assert df.loc[(64, "default"), "default"] == f"→ {want.default_backend}"
    if ON_CPU:  # the CPU flash kernel refuses dropout and the dispatch falls back to math
        assert df.loc[(64, "flash"), "accepted"] == "no" and "dropout" in df.loc[(64, "flash"), "reason"]
        assert want.default_backend == "math"
    assert any("dropout_p=0 at inference" in w.value for w in at.warning)

    at.select_slider(key="k_tmin").set_value(16)
    at.select_slider(key="k_tmax").set_value(32)
    at.run()
    no_errors(at)
    assert_table_matches_attncore(at, KernelSpec(**kw), [16, 32])
    shown = table(at)
    if ON_CPU:  # memory off: not measured (on CUDA it is read with the timings)
        assert shown["peak_MiB"].isna().all()
        assert (shown[shown.accepted == "yes"]["peak_MiB_text"] == "not measured").all()
    assert (shown[shown.accepted == "no"]["peak_MiB_text"] == "refused").all()
    # dropout: no error is given for a random output; the cell says so with a dash, never None
    assert (shown[shown.accepted == "yes"]["max_err_text"] == "—").all()
    at.toggle(key="k_mem").set_value(True)
    at.run()
    no_errors(at)
    df = assert_table_matches_attncore(at, KernelSpec(**kw), [16, 32])
    ran = df[df["accepted"] == "yes"]
    assert (ran["peak_MiB"] >= 0).all() and np.isfinite(ran["peak_MiB"]).all()


def test_time_chart_medians_spread_noise_flags_and_fitted_guides() -> None:
    """Times are the medians of interleaved rounds with their interval as error bars; a time not
    larger than a smaller size's is drawn hollow and off the line; the guides are fitted over the
    largest sizes of the default dispatch (what the caption says)."""
    at = run_app(PAGE, k_tmin="64", k_tmax="512", k_heads="4", k_mem="0")
    no_errors(at)
    spec = KernelSpec(heads=4)
    sizes = page_sizes(spec, [64, 128, 256, 512], mem=False)
    fig = figure(at, "kernels_time")
    frame = view.backend_frame(sizes)
    # the backends that ran at every size (on a GPU in float32 flash refuses: it takes half precision only)
    names = [n for n in ("flash", "math", "default") if all(s.row(n).status == "ran" for s in sizes)]
    assert {"math", "default"} <= set(names) and ("flash" in names or not ON_CPU)
    for name in names:
        sub = frame[frame.backend == name].sort_values("T")
        med = {int(t): m for t, m in zip(sub["T"], sub["time_ms"], strict=True)}
        for s in sizes:
            t = s.row(name).time
            assert med[s.L] == pytest.approx(t.median * 1e3) and t.n >= 3
        traces = {tr["name"]: tr for tr in fig["data"] if str(tr.get("name", "")).startswith(view.LABELS[name])}
        line = traces.get(view.LABELS[name])
        noise = traces.get(f"{view.LABELS[name]} · noise")
        flagged = set(sub[sub.noise_of.notna()]["T"].astype(int))
        assert flagged == ({int(x) for x in decode(noise["x"])} if noise else set())
        if line is not None:
            xs = [int(round(x)) for x in decode(line["x"])]
            assert set(xs).isdisjoint(flagged)
            plus, minus = decode(line["error_y"]["array"]), decode(line["error_y"]["arrayminus"])
            for x, y, p, m in zip(xs, decode(line["y"]), plus, minus, strict=True):
                t = next(s for s in sizes if x == s.L).row(name).time
                assert y + p == pytest.approx(t.hi * 1e3, rel=1e-5) and y - m == pytest.approx(t.lo * 1e3, rel=1e-5)
    # the guides: fitted with fixed slopes over the default's largest sizes, noise left out
    meta = fig["layout"]["meta"]["fits"]
    d = frame[frame.backend == "default"].sort_values("T")
    ok = d[d.noise_of.isna()]
    cap = next(c.value for c in at.caption if c.value.startswith("Dashed"))
    assert "hollow" in cap
    for key, power in (("O(T²)", 2), ("O(T)", 1)):
        fit = growth_fit(ok["T"].tolist(), ok["time_ms"].tolist(), slope=power, among=d["T"].tolist())
        assert meta[key]["curve"] == "default"
        guides = [t for t in fig["data"] if t["name"] == f"{key} guide"]
        if fit is None:  # every one of the largest sizes is noise: no line, and the caption says so
            assert meta[key]["ts"] == [] and not guides
            assert f"no {'T²' if power == 2 else 'T'} line, default dispatch's largest sizes are all noise" in cap
            continue
        assert meta[key]["ts"] == [int(t) for t in fit.ts]
        assert set(meta[key]["ts"]) <= set(sorted(d["T"])[-FIT_SIZES:])
        x, y = decode(guides[0]["x"]).astype(float), decode(guides[0]["y"]).astype(float)
        assert np.allclose(y, fit.at(x), rtol=1e-5)
        assert f"{'T²' if power == 2 else 'T'} fitted to default dispatch at T = {meta[key]['ts'][0]}" in cap


def test_memory_chart_table_and_verdicts_equal_the_rules_on_the_page_results() -> None:
    at = run_app(PAGE, k_tmin="128", k_tmax="512", k_heads="4", k_mem="1")
    no_errors(at)
    spec, lengths = KernelSpec(heads=4), [128, 256, 512]
    df = table(at)
    ran = df[df["accepted"] == "yes"]
    assert (ran["peak_MiB"].notna() & (ran["peak_MiB"] >= 0)).all(), ran[["T", "backend", "peak_MiB"]]
    if ON_CPU:  # a fresh process's resident set always grows by something
        assert (ran["peak_MiB"] > 0).all(), ran[["T", "backend", "peak_MiB"]]
    chart_matches_table(at, df, "kernels_memory", "peak_MiB")
    mem = figure(at, "kernels_memory")
    assert mem["layout"]["meta"]["fits"]["O(T²)"]["curve"] == "math"
    assert mem["layout"]["meta"]["fits"]["O(T)"]["curve"] == "default"
    for name, power in (("O(T²) guide", 2), ("O(T) guide", 1)):
        (tr,) = [t for t in mem["data"] if t["name"] == name]
        x, y = decode(tr["x"]).astype(float), decode(tr["y"]).astype(float)
        assert np.allclose(np.diff(np.log(y)) / np.diff(np.log(x)), power, atol=1e-4)
    # The math path holds its scores and weights, the fused default far less (key formula: 2·B·H·L·S)
    d = df.set_index(["T", "backend"])
    matrix = 4 * 512 * 512 * 4 / 2**20
    if ON_CPU:
        assert d.loc[(512, "math"), "peak_MiB"] >= 2 * matrix > 8 * d.loc[(512, "default"), "peak_MiB"]
    # The verdicts: the rules of attncore.kernels.claims on exactly the results the page drew
    sizes = page_sizes(spec, lengths, mem=True)
    shown = claims_table(at)
    for c in check_claims(sizes, spec, DEVICE):
        row = shown.loc[c.topic]
        assert row["verdict"] == c.verdict and row["measured here"] == c.measured
        assert row["caveat"] == (c.caveat or "—")
    if ON_CPU:
        assert "blocked CPU kernel" in shown.loc["default backend", "caveat"]
        assert shown.loc["default backend", "verdict"] == "holds with a caveat"
        assert shown.loc["default backend", "measured here"].startswith(
            "the default dispatch ran flash (FLASH_ATTENTION) at every T of this sweep")
    # ratios carry two significant figures
    for ratio in re.findall(r"([\d.]+)× as long", shown.loc["speed", "measured here"]):
        assert ratio == fmt_ratio(float(ratio))
    for text in table(at)["x_default_text"]:
        if text not in NO_NUMBER and not text.startswith("skipped"):
            assert text == fmt_ratio(float(text))
    rules = [m.value for m in at.markdown if m.value.startswith("**How each verdict is computed**")]
    assert len(rules) == 1 and all(f"**{topic}**: {rule}" in rules[0] for topic, rule in RULES.items())


def test_budget_skips_materialised_paths_with_a_note_and_work_limit_is_a_plain_error() -> None:
    T = 4096 if ON_CPU else 65536  # the materialised matrices exceed the device's budget
    at = run_app(PAGE, k_tmin=str(T), k_tmax=str(T), k_heads="8", k_dim="16", k_mem="0", timeout=300)
    no_errors(at)
    df = table(at).set_index("backend")
    for name in ("math", "attncore", "notebook"):
        assert df.loc[name, "accepted"] == "not tried"
        assert re.search(r"the budget is [\d.]+ GiB", df.loc[name, "reason"]), df.loc[name, "reason"]
        # the time cell says how much it would need: the estimate the reason gives, in short
        need = re.search(r"would need about ([\d.]+ [GT]iB)", df.loc[name, "reason"]).group(1)
        assert df.loc[name, "time_ms_text"] == f"skipped: needs ~{float(need.split()[0]):.3g} {need.split()[1]}"
        assert df.loc[name, "max_err_text"] == "skipped" == df.loc[name, "nonfinite_rows_text"]
    assert df.loc["default", "accepted"] == "yes" and df.loc["default", "time_ms"] > 0
    src = claims_table(at)
    assert src.loc["speed", "verdict"] == "not testable here"
    assert src.loc["speed", "measured here"].startswith("no materialised path ran")

    at = run_app(PAGE, k_tmin="65536", k_tmax="65536", k_heads="64", k_dim="256")
    assert not at.exception
    assert len(at.error) == 1 and "limit" in at.error[0].value and "Lower the largest T" in at.error[0].value


def test_groups_above_heads_fall_back_to_multi_query_with_a_note() -> None:
    at = run_app(PAGE, **{**SMALL, "k_heads": "2", "k_groups": "8"})
    no_errors(at)
    assert any("multi-query" in i.value for i in at.info)
    assert_table_matches_attncore(at, KernelSpec(heads=2, groups=2), [32, 64])


def test_32_heads_in_32_groups_runs_as_the_controls_offer_it() -> None:
    """Issue 26: /Kernels?k_heads=32&k_groups=32 said "groups must be between 1 and 16; got 32."
    while the page offered 32 for both."""
    at = run_app(PAGE, **{**SMALL, "k_heads": "32", "k_groups": "32"})
    no_errors(at)
    assert at.select_slider(key="k_groups").value == 32
    assert_table_matches_attncore(at, KernelSpec(heads=32, groups=32), [32, 64])


def control_limits() -> list[tuple[str, str, bool]]:
    """(URL key, value, at the limit) for every control: its largest and smallest offered value,
    and values beyond them (the page must correct those with a notice, never fail)."""
    cases = []
    for key, options in (("k_heads", HEAD_CHOICES), ("k_groups", GROUP_CHOICES), ("k_dim", HEAD_DIM_CHOICES),
                         ("k_tmin", LENGTH_CHOICES), ("k_tmax", LENGTH_CHOICES)):
        cases += [(key, str(options[0]), True), (key, str(options[-1]), True),
                  (key, str(options[-1] * 2), False), (key, "0", False), (key, "-1", False)]
    cases += [("k_drop", "0.5", True), ("k_drop", "0", True), ("k_drop", "0.51", False), ("k_drop", "1", False),
              ("k_drop", "nan", False), ("k_mask", "float", True), ("k_mask", "diagonal", False),
              ("k_mem", "2", False)]
    return cases


@pytest.mark.parametrize(("key", "value", "at_limit"), control_limits(),
                         ids=[f"{k}={v}" for k, v, _ in control_limits()])
def test_url_at_each_controls_limits_and_beyond(key: str, value: str, at_limit: bool) -> None:
    """URL fuzz of the Kernels page at each control's limits and above: a value the control offers
    runs (or meets the work limit with a plain message), a value beyond it is corrected with a
    notice; never an exception, never a validation error for an offered value."""
    query = {**SMALL, "k_heads": "4", key: value}
    if key == "k_groups":
        query["k_heads"] = "64"  # so every offered group count divides the heads
    at = run_app(PAGE, **query)
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert not any("must be between" in e or "multiple of" in e for e in errors), errors
    notices = " ".join(w.value for w in at.warning) + " ".join(i.value for i in at.info)
    if at_limit:
        assert all("Lower the largest T" in e for e in errors), errors
        assert f"{key}=" not in notices
    else:
        assert not errors and key in notices, (errors, notices)


def test_page_text_states_the_corrected_formulas_and_whole_sentences() -> None:
    """Issue 24 §3.7: the online-softmax update ends with o_i <- o_i / l_i; the materialised path keeps
    two B·H·L·S matrices (scores and weights); the table's caption is whole sentences (it once read
    "…a spread sample beyond), Materialised paths…")."""
    at = run_app(PAGE, **SMALL)
    no_errors(at)
    latex = [el.value for el in at.get("latex")] if at.get("latex") else [m.value for m in at.latex]
    assert not any(r"o_i \leftarrow" in x for x in latex), latex  # in an expander sent when opened (issue 34)
    at.session_state["k_more_open"] = True
    at.run()
    no_errors(at)
    latex = [m.value for m in at.latex]
    assert any(r"o_i \leftarrow o_i / \ell_i" in x for x in latex), latex
    assert any(r"2\,B\,H\,L\,S" in x and "scores and weights" in x for x in latex), latex
    cap = next(c.value for c in at.caption if c.value.startswith("Time: median"))
    assert "beyond), Materialised" not in cap and not re.search(r", [A-Z][a-z]", cap), cap
    for sentence in re.split(r"(?<=\.) ", cap):
        assert (sentence[:1].isupper() or sentence.startswith("× default")) and sentence.endswith("."), sentence
    assert "Both do the same 4·B·H·L·S·E flops" in at.markdown[1].value or any(
        "Both do the same 4·B·H·L·S·E flops" in m.value for m in at.markdown)
    causal = run_app(PAGE, **{**SMALL, "k_mask": "causal"})
    no_errors(causal)
    text = " ".join(m.value for m in causal.markdown)
    assert "Both do the same" not in text
    if ON_CPU:  # torch's CPU flash kernel skips whole 512-key blocks only: at T = 32, 64 it does all the work
        assert "skips only whole key blocks of 512" in text and "100% at T = 32 and 64" in text
    else:
        assert "stop each block of queries at the diagonal and do about half of them" in text


def test_claim_sentences_name_each_default_when_they_differ_and_skip_claims_without_data() -> None:
    from attncore.kernels import BackendResult, SizeResult

    def size(T: int, chosen: str, t_default: float, t_math: float | None) -> SizeResult:
        rows = (BackendResult("flash", T, T, "ran", chosen=chosen == "flash", seconds=t_default),
                BackendResult("math", T, T, "ran" if t_math else "skipped", chosen=chosen == "math",
                              seconds=t_math),
                BackendResult("default", T, T, "ran", seconds=t_default))
        return SizeResult(T, T, rows, chosen, "torch._fused_sdp_choice")

    sizes = [size(64, "math", 0.002, 0.002), size(128, "flash", 0.004, 0.010)]
    src = view.claims_frame(check_claims(sizes, KernelSpec(), "cpu")).set_index("topic")
    assert src.loc["default backend", "measured"].startswith(
        "the default dispatch ran math (MATH) at T = 64; flash (FLASH_ATTENTION) at T = 128")
    assert src.loc["speed", "measured"].startswith("at T = 128 math (MATH) took 10 ms (one round), "
                                                   "the default dispatch (flash (FLASH_ATTENTION)) 4 ms")
    assert "2.5× as long" in src.loc["speed", "measured"] and src.loc["speed", "verdict"] == "not testable here"
    assert src.loc["memory", "measured"].startswith("memory was not measured")
    sizes = [size(64, "flash", 0.002, None)]
    src = view.claims_frame(check_claims(sizes, KernelSpec(), "cpu")).set_index("topic")
    assert src.loc["speed", "measured"].startswith("no materialised path ran")


def test_table_cells_say_why_a_number_is_missing() -> None:
    """table_frame: a word (legend) wherever backend_frame has no number; the numbers formatted."""
    from attncore.kernels import BackendResult, SizeResult

    rows = (BackendResult("flash", 64, 64, "ran", chosen=True, seconds=0.002, times=(0.002, 0.0021, 0.0019),
                          peak_bytes=3 * 2**20, max_err=1.5e-7, masked_err=0.0, nonfinite_rows=0,
                          rows_compared=64, flops=4e9),
            BackendResult("efficient", 64, 64, "refused", reason="No available kernel."),
            BackendResult("math", 64, 64, "skipped", reason="over the budget", estimated_bytes=5 * 2**30),
            BackendResult("cudnn", 64, 64, "out of memory", reason="CUDA out of memory"),
            BackendResult("notebook", 64, 64, "ran", seconds=0.004, times=(0.004, 0.0042, 0.0038), max_err=0.0,
                          masked_err=float("nan"), nonfinite_rows=1, rows_compared=64),
            BackendResult("default", 64, 64, "ran", seconds=0.002, times=(0.002, 0.0021, 0.0019)))
    t = view.table_frame([SizeResult(64, 64, rows, "flash", "torch._fused_sdp_choice")])
    t = t.set_index(t["label"].map(BY_LABEL))
    assert list(t.columns) == view.TABLE_COLUMNS
    assert t.loc["flash", ["time_ms", "time_range", "x_default", "x_range", "gflop_s", "peak_MiB", "max_err",
                           "masked_rows_err", "nonfinite_rows"]].tolist() == [
        "2", "1.9–2.1", "1.0", "—", "2000", "3", "1.50e-07", "0.00e+00", "0"]
    assert set(t.loc["efficient", list(NUMBERS)]) == {"refused"}
    assert t.loc["math", "time_ms"] == "skipped: needs ~5 GiB"
    assert set(t.loc["math", list(NUMBERS[1:])]) == {"skipped"}
    assert set(t.loc["cudnn", list(NUMBERS)]) == {"out of memory"}
    # NaN output on the fully masked rows is shown as NaN (a measurement), not as a missing value
    assert t.loc["notebook", ["x_default", "masked_rows_err", "nonfinite_rows"]].tolist() == ["2.0", "NaN", "1"]
    assert t.loc["notebook", "gflop_s"] == "—"  # no flop count: no rate
    # the default row: memory off, not compared with the reference
    assert t.loc["default", ["peak_MiB", "max_err", "masked_rows_err", "nonfinite_rows", "reason"]].tolist() == [
        "not measured", "—", "—", "—", ""]
    assert not t.isna().any().any() and "None" not in t.to_numpy().astype(str)
    # a time not larger than at a smaller T is flagged in its range cell
    rows2 = tuple(r if r.name != "flash" else BackendResult(
        "flash", 128, 128, "ran", chosen=True, seconds=0.0015, times=(0.0015, 0.0016, 0.0014)) for r in rows)
    rows2 = tuple(BackendResult(**{**r.__dict__, "L": 128, "S": 128}) if r.name != "flash" else r for r in rows2)
    t2 = view.table_frame([SizeResult(64, 64, rows, "flash", "x"), SizeResult(128, 128, rows2, "flash", "x")])
    flash128 = t2[(t2["T"] == 128) & (t2["label"] == view.LABELS["flash"])].iloc[0]
    assert flash128["time_range"] == "1.4–1.6 · noise (≤ T = 64)"


def test_range_columns_help_says_what_the_cells_are_the_medians_interval() -> None:
    """With 9 rounds the range cells are the 2nd fastest and 2nd slowest round (the median's 96%
    interval), not the min–max the column help promised ("the rounds' fastest and slowest")."""
    import json

    at = run_app(PAGE, **SMALL)
    no_errors(at)
    helps = {k: v.get("help", "") for k, v in json.loads(at.dataframe[0].proto.columns).items()}
    assert helps["time_range"] == view.TIME_RANGE_HELP and helps["x_range"] == view.X_RANGE_HELP
    assert "fastest and slowest" not in helps["time_range"].split(":")[0]
    spec = KernelSpec(heads=4)
    shown = table(at).set_index(["T", "backend"])
    sizes = [cached_kernels.kernel_probe(spec, T, DEVICE).value for T in (32, 64)]  # the page's own run (cached)
    nine = 0
    for s in sizes:
        for r in s.rows:
            if r.status != "ran" or len(r.times) < 2:
                continue
            ts = sorted(r.times)
            k = 2 if len(ts) >= 9 else 1  # own rule: the largest k whose interval holds the median >= 95%
            want = f"{view.fmt(ts[k - 1] * 1e3)}–{view.fmt(ts[-k] * 1e3)}"
            assert shown.loc[(s.L, r.name), "time_range"].split(" · ")[0] == want, (s.L, r.name)
            nine += len(ts) == 9
    if nine:
        assert "2nd fastest and the 2nd slowest" in helps["time_range"]


def test_the_smollm2_preset_runs_the_real_models_attention_shape() -> None:
    """k_preset=smollm2: 9 query heads in 3 key/value groups, head dim 64, causal, whatever the sliders
    say; the table equals attncore on that spec, and the sidebar names the shape."""
    at = run_app(PAGE, **{**SMALL, "k_preset": "smollm2", "k_heads": "2", "k_dim": "16"})
    no_errors(at)
    p = SHAPE_PRESETS["smollm2"]
    assert (p.heads, p.kv_heads, p.groups, p.head_dim, p.mask) == (9, 3, 3, 64, "causal")
    assert_table_matches_attncore(at, KernelSpec(heads=9, groups=3, head_dim=64, mask="causal"), [32, 64])
    assert any("9 query heads in 3 key/value groups of 3, head dim 64, causal mask" in c.value
               for c in at.sidebar.caption)
    assert not [s for s in at.select_slider if s.key in ("k_heads", "k_groups", "k_dim")]
    at.selectbox(key="k_preset").set_value("custom")
    at.run()
    no_errors(at)
    assert_table_matches_attncore(at, KernelSpec(heads=2, head_dim=16), [32, 64])


def test_a_new_head_dim_draws_each_size_as_it_is_timed_and_a_seen_one_times_nothing(monkeypatch) -> None:
    """Issue 34 item 5 (the head-dim slider): a setting not measured before draws the time chart with the
    sizes timed so far after each one (marked partial, its points the very numbers the finished chart
    shows); the finished chart equals attncore's probe at the new head dim; a move back to a head dim
    measured before is served from the cache per (shape, T, device): no probe runs and nothing is drawn
    partial. Three sizes and a seed of its own, so no other test's run is in the cache."""
    import attncore.kernels as kernels_pkg

    probed: list[tuple[int, int]] = []
    real_probe = kernels_pkg.probe

    def counting_probe(spec, L, device, **kw):
        probed.append((spec.head_dim, L))
        return real_probe(spec, L, device, **kw)

    partials: list[dict[tuple[int, str], float]] = []
    events: list[str] = []
    real_mark = view.mark_partial
    real_sleep = time.sleep

    def recording_sleep(seconds):  # the page's pause after a partial chart, told apart by its value
        if seconds == 0.0123:
            events.append("pause")
            seconds = 0
        real_sleep(seconds)

    def recording_mark(fig):
        out = real_mark(fig)
        drawn = {}
        for tr in out.to_plotly_json()["data"]:
            label = str(tr.get("name", "")).split(" · ")[0]
            if label in BY_LABEL and tr.get("x") is not None:
                for x, y in zip(decode(tr["x"]), decode(tr["y"]), strict=True):
                    drawn[(int(round(float(x))), BY_LABEL[label])] = float(y)
        partials.append(drawn)
        events.append("partial")
        return out

    monkeypatch.setattr(kernels_pkg, "probe", counting_probe)
    monkeypatch.setattr(view, "mark_partial", recording_mark)
    monkeypatch.setattr(cached_kernels, "KERNEL_PARTIAL_AFTER_S", 0.0)  # every size counts as measured now
    monkeypatch.setattr(cached_kernels, "KERNEL_DRAW_PAUSE_S", 0.0123)
    monkeypatch.setattr(time, "sleep", recording_sleep)
    query = {**SMALL, "k_tmin": "16", "k_tmax": "64", "k_dim": "32", "seed": "7341"}
    at = run_app(PAGE, **query)
    no_errors(at)
    assert probed == [(32, 16), (32, 32), (32, 64)]
    assert [sorted({t for t, _ in p}) for p in partials] == [[16], [16, 32]]
    assert events == ["partial", "pause", "partial", "pause"]  # the browser draws before the next size
    final = chart_values(at, "kernels_time")
    assert not figure(at, "kernels_time")["layout"]["meta"].get("partial")
    for p in partials:  # a partial chart draws the same measurement the finished one shows
        assert p == {k: v for k, v in final.items() if k[0] in {t for t, _ in p}}

    probed.clear()
    partials.clear()
    events.clear()
    at.select_slider(key="k_dim").set_value(16)
    at.run()
    no_errors(at)
    assert probed == [(16, 16), (16, 32), (16, 64)]
    assert [sorted({t for t, _ in p}) for p in partials] == [[16], [16, 32]]
    assert events == ["partial", "pause", "partial", "pause"]
    assert_table_matches_attncore(at, KernelSpec(heads=4, head_dim=16, seed=7341), [16, 32, 64])
    chart_matches_table(at, table(at), "kernels_time", "time_ms")

    monkeypatch.setattr(cached_kernels, "KERNEL_PARTIAL_AFTER_S", 0.05)  # the page's own rule again
    probed.clear()
    partials.clear()
    events.clear()
    at.select_slider(key="k_dim").set_value(32)
    at.run()
    no_errors(at)
    assert probed == [] and partials == [] and events == []  # from the cache: drawn once, no pause
    assert chart_values(at, "kernels_time") == final
