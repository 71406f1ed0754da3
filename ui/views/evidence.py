"""Evidence page: the claims table, the verdict overview chart and each claim's link into the app.

Rows of :mod:`attncore.evidence` in, DataFrame / go.Figure / strings out; no streamlit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple
from urllib.parse import quote, urlencode

import pandas as pd
import plotly.graph_objects as go

from attncore.citations import REFERENCES
from attncore.evidence import (
    CAVEAT,
    CLAIMS,
    EXACT,
    FAILS,
    HOLDS,
    LIVE,
    MISPRINT,
    SHIPPED,
    SOURCES,
    UNTESTABLE,
    VERDICTS,
    Claim,
    Row,
)
from ui.figures import PALETTE, relayout, style
from ui.text import plain

__all__ = [
    "COLUMNS",
    "LINKS",
    "PENDING",
    "REFERENCES_ANCHOR",
    "VERDICT_KEYS",
    "basis_text",
    "frame",
    "link",
    "references_markdown",
    "references_text",
    "source_links",
    "summary",
    "verdict_figure",
]


class _Look(NamedTuple):
    """How the page shows one verdict."""

    key: str  # its value in the URL's verdict filter
    color: str  # its bars in the overview chart
    badge: str  # its badge's colour in the table
    plural: str  # the summary's words for rows with it ('26 hold')
    singular: str  # ... and for one row ('1 holds')


_LOOKS: dict[str, _Look] = {
    HOLDS: _Look("holds", PALETTE[2], "green", "hold", "holds"),
    CAVEAT: _Look("caveat", PALETTE[4], "blue", "hold with a caveat", "holds with a caveat"),
    FAILS: _Look("fails", PALETTE[5], "orange", "do not hold here", "does not hold here"),
    MISPRINT: _Look("misprint", PALETTE[3], "violet", "are misprints in the source",
                    "is a misprint in the source"),
    UNTESTABLE: _Look("untestable", PALETTE[7], "gray", "are not testable here", "is not testable here"),
}
VERDICT_KEYS: dict[str, str] = {look.key: v for v, look in _LOOKS.items()}  # URL value -> verdict
COLORS: dict[str, str] = {v: look.color for v, look in _LOOKS.items()}
BADGES: dict[str, str] = {v: look.badge for v, look in _LOOKS.items()}
PENDING = "measuring…"

_SAT = "pages/3_Saturation_and_gradients.py"
_ENT = "pages/2_Entropy_vs_length.py"
_SNK = "pages/4_Attention_sinks.py"
_HM = "pages/1_Heatmaps.py"
_KER = "pages/5_Kernels.py"
_TRL = "pages/6_Training_lab.py"
_GRADS = {"sat_tab": "Gradients"}
_SATUR = {"sat_tab": "Saturation"}
# Each claim's view in depth: the page and the URL state that shows it (the pages' own Param names).
LINKS: dict[str, tuple[str, dict[str, str]]] = {
    "entropy_grows": (_ENT, {"ent_vary": "none"}),
    "sharp_needs_log_n": (_ENT, {"ent_peak": "3", "ent_rest": "-2"}),
    "no_null_attention": (_SNK, {"snk_sink": "0", "snk_c": "-10"}),
    "sinks_learned": (_SNK, {"snk_view": "learned"}),
    "sink_dummy": (_SNK, {"snk_s": "6", "snk_v": "0"}),
    "length_scaling": (_ENT, {"ent_vary": "scale_rule"}),
    "denominator_bias": (_SNK, {"snk_sink": "0", "snk_c": "-10"}),
    "bias_removes_sinks": (_SNK, {"snk_view": "learned"}),
    "league_ordering": (_TRL, {}),  # the Training lab's folded league section
    "sinks_weight_decay": (_TRL, {}),
    "llm_sinks": (_SNK, {"snk_view": "decoder"}),
    "llm_value_drain": (_SNK, {"snk_view": "decoder"}),
    "llm_window": (_SNK, {"snk_view": "decoder"}),
    "llm_window_2048": (_SNK, {"snk_view": "decoder"}),
    "llm_sink_recovers": (_SNK, {"snk_view": "decoder"}),
    "llm_gqa_same": (_SNK, {"snk_view": "decoder"}),
    "llm_dot_spread": (_SAT, {"sat_tab": "Real model"}),
    "llm_unscaled_saturates": (_SAT, {"sat_tab": "Real model"}),
    "xy_variance": (_SAT, {"sat_d": "1"}),
    "dot_variance": (_SAT, {"sat_d": "64"}),
    "std_64": (_SAT, {"sat_d": "64"}),
    "peaked_example": (_SAT, {**_SATUR, "sat_scores": "8.5, -2.1, 7.9"}),
    "unit_any_d": (_SAT, {"sat_d": "4096"}),
    "unscaled_example": (_SAT, _SATUR),
    "scaled_scores": (_SAT, _SATUR),
    "scaled_example": (_SAT, _SATUR),
    "random_init": (_SAT, {"sat_vq": "0.25", "sat_vk": "0.25"}),
    "temperature": (_SAT, _SATUR),
    "stable_softmax": (_SAT, {**_GRADS, "sat_ox": "100"}),
    "gradients_vanish": (_SAT, {**_GRADS, "sat_stat": "median"}),
    "vanishing_onehot": (_SAT, {**_GRADS, "sat_scores": "5.69, 0, 0, 0"}),
    "healthy_gradients": (_SAT, {**_GRADS, "sat_scores": "0.405, 0.405, 0, 0"}),
    "std_512": (_SAT, {"sat_d": "512"}),
    "saturation": (_SAT, {**_SATUR, "sat_sn": "4", "sat_xmax": "10"}),
    "scaling_ablation": (_TRL, {}),
    "d2l_outputs": (_HM, {"L": "2", "S": "4", "mask": "padding2d", "vlens": "1, 3"}),
    "dropout_mean": (_HM, {"drop": "0.1"}),
    "d2l_pad_zero": (_HM, {"L": "1", "S": "10", "mask": "padding", "vlen": "2"}),
    "d2l_valid_len_zero": (_HM, {"L": "1", "S": "10", "mask": "padding", "vlen": "0"}),
    "underscaled": (_ENT, {"ent_full": "1"}),
    "fully_scaled_unit": (_ENT, {"ent_full": "1"}),
    "flat_limit": (_ENT, {"ent_vary": "temperature"}),
    "spike_limit": (_ENT, {"ent_vary": "temperature"}),
    "lognormal_range": (_ENT, {"ent_vary": "temperature"}),
    "fully_scaled_worse": (_TRL, {}),
    "fold_into_projection": (_TRL, {}),
    "sqrt_growth": (_SAT, {"sat_d": "128"}),
    "prevents_saturation": (_SAT, {**_GRADS, "sat_dmax": "1024"}),
    "rows_sum_to_one": (_HM, {}),
    "causal_zero": (_HM, {"mask": "causal"}),
    "manual_equivalent": (_KER, {"k_mask": "boolean"}),
    "unstable_16": (_TRL, {}),
    "dropout_training_only": (_KER, {"k_drop": "0.1"}),
    "gqa_same": (_KER, {"k_groups": "4"}),
    "flash_default": (_KER, {}),
    "flash_speed": (_KER, {}),
    "flash_memory": (_KER, {"k_mem": "1"}),
}
COLUMNS: tuple[str, ...] = (
    "verdict",
    "claim",
    "source",
    "measured",
    "caveat",
    "view",
    "test",
    "rule",
    "basis",
    "scale",
    "references",
)
BASIS_WORDS: dict[str, str] = {LIVE: "live", EXACT: "exact", SHIPPED: "shipped"}


def page_slug(script: str) -> str:
    """The URL path Streamlit gives a page file (``pages/3_Saturation.py`` -> ``Saturation``)."""
    name = script.rsplit("/", 1)[-1].removesuffix(".py")
    head, _, tail = name.partition("_")
    return tail if head.isdigit() else name


def link(key: str) -> str:
    """The claim's view, as a URL path with its state (``/Saturation_and_gradients?sat_d=512``)."""
    script, query = LINKS[key]
    path = "/" + page_slug(script)
    return path + ("?" + urlencode(query, quote_via=quote) if query else "")


