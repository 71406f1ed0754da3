"""AppTest: the Tour. Every step opened from its own URL, Previous / Next, every step's control moved, the
chart data against attncore, each lesson sentence against the numbers attncore gives, and the
"Open this in full" link opening its page in the step's state."""

from __future__ import annotations

import math
from urllib.parse import parse_qsl

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attncore import theory
from attncore.dot_products import dot_histograms
from attncore.evidence import CLAIMS, SOURCES, Setting, evaluate, judge
from attncore.explore import SyntheticSpec, synthetic_stages
from attncore.gradients import jacobian_vs_scale, saturation_crossing, saturation_curve
from attncore.kernels.cost import cpu_flash_bytes, materialised_bytes
from attncore.overflow import overflow_sweep
from attncore.sinks import SinkSpec, normaliser_zoo, zoo_theory
from attncore.sweeps import SweepSpec, run_sweep
from attncore.training.bbm import SINK_THRESHOLD
from attncore.training.induction import load_runs, summarize
from attncore.training.io import load_result
from attncore.training.sink_grid import load_grid
from attncore.training.sink_verdicts import sink_claims
from tests.chart_data import decode, figures, no_errors, page_device, run_app
from tests.plot_area import assert_plot_areas
from ui import tour
from ui.views import induction as ind_view
from ui.views import learned_sinks as ls_view
from ui.views import tour as view

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAGE = "pages/0_Tour.py"
KEYS = [s.key for s in tour.STEPS]


def run(**query: str) -> AppTest:
    return run_app(PAGE, timeout=900, **query)


def step_number(key: str) -> int:
    return KEYS.index(key) + 1


def views(at: AppTest) -> list[str]:
    return [(f.get("layout", {}).get("meta") or {}).get("view") for f in figures(at)]


def only_figure(at: AppTest) -> dict:
    figs = figures(at)
    assert len(figs) == 1, views(at)
    return figs[0]


def lesson(at: AppTest) -> str:
    """The lesson sentence: the markdown right under the navigation row."""
    texts = [m.value for m in at.markdown]
    assert texts, "no markdown on the page"
    return texts[-1]


def named(fig: dict, name: str) -> dict:
    """The first line trace called ``name`` (bands, drawn as filled outlines, left out)."""
    found = [t for t in fig["data"] if t.get("name") == name and t.get("fill") is None]
    assert found, (name, [t.get("name") for t in fig["data"]])
    return found[0]


