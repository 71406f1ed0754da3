"""Figure builders: shapes, float32 payloads, block averaging, valid layouts for every grid size."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.chart_data import decode
from ui import figures
from ui.maps import downsample, downsample_stack, heatmap, heatmap_grid
from ui.views import heatmaps as heatmaps_view


def test_downsample_is_the_block_mean_and_ignores_masked_cells() -> None:
    rng = np.random.default_rng(0)
    a = rng.random((1000, 37)).astype(np.float32)
    a[:16, 0] = -np.inf  # a fully masked block stays blank
    a[20, 1] = np.nan
    small, fr, fc = downsample(a, 64)
    assert (fr, fc) == (16, 1) and small.shape == (63, 37) and small.dtype == np.float32
    assert np.isnan(small[0, 0])
    assert np.isclose(small[1, 1], np.nanmean(a[16:32, 1]))
    assert np.isclose(small[-1, 5], a[992:, 5].mean())
    same, fr, fc = downsample(a[:50, :30], 64)
    assert (fr, fc) == (1, 1) and np.isnan(same[0, 0])
    np.testing.assert_allclose(same[21:], a[21:50, :30])


def test_downsample_stack_of_finite_maps_is_every_blocks_own_mean() -> None:
    # the finite path (torch average pooling) against a loop over blocks in float64: a stack of
    # maps whose sides the blocks do not divide, so the last row and column of blocks are partial
    rng = np.random.default_rng(1)
    a = rng.random((2, 3, 50, 23)).astype(np.float32)
    small, fr, fc = downsample_stack(a, 6)
    assert (fr, fc) == (9, 4) and small.shape == (2, 3, 6, 6) and small.dtype == np.float32
    ref = np.empty(small.shape)
    for r in range(6):
        for c in range(6):
            ref[..., r, c] = a[..., r * fr:(r + 1) * fr, c * fc:(c + 1) * fc].astype(np.float64).mean(axis=(-2, -1))
    np.testing.assert_allclose(small, ref, rtol=1e-6)
    assert np.isclose(small[1, 2, -1, -1], a[1, 2, 45:, 20:].mean())  # a 5 x 3 corner block


def test_heatmap_sends_float32_and_hover_has_indices_and_value() -> None:
    z = np.arange(12, dtype=np.float64).reshape(3, 4)
    fig = json.loads(heatmap(z, title="t").to_json())
    tr = fig["data"][0]
    assert tr["z"]["dtype"] == "f4"
    np.testing.assert_array_equal(decode(tr["z"]), z.astype(np.float32))
    assert "query %{y}" in tr["hovertemplate"] and "key %{x}" in tr["hovertemplate"]
    assert "%{z:.6g}" in tr["hovertemplate"]
    assert fig["layout"]["yaxis"]["autorange"] == "reversed"


def test_heatmap_diverging_is_centred_at_zero_and_labels_are_used() -> None:
    fig = heatmap(np.array([[-1.0, 2.0]]), diverging=True, x_labels=["a", "b"], y_labels=["q"])
    tr = fig.data[0]
    assert tr.zmid == 0.0 and tr.colorscale[0][1] != tr.colorscale[-1][1]
    assert list(tr.x) == ["0:a", "1:b"] and list(tr.y) == ["0:q"]


def test_heatmap_of_a_large_map_is_block_averaged_with_a_block_hover() -> None:
    z = np.ones((1024, 1024), dtype=np.float32)
    tr = heatmap(z, max_side=256).data[0]
    assert np.asarray(tr.z).shape == (256, 256) and tr.dx == 4 and tr.dy == 4
    assert "mean weight" in tr.hovertemplate


@pytest.mark.parametrize("n", range(1, 17))
@pytest.mark.parametrize("cols", [1, 3, 4, 8])
def test_heatmap_grid_layout_is_valid_for_every_size(n: int, cols: int) -> None:
    maps = [np.full((5, 6), float(i)) for i in range(n)]
    fig = heatmap_grid(maps, [f"head {i}" for i in range(n)], cols=cols)
    assert len(fig.data) == n
    for i, tr in enumerate(fig.data):
        assert np.allclose(np.asarray(tr.z), i) and tr.coloraxis == "coloraxis"
        suffix = "" if i == 0 else str(i + 1)
        for axis in (f"xaxis{suffix}", f"yaxis{suffix}"):
            lo, hi = fig.layout[axis].domain
            assert 0.0 <= lo < hi <= 1.0
    assert [a.text for a in fig.layout.annotations] == [f"head {i}" for i in range(n)]


def test_weights_with_row_stats_traces() -> None:
    w = np.full((4, 4), 0.25)
    fig = heatmaps_view.weights_with_row_stats(w, np.log(np.full(4, 4.0)), w.max(1), max_entropy=np.log([1, 2, 3, 4]))
    names = [t.name for t in fig.data]
    assert names[1:] == ["entropy", "log n (uniform)", "max weight"]
    np.testing.assert_allclose(np.asarray(fig.data[1].x), np.log(4.0), rtol=1e-6)


def test_line_chart_draws_theory_dashed_and_measurements_with_error_bars() -> None:
    fig = figures.line_chart([
        figures.Curve("measured", [1, 2], [3, 4], err=[0.1, 0.2]),
        figures.Curve("theory", [1, 2], [3, 4], theory=True),
    ], log_x=True)
    m, t = fig.data
    assert m.error_y.visible and np.allclose(np.asarray(m.error_y.array), [0.1, 0.2])
    assert t.line.dash == "dash" and t.mode == "lines"
    assert fig.layout.xaxis.type == "log"


def test_heatmap_row_colour_bars_can_be_left_out_per_map() -> None:
    maps = [np.full((3, 3), v) for v in (-1.0, 1.0, 0.5)]
    fig = heatmaps_view.heatmap_row(maps, ["a · ±1", "b", "c"], diverging=[True, True, False],
                              limits=[1.0, 1.0, None], value_names=["s", "s", "w"],
                              colorbars=[False, False, True])
    assert [t.showscale for t in fig.data] == [False, False, True]
    assert fig.data[0].zmin == -1.0 and fig.data[0].zmax == 1.0 and fig.data[0].zmid == 0.0
    assert [a.text for a in fig.layout.annotations] == ["a · ±1", "b", "c"]


def test_a_bands_curve_owns_the_legend_entry() -> None:
    """Issue 34: the band (drawn first, pale fill) took the legend entry of its curve, so the legend showed
    pale swatches and two variants looked alike. The entry is the curve's line, in the curve's colour; a band
    without a curve keeps its own entry."""
    from ui.figures import PALETTE, Band, Curve, Panel, panel_grid

    x = np.arange(4.0)
    panels = [Panel(f"p{i}", curves=[Curve("softmax", x, x, color=PALETTE[0]),
                                     Curve("sigmoid", x, x + 1, color=PALETTE[1])],
                    bands=[Band("softmax", x, x - 1, x + 1, color=PALETTE[0]),
                           Band("sigmoid", x, x, x + 2, color=PALETTE[1]),
                           Band("alone", x, x, x + 3, color=PALETTE[2])]) for i in range(2)]
    fig = panel_grid(panels, cols=2).to_dict()
    shown = [t for t in fig["data"] if t.get("showlegend")]
    by_name = {t["name"]: t for t in shown}
    assert sorted(t["name"] for t in shown) == ["alone", "sigmoid", "softmax"]
    for name, colour in (("softmax", PALETTE[0]), ("sigmoid", PALETTE[1])):
        assert by_name[name].get("fill") is None and by_name[name]["line"]["color"] == colour, by_name[name]
    assert by_name["alone"]["fill"] == "toself"


def test_log_ticks_within_two_decades_write_each_label_in_full() -> None:
    """A value ratio from 0.1 to 2 drew Plotly's bare '2' and '5' for 0.2 and 0.5 (read as 2 and 5)."""
    import plotly.graph_objects as go

    fig = figures.log_ticks(go.Figure(go.Scatter(x=[0, 1, 2], y=[0.11, 1.0, 1.9])))
    ya = fig.layout.yaxis
    assert list(ya.tickvals) == pytest.approx([0.1, 0.2, 0.5, 1.0, 2.0])
    assert list(ya.ticktext) == ["0.1", "0.2", "0.5", "1", "2"]
    assert ya.tickmode == "array"


