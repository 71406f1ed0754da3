"""Kernels page in AppTest: every control changes the run; table and charts equal attncore.kernels."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from attncore.kernels import KernelSpec, probe
from tests.chart_data import decode, figure, no_errors, run_app
from ui.views import kernels as view

PAGE = "pages/5_Kernels.py"
SMALL = {"k_tmin": "32", "k_tmax": "64", "k_mem": "0", "k_heads": "4"}
BY_LABEL = {v: k for k, v in view.LABELS.items()}


NUMBERS = ("time_ms", "x_default", "peak_MiB", "max_err", "masked_rows_err", "nonfinite_rows")
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
    """(T, backend) -> the y value a chart draws for it (full precision)."""
    fig = figure(at, view_name)
    out = {}
    for tr in fig["data"]:
        if tr.get("name") in BY_LABEL:
            for x, y in zip(decode(tr["x"]), decode(tr["y"]), strict=True):
                out[(int(round(float(x))), BY_LABEL[tr["name"]])] = float(y)
    return out


def assert_table_matches_attncore(at, spec: KernelSpec, lengths: list[int]) -> pd.DataFrame:
    """Deterministic columns equal a fresh probe's; time and memory columns are finite and positive."""
    df = table(at)
    assert sorted(set(df["T"])) == lengths
    for T in lengths:
        want = probe(spec, T, "cpu", repeats=1, measure_memory=False)
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


def chart_matches_table(at, df: pd.DataFrame, view_name: str, column: str) -> None:
    """Every number the table shows is a chart point (to the table's three digits), and back."""
    drawn = chart_values(at, view_name)
    shown = {(int(r["T"]), r["backend"]): r[column + "_text"] for _, r in df[df[column].notna()].iterrows()}
    assert set(drawn) == set(shown)
    for k, y in drawn.items():
        assert shown[k] == view.fmt(y), k


def test_default_view_matches_attncore_and_changes_with_every_control() -> None:
    at = run_app(PAGE, **SMALL)
    no_errors(at)
    spec = KernelSpec(heads=4)
    df = assert_table_matches_attncore(at, spec, [32, 64])
    chart_matches_table(at, df, "kernels_time", "time_ms")
    # The CPU build: flash and math run, the CUDA-only kernels are refused with torch's reason.
    at64 = df[df["T"] == 64].set_index("backend")
    assert at64.loc["math", "accepted"] == "yes" and at64.loc["efficient", "accepted"] == "no"
    assert "No viable backend" in at64.loc["cudnn", "reason"]

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
    # dropout: flash refuses with torch's reason, the default falls back to math, a warning says why
    df = table(at).set_index(["T", "backend"])
    assert df.loc[(64, "flash"), "accepted"] == "no" and "dropout" in df.loc[(64, "flash"), "reason"]
    assert df.loc[(64, "default"), "default"] == "→ math"
    assert any("dropout_p=0 at inference" in w.value for w in at.warning)

    at.select_slider(key="k_tmin").set_value(16)
    at.select_slider(key="k_tmax").set_value(32)
    at.run()
    no_errors(at)
    assert_table_matches_attncore(at, KernelSpec(**kw), [16, 32])
    shown = table(at)
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
    assert (ran["peak_MiB"] > 0).all() and np.isfinite(ran["peak_MiB"]).all()