def close(a, b, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------ per step: chart and lesson

def check_stages(at: AppTest, d_k: int = 64) -> None:
    fig = only_figure(at)
    assert views(at) == ["stages"]
    spec = SyntheticSpec(L=12, S=12, d_k=d_k, heads=1, kv_heads=1)
    st = synthetic_stages(spec, page_device())
    raw, scaled = st.raw[0].double().cpu().numpy(), st.scaled[0].double().cpu().numpy()
    close(decode(fig["data"][0]["z"]), raw, rtol=1e-6, atol=1e-5)
    close(decode(fig["data"][3]["z"]), st.weights[0].cpu().numpy(), rtol=1e-6, atol=1e-6)
    top = float(st.weights[0].double().max(dim=-1).values.mean())
    assert lesson(at) == view.stages_lesson(d_k, float(raw.std()), float(scaled.std()), st.scale, top)
    assert abs(st.scale - 1 / math.sqrt(d_k)) < 1e-12


def check_histograms(at: AppTest, d: int = 256) -> None:
    fig = only_figure(at)
    h = dot_histograms(d, 20_000, 60, seed=0, device=page_device())
    bars = [t for t in fig["data"] if t.get("type") == "bar"]
    close(decode(bars[0]["y"]), h.density_raw, rtol=1e-5)
    close(decode(bars[1]["y"]), h.density_scaled, rtol=1e-5)
    assert lesson(at) == view.histogram_lesson(d, 20_000, h.std_raw, h.se_raw, h.std_scaled, h.se_scaled)
    assert abs(h.std_raw - math.sqrt(d)) < 4 * h.se_raw  # the measurement the sentence quotes is right


def check_saturation(at: AppTest, n: int = 4) -> None:
    fig = only_figure(at)
    x_star = float(theory.saturation_threshold(n, 0.99))
    x_max = min(40.0, max(10.0, math.ceil(x_star) + 2.0))
    sc = saturation_curve(torch.linspace(0.0, x_max, 81, dtype=torch.float64), n)
    close(decode(named(fig, "top weight (measured)")["y"]), sc.top.numpy(), rtol=1e-6)
    crossing = saturation_crossing(sc.x, sc.top, 0.99)
    assert crossing is not None and abs(crossing - x_star) < x_max / 80  # within one grid step
    assert lesson(at) == view.saturation_lesson(n, 0.99, crossing, x_star, 8.0)


def check_jacobian(at: AppTest, n: int = 16) -> None:
    fig = only_figure(at)
    trials = 2_000 if n < 256 else 1_000  # 2,000 x 256 keys x 49 scales is past attncore's limit (F1)
    assert tour.jacobian_trials(n) == trials
    sw = jacobian_vs_scale(np.geomspace(0.01, 64.0, 49), n, trials, seed=0, device=page_device())
    close(decode(named(fig, "measured")["y"]), sw.jac_mean, rtol=1e-5)
    j1, j8 = view.interpolate(sw.sigma, sw.jac_mean, 1.0), view.interpolate(sw.sigma, sw.jac_mean, 8.0)
    i = int(np.argmax(sw.jac_mean))
    assert lesson(at) == view.jacobian_lesson(n, j1, j8, 64, float(sw.sigma[i]), float(sw.jac_mean[i]))
    caption = " ".join(c.value for c in at.caption)
    assert caption.startswith(f"{trials:,} rows of {n} logits")  # the page states the rows it drew
    if trials < 2_000:
        assert f"{trials:,} × {n} keys × 49 scales = {trials * n * 49:,} softmax entries" in caption
    assert link(at)[1]["sat_trials"] == str(trials)  # the full page draws the same rows


def check_overflow(at: AppTest, dtype: str = "float16") -> None:
    fig = only_figure(at)
    ov = overflow_sweep(np.geomspace(1.0, 1e4, 241), 4, device=page_device())
    i = ov.dtypes.index(dtype)
    hit = np.nonzero(ov.naive_nonfinite[i] > 0)[0]
    first = float(ov.x[hit[0]]) if hit.size else None
    limit = float(theory.exp_overflow_logit(dtype))
    if first is not None:  # the first failure is the first grid point past ln(max)
        assert first > limit and ov.x[hit[0] - 1] <= limit
    assert lesson(at) == view.overflow_lesson(dtype, first, limit, bool(ov.stable_nonfinite[i].any()))
    assert fig["layout"]["meta"]["view"] == "sat-overflow"


def check_entropy(at: AppTest, tau: float = 1.0) -> None:
    fig = only_figure(at)
    spec = SweepSpec(lengths=tuple(2**k for k in range(4, 15)), d=64, queries=16, temperature=tau, seed=0)
    df = run_sweep(spec, device=page_device())
    close(decode(named(fig, "measured (±2 s.e.)")["y"]), df["entropy"].to_numpy(), rtol=1e-6)
    text = lesson(at)
    assert text == view.entropy_lesson(16, 16_384, float(df["entropy"].iloc[0]), float(df["entropy"].iloc[-1]),
                                       1 / tau, float(df["max_weight"].iloc[0]), float(df["max_weight"].iloc[-1]))
    # and the sentence is right: the entropy is close to log n - sigma^2/2 at the longest row
    assert abs(float(df["entropy"].iloc[-1]) - (math.log(16_384) - 1 / (2 * tau**2))) < 0.1


def check_sink(at: AppTest, s: float = 6.0) -> None:
    fig = only_figure(at)
    spec = SinkSpec(strength=s)
    soft = normaliser_zoo(spec, page_device())["softmax"]
    alone = normaliser_zoo(SinkSpec(strength=s, sink=False), page_device())["softmax"]
    w = soft.weights.double().cpu().numpy()
    close(decode(fig["data"][0]["z"]), np.log10(np.maximum(w, 1e-4)), rtol=1e-5, atol=1e-6)
    th = zoo_theory(spec)["softmax"]
    assert lesson(at) == view.sink_lesson(s, float(soft.sink_weight.mean()), th.sink_weight,
                                          float(soft.output_rms.mean()), th.output_rms,
                                          float(alone.output_rms.mean()))


def check_learned(at: AppTest) -> None:
    fig = only_figure(at)
    summary = ls_view.summary_of(load_result("null_attention")["runs"])
    first = next(iter(summary.values()))
    curve = first["curves"]["bos_other_curve"]
    close(decode(named(fig, first["label"])["y"]),
          [np.nan if v is None else v for v in curve["mean"]], rtol=1e-6)
    # the weight the sink rule reads (the last 3 evaluation points' mean), and the verdict over the grid
    rows = [(k, s["n_sink"], s["n_usable"], s["bos_end"]["mean"]) for k, s in summary.items()]
    header, runs = load_grid()
    headline = sink_claims(header, runs, load_result("null_attention")).fixes.headline
    over = "Over the Training lab's grid of settings, " + headline[:1].lower() + headline[1:]
    assert lesson(at) == view.learned_lesson(rows, SINK_THRESHOLD, over)
    assert "settings, a denominator bias (softmax1" in lesson(at)  # one sentence, not 'settings: A …'
    assert "at some settings only" in lesson(at)
    soft = summary["softmax"]
    assert soft["n_sink"] > 0 and "softmax formed a sink" in lesson(at)


def check_induction(at: AppTest) -> None:
    fig = only_figure(at)
    _, runs = load_runs()
    s = summarize(runs)
    assert lesson(at) == ind_view.tour_lesson(s)
    assert s["n"] == s["n_formed"] == 3 and lesson(at).startswith("In all 3 seeds")
    close(decode(named(fig, "loss, second copy")["y"]),
          np.mean([r["loss_second"] for r in runs], axis=0), rtol=1e-5)


def check_memory(at: AppTest, T: int = 4096) -> None:
    fig = only_figure(at)
    spec = tour.MEM_SPEC
    lengths = [2**k for k in range(8, 17)]
    close(decode(named(fig, "math: T × T matrices")["y"]),
          [materialised_bytes("math", spec, t, t) / 2**20 for t in lengths])
    m, f = materialised_bytes("math", spec, T, T), cpu_flash_bytes(spec, T, T, 2)
    assert m == 4 * T * T * 3 * 4  # 4 heads x T x T cells x 3 matrices x 4 bytes
    assert lesson(at) == view.memory_lesson(T, 4, m, f)


def check_evidence(at: AppTest, src: str = "sqrtd") -> None:
    fig = only_figure(at)
    claims = [c for c in CLAIMS if src in c.sources]
    verdicts = [judge(c, evaluate(c, Setting(page_device(), 0, "float32")).measurement)[1].verdict
                for c in claims if not c.slow]
    assert all(list(t["y"]) == [SOURCES[src].short] for t in fig["data"])  # one bar: this source
    shown = {t["name"]: int(sum(decode(t["x"]))) for t in fig["data"]}
    assert shown == {v: verdicts.count(v) for v in shown}
    assert sum(shown.values()) == len(verdicts)
    assert lesson(at).startswith(f"{SOURCES[src].short}, checked on this machine: {len(verdicts)} claims")


def check_real_sink(at: AppTest) -> None:
    """SmolLM2's sink grid at 64 tokens and where the sink goes when the first token is deleted, against
    attncore.decoder directly; the lesson from the deletion, the ablations over 4 windows and the shipped
    StreamingLLM run."""
    from attncore.decoder.position import delete_first_token
    from attncore.decoder.probe import MAX_DECODER_TOKENS
    from attncore.decoder.sinks import decoder_sinks
    from attncore.decoder.stream_run import load_stream_run
    from attncore.decoder.streaming import ablations, massive_point
    from attncore.decoder.text import shipped_text, text_windows
    from attncore.models import load_model
    from ui.views.sink_position import eviction

    grid, moved = figures(at)
    assert views(at) == ["dec_sink_grid", "dec_deletion"]
    lm = load_model("smollm2")
    ids = lm.tokenizer(shipped_text(), return_tensors="pt")["input_ids"][:, :MAX_DECODER_TOKENS]
    texts = [lm.tokenizer.decode([int(i)]) for i in ids[0]]
    s = decoder_sinks(lm.model, ids[:, :64], texts[:64], eps=0.3)
    close(decode(grid["data"][0]["z"]), s.first_score.numpy(), rtol=1e-4, atol=1e-6)
    d = delete_first_token(lm.model, ids[:, :64])
    for trace, score in zip(moved["data"], (d.score_first, d.score_second, d.score_new_first), strict=True):
        assert list(decode(trace["y"])) == (score > 0.3).sum(-1).tolist()
    L = tour.REAL_WINDOW
    layer, dims = massive_point(lm.model, ids[:, :L])
    abl = ablations(lm.model, text_windows(ids, L, tour.REAL_WINDOWS), layer, dims)
    deleted = abl[0]
    assert deleted.name == "delete first token" and deleted.windows == tour.REAL_WINDOWS == 4
    ev = eviction(load_stream_run().result)
    assert ev is not None and ev.window == 256
    assert lesson(at) == view.real_sink_lesson(s.sink_heads, s.heads, 64, 0.3, d.sink_heads(0.3), d.layer,
                                               d.norm_new_first, d.norm_first, deleted.mean, deleted.margin, 4,
                                               L, ev)


def check_real_scale(at: AppTest) -> None:
    """SmolLM2's perplexity and saturated rows against the factor c at 64 tokens, against
    attncore.decoder.scaling directly; the lesson from c = 1 and c = 8 and the Gaussian prediction."""
    from attncore.decoder.scaling import FACTORS, gaussian_rows, scaled_runs
    from attncore.decoder.text import shipped_text, text_tokens
    from attncore.models import load_model
    from ui.tour_scaling import TOUR_L
    from ui.views import saturation_real_text as words

    assert views(at) == ["sat-real-scale"]
    lm = load_model("smollm2")
    runs = scaled_runs(lm.model, text_tokens(lm.tokenizer, shipped_text(), TOUR_L, min_tokens=2).ids, FACTORS)
    fig = only_figure(at)
    ppl = [t for t in fig["data"] if t.get("name") == "SmolLM2" and t.get("xaxis", "x") in ("x", "x1")]
    close(decode(ppl[0]["y"]), [r.perplexity for r in runs], rtol=1e-5)
    g = gaussian_rows(FACTORS, TOUR_L, seed=0)
    assert lesson(at) == words.tour_lesson(TOUR_L, runs[3], runs[6], float(g["above90"][3]),
                                           float(g["above90"][6]))


def check_keep(at: AppTest) -> None:
    """The shipped eviction run, read (no live decode): the budget chart and the map, the lesson from the run."""
    from attncore.decoder import eviction_read as er
    from attncore.decoder.eviction_run import load_eviction_run
    from attncore.evidence.eviction import shipped_run_path
    from ui.eviction_tour import keep_lesson

    assert views(at) == ["tour_keep_budget"]
    run = load_eviction_run(shipped_run_path())
    pl = er.from_run(run, "prose")
    budget = figures(at)[0]
    for d in budget["data"][:-1]:
        p = next(k for k, v in er.POLICY_NAMES.items() if v == d["name"])
        close(decode(d["y"]), [pl.ratio(p, int(b)) for b in decode(d["x"])], rtol=1e-12)
    assert lesson(at) == keep_lesson(er.run_progress(run), pl)


CHECKS = {"stages": check_stages, "histograms": check_histograms, "saturation": check_saturation,
          "jacobian": check_jacobian, "overflow": check_overflow, "entropy": check_entropy, "sink": check_sink,
          "learned": check_learned, "induction": check_induction, "real_sink": check_real_sink,
          "keep": check_keep, "real_scale": check_real_scale, "memory": check_memory,
          "evidence": check_evidence}


def test_every_step_is_checked() -> None:
    assert set(CHECKS) == set(KEYS)


SLOW = {"real_sink", "real_scale"}  # load SmolLM2 (and run it on the shipped text)


@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in KEYS])
def test_each_step_opens_from_its_url(key: str) -> None:
    at = run(tour=str(step_number(key)))
    no_errors(at)
    assert not at.warning, [w.value for w in at.warning]
    CHECKS[key](at)
    assert at.selectbox(key="tour").value == step_number(key)
    assert_plot_areas(figures(at), f"Tour step {key}")