def test_log_ticks_keep_a_few_labels_whatever_the_span() -> None:
    """Issue 34: a row sum falling to 1e-40 got a label per decade (40 on a 400 px axis, piled into one
    block); now every k-th decade, at most MAX_LOG_LABELS labels, and every decade for a short span."""
    import math

    import plotly.graph_objects as go

    for lo_exp, want in ((-3, 1), (-6, 1), (-40, 7), (-300, 50)):
        fig = figures.log_ticks(go.Figure(go.Scatter(x=[0, 1, 2], y=[1.0, 10.0 ** (lo_exp / 2), 10.0 ** lo_exp])))
        step = fig.layout.yaxis.dtick
        assert step == want, (lo_exp, step)
        assert math.ceil(-lo_exp / step) <= figures.MAX_LOG_LABELS
        assert fig.layout.yaxis.exponentformat == "power"


@pytest.mark.parametrize(("heads", "kv_heads", "L", "selected"), [(12, 0, 23, 3), (9, 3, 70, 8), (4, 2, 130, None),
                                                                   (1, 0, 5, 0)])
def test_layer_heads_figure_tiles_show_attncores_weights_with_labels_picks_and_outline(
        heads: int, kv_heads: int, L: int, selected: int | None) -> None:
    """The head grid a head click redraws (built from dicts in one figure): tile h is head h's weights from
    attncore (block means past 64 tokens), on its own axes pinned to the tile, titled with its head (and
    key/value head), with pick points inside it that carry (layer, h), and only the selected tile outlined."""
    from attncore.explore import SyntheticSpec, synthetic_stages
    from ui.views import realtext as rt_views

    spec = SyntheticSpec(L=L, S=L, d_k=16, heads=heads, kv_heads=kv_heads or heads, mask="causal")
    w = synthetic_stages(spec, "cpu").weights.numpy()  # (H, L, L)
    fig = json.loads(heatmaps_view.layer_heads_figure(list(w), layer=2, selected=selected,
                                                      kv_heads=kv_heads).to_json())
    lay = fig["layout"]
    assert lay["meta"] == {"view": "rt-heads", "layer": 2, "selected": selected}
    heats = [t for t in fig["data"] if t["type"] == "heatmap"]
    picks = [t for t in fig["data"] if t.get("name") == rt_views.PICK]
    assert len(heats) == len(picks) == heads and fig["data"] == heats + picks  # heatmap h is trace h
    assert lay["coloraxis"]["cmin"] == 0.0 and lay["coloraxis"]["cmax"] == 1.0
    groups = heads // kv_heads if kv_heads else 0
    titles = [n["text"] for n in lay["annotations"]]
    assert titles == [f"head {h} · KV {h // groups}" if groups else f"head {h}" for h in range(heads)]
    for h, (hm, pk) in enumerate(zip(heats, picks, strict=True)):
        small, fr, fc = downsample(w[h], heatmaps_view.THUMB_SIDE)
        z = decode(hm["z"])
        assert z.dtype == np.float32 and z.shape == small.shape
        np.testing.assert_allclose(z, small, rtol=1e-6, atol=1e-7, equal_nan=True)
        if fr == 1:
            np.testing.assert_allclose(z, w[h], rtol=1e-6, atol=1e-7)  # every weight, as attncore has it
        assert (hm.get("dx", 1), hm.get("dy", 1)) == (fc, fr) and hm["coloraxis"] == "coloraxis"
        xa, ya = lay[hm["xaxis"].replace("x", "xaxis", 1)], lay[hm["yaxis"].replace("y", "yaxis", 1)]
        rows, cols = z.shape
        assert xa["range"] == [-0.5 * fc, (cols - 0.5) * fc] and ya["range"] == [(rows - 0.5) * fr, -0.5 * fr]
        assert ya["autorange"] is False and not xa["showticklabels"] and not ya["showticklabels"]
        note = lay["annotations"][h]  # the title sits above the tile's own column
        assert xa["domain"][0] <= note["x"] <= xa["domain"][1] and note["y"] == ya["domain"][1]
        assert (pk["xaxis"], pk["yaxis"]) == (hm["xaxis"], hm["yaxis"])
        x, y = np.asarray(pk["x"], dtype=float), np.asarray(pk["y"], dtype=float)
        assert x.min() >= 0 and x.max() <= (cols - 1) * fc and y.min() >= 0 and y.max() <= (rows - 1) * fr
        assert len(x) == min(rows, 6) * min(cols, 6) and {tuple(c) for c in pk["customdata"]} == {(2, h)}
        assert pk["hovertemplate"].startswith(f"layer 2 · head {h}<br>click")
        assert pk["marker"]["opacity"] == 0.0
    if selected is None:
        assert not lay.get("shapes")
    else:
        (box,) = lay["shapes"]
        hm = heats[selected]
        rows, cols = decode(hm["z"]).shape
        fr, fc = hm.get("dy", 1), hm.get("dx", 1)
        assert (box["xref"], box["yref"]) == (hm["xaxis"], hm["yaxis"])
        assert (box["x0"], box["x1"], box["y0"], box["y1"]) == (-0.5 * fc, (cols - 0.5) * fc, -0.5 * fr,
                                                                 (rows - 0.5) * fr)