def basis_text(row: Row, device_label: str) -> str:
    """How the row's numbers were obtained: live on the device, exact, or shipped ("—" when not measured)."""
    m = row.measurement
    if m.missing:
        return "—"
    return f"live, {device_label}" if m.basis == LIVE and device_label else BASIS_WORDS[m.basis]


REFERENCES_ANCHOR = "references"  # the page's reference list, where a source without an address links


def _sources_text(c: Claim) -> str:
    return "; ".join(SOURCES[s].short for s in c.sources)


def references_text(c: Claim) -> str:
    """The row's sources and the papers its test follows, as full references (plain text, for the CSV)."""
    return " | ".join([SOURCES[s].full for s in c.sources] + [REFERENCES[p].full for p in c.cites])


def source_links(c: Claim) -> str:
    """Markdown: each of the row's sources linked to its address (to the page's reference list where the text
    has none), then the papers its test follows, linked to arXiv."""
    texts = [f"[{plain(SOURCES[s].short)}]({SOURCES[s].url or '#' + REFERENCES_ANCHOR})" for s in c.sources]
    papers = [f"[{plain(REFERENCES[p].short)}]({REFERENCES[p].url})" for p in c.cites]
    return "; ".join(texts) + (f"; after {', '.join(papers)}" if papers else "")