def test_default_is_step_one_and_previous_is_disabled() -> None:
    at = run()
    no_errors(at)
    check_stages(at)
    assert at.button(key="tour_prev").disabled and not at.button(key="tour_next").disabled


def test_previous_and_next_walk_the_steps_and_the_url_follows() -> None:
    at = run()
    at.button(key="tour_next").click().run()
    no_errors(at)
    assert at.query_params["tour"] == "2"
    check_histograms(at)
    at.button(key="tour_next").click().run()
    assert at.query_params["tour"] == "3"
    check_saturation(at)
    at.button(key="tour_prev").click().run()
    assert at.query_params["tour"] == "2"
    check_histograms(at)
    at.selectbox(key="tour").set_value(len(KEYS)).run()
    assert at.button(key="tour_next").disabled and at.query_params["tour"] == str(len(KEYS))


MOVES = {"stages": ("tour_dk", 256), "histograms": ("tour_d", 16), "saturation": ("tour_sn", 1024),
         "jacobian": ("tour_keys", 64), "overflow": ("tour_odt", "bfloat16"), "entropy": ("tour_tau", 0.5),
         "sink": ("tour_s", 2.0), "memory": ("tour_T", 65536), "evidence": ("tour_src", "d2l")}


@pytest.mark.parametrize("key", sorted(MOVES))
def test_each_control_moves_the_view(key: str) -> None:
    at = run(tour=str(step_number(key)))
    name, new = MOVES[key]
    before = lesson(at)
    widget = [w for w in (*at.select_slider, *at.selectbox, *at.slider) if w.key == name]
    assert len(widget) == 1, name
    widget[0].set_value(new).run()
    no_errors(at)
    assert lesson(at) != before
    CHECKS[key](at, new)
    assert at.query_params[name] == (f"{new:g}" if isinstance(new, float) else str(new))