def test_layer_head_grid_labels_every_tile_and_outlines_only_the_selected_head() -> None:
    """The grid's labels (h0.. above the columns, L0.. left of the rows), the selected head's outline and
    the pinned axes, as the builder writes them in one layout (the figure a layer or head move resends)."""
    from ui.views import sinks as sinks_view

    N, H, L = 3, 5, 7
    a = np.random.default_rng(0).random((N, H, L, L)).astype(np.float32)
    fig = json.loads(sinks_view.layer_head_grid(a, [f"t{i}" for i in range(L)], selected=(2, 3)).to_json())
    lay, tc, tr = fig["layout"], L + 1, L + 1
    assert lay["meta"] == {"tile_rows": tr, "tile_cols": tc, "selected": [2, 3]}
    heads = [n for n in lay["annotations"] if n.get("yref") == "paper"]
    layers = [n for n in lay["annotations"] if n.get("xref") == "paper"]
    assert [n["text"] for n in heads] == [f"h{h}" for h in range(H)]
    assert [n["x"] for n in heads] == [h * tc + (L - 1) / 2 for h in range(H)]
    assert [n["text"] for n in layers] == [f"L{l}" for l in range(N)]
    assert [n["y"] for n in layers] == [l * tr + (L - 1) / 2 for l in range(N)]
    (box,) = lay["shapes"]
    assert (box["x0"], box["x1"], box["y0"], box["y1"]) == (3 * tc - 0.5, 3 * tc + L - 0.5,
                                                            2 * tr - 0.5, 2 * tr + L - 0.5)
    n_cols, n_rows = H * tc - 1, N * tr - 1
    assert lay["xaxis"]["range"] == [-0.5, n_cols - 0.5] and lay["yaxis"]["range"] == [n_rows - 0.5, -0.5]
    assert not lay["xaxis"]["showticklabels"] and lay["yaxis"]["autorange"] is False
    pick = fig["data"][1]
    assert {tuple(c) for c in pick["customdata"]} == {(l, h) for l in range(N) for h in range(H)}
    plain = json.loads(sinks_view.layer_head_grid(a, None).to_json())["layout"]
    assert "shapes" not in plain and plain["meta"]["selected"] == []