def references_markdown(claims: Sequence[Claim] = CLAIMS) -> str:
    """The reference list: the five source texts, then every paper a row's test follows, in full."""
    def linked(full: str, url: str) -> str:  # the text escaped, its address a Markdown link
        if not url:
            return plain(full)
        return plain(full.replace(url, "\x00")).replace("\x00", f"[{url}]({url})")

    cited = [p for p in REFERENCES if any(p in c.cites for c in claims)]
    lines = [f"- **{plain(s.short)}**: {linked(s.full, s.url)}" for s in SOURCES.values()]
    lines += [f"- **{plain(REFERENCES[p].short)}**: {linked(REFERENCES[p].full, REFERENCES[p].url)}"
              for p in cited]
    return "\n".join(lines)


def _cells(c: Claim) -> dict[str, str]:
    return {
        "claim": c.quote,
        "source": _sources_text(c),
        "view": link(c.key),
        "test": c.test,
        "rule": c.tolerance,
        "references": references_text(c),
    }


def frame(rows: Sequence[Row], pending: Sequence[Claim] = (), device_label: str = "") -> pd.DataFrame:
    """One row per claim in :data:`attncore.evidence.CLAIMS` order, plain text; ``pending`` claims (slow ones
    not yet measured) say so. Columns ``key`` (the claim's id) and :data:`COLUMNS`."""
    out = {
        r.claim.key: {
            **_cells(r.claim),
            "verdict": r.judgement.verdict,
            "measured": r.measured,
            "caveat": r.judgement.caveat,
            "basis": basis_text(r, device_label),
            "scale": r.measurement.scale,
        }
        for r in rows
    }
    out.update(
        {
            c.key: {
                **_cells(c),
                "verdict": PENDING,
                "measured": PENDING,
                "caveat": "",
                "basis": "live",
                "scale": "",
            }
            for c in pending
        }
    )
    keys = [c.key for c in CLAIMS if c.key in out]
    return pd.DataFrame([{"key": k, **out[k]} for k in keys], columns=["key", *COLUMNS])