def test_memory_column_and_chart_and_claim_sentences() -> None:
    at = run_app(PAGE, k_tmin="128", k_tmax="512", k_heads="4", k_mem="1")
    no_errors(at)
    df = table(at)
    ran = df[df["accepted"] == "yes"]
    assert (ran["peak_MiB"].notna() & (ran["peak_MiB"] > 0)).all(), ran[["T", "backend", "peak_MiB"]]
    chart_matches_table(at, df, "kernels_memory", "peak_MiB")
    mem = figure(at, "kernels_memory")
    # The guides pass through the stated anchor points with slopes 2 and 1.
    for name, power in (("O(T²) guide", 2), ("O(T) guide", 1)):
        (tr,) = [t for t in mem["data"] if t["name"] == name]
        x, y = decode(tr["x"]).astype(float), decode(tr["y"]).astype(float)
        assert np.allclose(np.diff(np.log(y)) / np.diff(np.log(x)), power, atol=1e-4)
    # Every number in the "measured here" column is the charts' (and so the table's) number.
    src = at.table[0].value.set_index("topic")["measured here"]
    d = df.set_index(["T", "backend"])
    times, peaks = chart_values(at, "kernels_time"), chart_values(at, "kernels_memory")
    for name, slow, fast, t, ratio in re.findall(
            r"([^;]+?) took ([\d.e+-]+) ms, the default dispatch ([\d.e+-]+) ms at T = (\d+): ([\d.e+-]+)×",
            src["speed"]):
        a, b = times[(int(t), BY_LABEL[name.strip()])], times[(int(t), "default")]
        assert slow == view.fmt(a) and fast == view.fmt(b) and ratio == view.fmt(a / b)
    assert re.search(r"took .* ms", src["speed"])
    for label, a in re.findall(r"([^;:]+): peak memory grows as T\^([\d.]+)", src["memory"]):
        name = BY_LABEL[label.strip()]
        ts = sorted(t for t, n in peaks if n == name)
        want = np.polyfit(np.log(np.array(ts, float)), np.log([peaks[(t, name)] for t in ts]), 1)[0]
        assert a == f"{want:.2f}"
    exps = dict((BY_LABEL[lbl.strip()], float(a))
                for lbl, a in re.findall(r"([^;:]+): peak memory grows as T\^([\d.]+)", src["memory"]))
    # The math path holds at least one (B, H, L, S) float32 matrix, the fused default far less;
    # the math path's memory grows faster with T (fixed overheads blur the slopes at small T).
    matrix = 4 * 512 * 512 * 4 / 2**20
    assert d.loc[(512, "math"), "peak_MiB"] >= matrix > 4 * d.loc[(512, "default"), "peak_MiB"]
    assert exps["math"] > exps["default"] + 0.5
    assert src["default backend"] == "the default dispatch ran flash (FLASH_ATTENTION) at every T of this sweep."
    assert (df[df.backend == "default"]["default"] == "→ flash").all()
    # The guide caption names the curves the guides pass through, as the figures' meta says.
    cap = [c.value for c in at.caption if c.value.startswith("Dashed")][0]
    assert "memory: T² through math (MATH)'s first point, T through default dispatch's first point" in cap
    assert mem["layout"]["meta"]["through"] == {"O(T²)": "math", "O(T)": "default"}


def test_budget_skips_materialised_paths_with_a_note_and_work_limit_is_a_plain_error() -> None:
    at = run_app(PAGE, k_tmin="4096", k_tmax="4096", k_heads="8", k_dim="16", k_mem="0")
    no_errors(at)
    df = table(at).set_index("backend")
    for name in ("math", "attncore", "notebook"):
        assert df.loc[name, "accepted"] == "not tried" and "the budget is 1 GiB" in df.loc[name, "reason"]
        # the time cell says how much it would need: the estimate the reason gives, in short
        need = re.search(r"would need about ([\d.]+ GiB)", df.loc[name, "reason"]).group(1)
        assert df.loc[name, "time_ms_text"] == f"skipped: needs ~{float(need.split()[0]):.3g} GiB"
        assert df.loc[name, "max_err_text"] == "skipped" == df.loc[name, "nonfinite_rows_text"]
    assert df.loc["flash", "accepted"] == "yes" and df.loc["flash", "time_ms"] > 0
    src = at.table[0].value.set_index("topic")["measured here"]
    assert src["speed"].startswith("no materialised path ran")

    at = run_app(PAGE, k_tmin="16384", k_tmax="16384", k_heads="32", k_dim="256")
    assert not at.exception
    assert len(at.error) == 1 and "limit" in at.error[0].value and "Lower the largest T" in at.error[0].value