def options_of(at: AppTest, p) -> list:  # noqa: ANN001 - a ui.state.Param
    """Every value a step's control offers: its options, or a slider's whole step grid."""
    if p.options is not None:
        return list(p.options)
    (w,) = [w for w in at.slider if w.key == p.key]
    step = float(w.proto.step)
    return [float(v) for v in np.arange(float(w.proto.min), float(w.proto.max) + step / 2, step)]


@pytest.mark.parametrize("key", [s.key for s in tour.STEPS if s.params])
def test_every_control_draws_at_every_option(key: str) -> None:
    """F1: every value a step's control offers draws its chart, its lesson and its link, with no error or
    warning (256 keys on the Jacobian step was an error box: 2,000 trials x 256 keys x 49 scales is past
    attncore's limit)."""
    at = run(tour=str(step_number(key)))
    no_errors(at)
    step = tour.STEPS[step_number(key) - 1]
    n_figures = len(figures(at))
    for p in step.params:
        for option in options_of(at, p):
            widget = [w for w in (*at.select_slider, *at.selectbox, *at.slider) if w.key == p.key]
            assert len(widget) == 1, p.key
            widget[0].set_value(option).run()
            no_errors(at)
            assert not at.warning, (p.key, option, [w.value for w in at.warning])
            assert len(figures(at)) == n_figures, (p.key, option)
            assert lesson(at) and link(at)
            assert at.query_params.get(p.key, str(p.default)) in (str(option), f"{option:g}"
                                                                   if isinstance(option, float) else "")
            if key == "jacobian":
                check_jacobian(at, int(option))