@pytest.mark.parametrize("shape", [(6, 12, 25), (30, 9, 13), (3, 5, 7), (1, 1, 3), (2, 2, 100)])
def test_layer_head_grid_pick_points_cover_each_tile_about_27_px_apart(shape: tuple[int, int, int]) -> None:
    """The grid's pick points (a click on one shows its head): inside their own tile, the same lattice in
    every tile, about PICK_SPACING_PX apart at the grid's nominal width, so that each point's reach (its
    radius + Plotly's 20 px hover distance) covers the tile; never closer than a marker is wide at the
    page's narrowest width (0.68 x nominal: a 1280 px window). MiniLM (6 x 12) keeps 9 per tile, SmolLM2's
    30 x 9 grid 4 per tile instead of 16 (4,320 SVG points drawn on every layer move)."""
    from ui.views import sinks as sinks_view

    N, H, L = shape
    a = np.random.default_rng(1).random((N, H, L, L)).astype(np.float32)
    fig = json.loads(sinks_view.layer_head_grid(a, [f"t{i}" for i in range(L)]).to_json())
    heat, pick = fig["data"]
    lay = fig["layout"]
    tr, tc = lay["meta"]["tile_rows"], lay["meta"]["tile_cols"]
    col = {name: i for i, name in enumerate(heat["x"])}
    row = {name: i for i, name in enumerate(heat["y"])}
    cells: dict[tuple[int, int], set[tuple[int, int]]] = {}
    for x, y, (l, h) in zip(pick["x"], pick["y"], pick["customdata"], strict=True):
        r, c = row[y] - l * tr, col[x] - h * tc
        assert 0 <= r < tr - 1 and 0 <= c < tc - 1, (l, h, r, c)  # a cell of its own tile
        cells.setdefault((l, h), set()).add((r, c))
    lattice = next(iter(cells.values()))
    assert len(cells) == N * H and all(v == lattice for v in cells.values())
    m = sinks_view.GRID_MARGIN
    px_x = (1100 - m["l"] - m["r"]) / (H * tc - 1)  # px per cell at the nominal width
    px_y = (lay["height"] - m["t"] - m["b"]) / (N * tr - 1)
    size = pick["marker"]["size"]
    assert size == sinks_view.PICK_MARKER_PX
    reach = size / 2 + 20  # a point answers hover and clicks this far from its centre
    # x follows the window (0.68 x nominal at 1280 px); the height is fixed in px
    for axis, px, n_cells, narrowest in ((1, px_x, tc - 1, 0.68), (0, px_y, tr - 1, 1.0)):
        ks = sorted({rc[axis] for rc in lattice})
        across = (ks[0] + n_cells + 1 - ks[-1]) * px  # the last point of a tile to the first of the next
        gaps = [(b - a) * px for a, b in zip(ks[:-1], ks[1:], strict=True)] + [across]
        assert across * narrowest >= size, (axis, across)  # two tiles' points never overlap
        assert max(gaps) / 2 <= reach or len(ks) == n_cells, (axis, gaps)  # the tile is covered
        assert len(ks) <= max(1, round(n_cells * px / sinks_view.PICK_SPACING_PX))  # no denser than needed
    if (N, H, L) == (6, 12, 25):
        assert len(lattice) == 9
    if (N, H, L) == (30, 9, 13):
        assert len(lattice) == 4


def test_labelled_heatmap_axes_are_categories_with_rows_top_down() -> None:
    from ui.views import sinks as sinks_view

    z = np.array([[0.5, 0.001], [0.25, np.nan]])
    fig = json.loads(sinks_view.labelled_heatmap(z, ["a", "b"], ["0", "1"], x_title="head", y_title="layer",
                                                 title="on x").to_json())
    lay = fig["layout"]
    assert lay["yaxis"] == {"autorange": "reversed", "title": {"text": "layer"}, "type": "category"}
    assert lay["xaxis"] == {"tickangle": 0, "title": {"text": "head"}, "type": "category"}
    assert lay["title"]["text"] == "on x"
    assert fig["data"][0]["text"] == [["0.50", ""], ["0.25", ""]]
    wide = json.loads(sinks_view.labelled_heatmap(np.zeros((1, 17)), [str(i) for i in range(17)], ["0"],
                                                  text_format=None).to_json())
    assert wide["layout"]["xaxis"]["tickangle"] == -60 and "text" not in wide["data"][0]