def _page_name(url: str) -> str:
    """'Saturation and gradients' for '/Saturation_and_gradients?sat_d=512'."""
    return url.lstrip("/").split("?", 1)[0].replace("_", " ")


def display_frame(df: pd.DataFrame, *, present: bool = False) -> pd.DataFrame:
    """The table the page shows (``st.table`` renders Markdown): every text escaped with ``ui.text.plain``;
    the verdict as a coloured badge before the quote, then the source and the link to the view; the basis
    before the measurement; the rule and the scale after the test. ``present``: the links keep presenter
    mode (``present=1``: a Markdown link opens the page afresh, so the URL must carry it)."""

    claims = {c.key: c for c in CLAIMS}

    def keep(u: str) -> str:
        return u + ("&" if "?" in u else "?") + "present=1" if present else u

    def badge(v: str) -> str:
        return f":{BADGES[v]}-badge[{plain(v)}]" if v in BADGES else plain(v)

    out = pd.DataFrame(
        {
            "claim and verdict": [
                f"{badge(v)} “{plain(q)}” *({source_links(claims[k])})* [{_page_name(u)} ↗]({keep(u)})"
                for v, q, k, u in zip(df["verdict"], df["claim"], df["key"], df["view"], strict=True)
            ],
            "measured here": [
                f"**{plain(b)}:** {plain(m)}" for b, m in zip(df["basis"], df["measured"], strict=True)
            ],
            "caveat": df["caveat"].map(plain),
            "tested by": [
                f"{plain(t)} **Rule:** {plain(r)}." + (f" **Scale:** {plain(sc)}." if sc else "")
                for t, r, sc in zip(df["test"], df["rule"], df["scale"], strict=True)
            ],
        }
    )
    return out


def counts(rows: Sequence[Row]) -> dict[str, dict[str, int]]:
    """{source key: {verdict: rows}} over every source a claim names (its own and ``also``)."""
    out: dict[str, dict[str, int]] = {s: dict.fromkeys(VERDICTS, 0) for s in SOURCES}
    for r in rows:
        for s in r.claim.sources:
            out[s][r.judgement.verdict] += 1
    return out


def verdict_figure(rows: Sequence[Row], only: Sequence[str] = ()) -> go.Figure:
    """Stacked horizontal bars: per source (``only`` these, if given), how many of its claims got each
    verdict."""
    by = counts(rows)
    sources = [s for s in SOURCES if not only or s in only][::-1]  # the first source on top
    labels = [SOURCES[s].short for s in sources]
    traces = [
        go.Bar(
            y=labels,
            x=[by[s][v] for s in sources],
            name=v,
            orientation="h",
            marker_color=COLORS[v],
            hovertemplate="%{y}: %{x} " + v + "<extra></extra>",
        )
        for v in VERDICTS
    ]
    fig = go.Figure(traces)
    most = max((sum(by[s].values()) for s in sources), default=0)
    relayout(
        fig,
        barmode="stack",
        bargap=0.25,
        # the axis ends 0.6 of a claim past the longest bar: the last tick label (every 2 claims) sits
        # inside the plot, not half over its right margin (an odd count of 15 put '16' at the very end)
        xaxis={"dtick": 2, "title": {"text": "claims"}, "range": [0, most + 0.6]},
        yaxis={"tickmode": "array", "tickvals": labels, "ticktext": labels},
        meta={"view": "ev-verdicts"},
    )
    return style(fig, height=230)


def summary(rows: Sequence[Row]) -> str:
    """'47 claims: 26 hold, 11 hold with a caveat, …' over the given rows."""
    c = Counter(r.judgement.verdict for r in rows)
    parts = [f"{c[v]} {_LOOKS[v].singular if c[v] == 1 else _LOOKS[v].plural}" for v in VERDICTS if c[v]]
    return (
        f"{len(rows)} claim{'s' if len(rows) != 1 else ''}: " + (", ".join(parts) if parts else "none") + "."
    )