def test_learned_step_has_no_control() -> None:
    assert tour.STEPS[step_number("learned") - 1].params == ()
    assert tour.STEPS[step_number("induction") - 1].params == ()
    assert all(len(s.params) <= 2 for s in tour.STEPS)


# ------------------------------------------------------------------------------ "Open this in full"

def link(at: AppTest) -> tuple[str, dict[str, str]]:
    links = [p for p in at.get("page_link") if p.proto.label == "Open this in full"]
    assert len(links) == 1
    return links[0].proto.page, dict(parse_qsl(links[0].proto.query_string))


def test_open_in_full_carries_the_steps_state_and_the_page_shows_the_same_numbers() -> None:
    at = run(tour="1", tour_dk="256", seed="3")
    no_errors(at)
    page, query = link(at)
    assert page.endswith("Heatmaps") or "Heatmaps" in page
    assert query == {"L": "12", "S": "12", "dk": "256", "heads": "1", "kv": "1", "seed": "3"}
    tour_fig = only_figure(at)
    full = run_app("pages/1_Heatmaps.py", **query)
    no_errors(full)
    assert not full.warning, [w.value for w in full.warning]
    page_fig = [f for f in figures(full) if (f["layout"].get("meta") or {}).get("view") == "stages"][0]
    close(decode(page_fig["data"][0]["z"]), decode(tour_fig["data"][0]["z"]))


@pytest.mark.parametrize("key", ["histograms", "saturation", "jacobian", "sink", "learned", "induction"])
def test_open_in_full_opens_the_view_the_step_shows(key: str) -> None:
    at = run(tour=str(step_number(key)))
    _, query = link(at)
    step = tour.STEPS[step_number(key) - 1]
    full = run_app(step.page, **query)
    no_errors(full)
    assert not full.warning, [w.value for w in full.warning]
    want = views(at)[0]
    assert want in [(f["layout"].get("meta") or {}).get("view") for f in figures(full)], want


def test_presenter_mode_is_kept_in_the_link() -> None:
    at = run(tour="7", present="1")
    no_errors(at)
    assert link(at)[1].get("present") == "1"