def test_groups_above_heads_fall_back_to_multi_query_with_a_note() -> None:
    at = run_app(PAGE, **{**SMALL, "k_heads": "2", "k_groups": "8"})
    no_errors(at)
    assert any("multi-query" in i.value for i in at.info)
    assert_table_matches_attncore(at, KernelSpec(heads=2, groups=2), [32, 64])


def test_claim_sentences_name_each_default_when_they_differ_and_skip_claims_without_data() -> None:
    from attncore.kernels import BackendResult, SizeResult

    def size(T: int, chosen: str, t_default: float, t_math: float | None) -> SizeResult:
        rows = (BackendResult("flash", T, T, "ran", chosen=chosen == "flash", seconds=t_default),
                BackendResult("math", T, T, "ran" if t_math else "skipped", chosen=chosen == "math",
                              seconds=t_math),
                BackendResult("default", T, T, "ran", seconds=t_default))
        return SizeResult(T, T, rows, chosen, "torch._fused_sdp_choice")

    sizes = [size(64, "math", 0.002, 0.002), size(128, "flash", 0.004, 0.010)]
    df = view.backend_frame(sizes)
    src = view.claims_frame(df, [(s.L, s.default_backend) for s in sizes]).set_index("topic")["measured"]
    assert src["default backend"] == ("the default dispatch ran math (MATH) at T = 64; "
                                      "flash (FLASH_ATTENTION) at T = 128.")
    assert src["speed"] == "math (MATH) took 10 ms, the default dispatch 4 ms at T = 128: 2.5× as long."
    assert src["memory"].startswith("memory was not measured")
    sizes = [size(64, "flash", 0.002, None)]
    src = view.claims_frame(view.backend_frame(sizes), [(64, "flash")]).set_index("topic")["measured"]
    assert src["speed"].startswith("no materialised path ran")


def test_table_cells_say_why_a_number_is_missing() -> None:
    """table_frame: a word (legend) wherever backend_frame has no number; the numbers formatted."""
    from attncore.kernels import BackendResult, SizeResult

    rows = (BackendResult("flash", 64, 64, "ran", chosen=True, seconds=0.002, peak_bytes=3 * 2**20,
                          max_err=1.5e-7, masked_err=0.0, nonfinite_rows=0, rows_compared=64),
            BackendResult("efficient", 64, 64, "refused", reason="No available kernel."),
            BackendResult("math", 64, 64, "skipped", reason="over the budget", estimated_bytes=5 * 2**30),
            BackendResult("cudnn", 64, 64, "out of memory", reason="CUDA out of memory"),
            BackendResult("notebook", 64, 64, "ran", seconds=0.004, max_err=0.0, masked_err=float("nan"),
                          nonfinite_rows=1, rows_compared=64),
            BackendResult("default", 64, 64, "ran", seconds=0.002))
    t = view.table_frame([SizeResult(64, 64, rows, "flash", "torch._fused_sdp_choice")])
    t = t.set_index(t["label"].map(BY_LABEL))
    assert list(t.columns) == view.TABLE_COLUMNS
    assert t.loc["flash", ["time_ms", "x_default", "peak_MiB", "max_err", "masked_rows_err",
                           "nonfinite_rows"]].tolist() == ["2", "1.00", "3", "1.50e-07", "0.00e+00", "0"]
    assert set(t.loc["efficient", list(NUMBERS)]) == {"refused"}
    assert t.loc["math", "time_ms"] == "skipped: needs ~5 GiB"
    assert set(t.loc["math", list(NUMBERS[1:])]) == {"skipped"}
    assert set(t.loc["cudnn", list(NUMBERS)]) == {"out of memory"}
    # NaN output on the fully masked rows is shown as NaN (a measurement), not as a missing value
    assert t.loc["notebook", ["x_default", "masked_rows_err", "nonfinite_rows"]].tolist() == ["2.00", "NaN", "1"]
    # the default row: memory off, not compared with the reference
    assert t.loc["default", ["peak_MiB", "max_err", "masked_rows_err", "nonfinite_rows", "reason"]].tolist() == [
        "not measured", "—", "—", "—", ""]
    assert not t.isna().any().any() and "None" not in t.to_numpy().astype(str)
