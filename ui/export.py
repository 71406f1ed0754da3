"""Export for slides and notes (issue 41, items 3 and 4): chart images at presenter size, charts and Tour
decks as offline HTML files, and the Tour's printable worksheet.

- Images: no image server (kaleido) is installed, so PNG and SVG are made by Plotly in the browser: every
  chart's config (:func:`chart_config`) shows the modebar and sizes its camera button to
  :data:`PRESENTER_SIZE`; the session's image format (PNG or SVG) picks what the button writes.
- Offline HTML: Plotly's own bundle inline (``include_plotlyjs=True``), no network: :func:`figure_html` for
  one chart, :func:`charts_html` for a page's charts, :func:`deck_html` for Tour steps as slides (one inline
  plotly.js; ←/→, PageUp/PageDown, Home/End move between slides, in plain JS).
- Worksheet: :func:`worksheet_html`, the Tour's questions with links and space for answers (print it to PDF
  from the browser).

Plain functions of figures and text: no streamlit. Every text placed in a file is escaped
(``html.escape``); figure JSON inside ``<script>`` has ``</`` broken so no string can end the script.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from ui import figures
from ui.questions import Question

__all__ = ["FORMATS", "PRESENTER_SIZE", "Slide", "Sheet", "chart_config", "charts_html", "deck_html",
           "figure_html", "filename", "slide_figure", "worksheet_html"]

PRESENTER_SIZE = (1920, 1080)  # a 1080p projector: the camera button's PNG / SVG, in pixels
FORMATS = ("png", "svg")


def filename(fig: go.Figure, fallback: str = "chart") -> str:
    """A file name from the figure's ``layout.meta.view`` (letters, digits, - and _ only)."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in str(meta.get("view") or fallback))
    return (name.strip("-") or fallback)[:60]


def chart_config(fmt: str = "png", name: str = "chart") -> dict:
    """Plotly's config for a chart: the modebar always shown, its camera button writing ``fmt`` at
    :data:`PRESENTER_SIZE` (scale 1: the file is exactly that many pixels / SVG units)."""
    width, height = PRESENTER_SIZE
    return {"displayModeBar": True, "displaylogo": False,
            "toImageButtonOptions": {"format": fmt if fmt in FORMATS else "png", "filename": name,
                                     "width": width, "height": height, "scale": 1}}


def _json(fig: go.Figure) -> str:
    return pio.to_json(fig, validate=False).replace("</", "<\\/")


def figure_html(fig: go.Figure) -> str:
    """One chart as a standalone HTML file (Plotly's bundle inline, ``include_plotlyjs=True``; opens with no
    network), its modebar's camera button at the presenter size."""
    return fig.to_html(full_html=True, include_plotlyjs=True, config=chart_config("png", filename(fig)),
                       default_width="100%", default_height="90vh", validate=False)


PAGE_CSS = """body{font-family:system-ui,sans-serif;margin:1.5rem;color:#111}
h1{font-size:1.5rem} .chart{width:100%;min-height:480px;margin:1rem 0}"""


def charts_html(figs: Sequence[go.Figure], title: str) -> str:
    """Charts one under another in one offline HTML file (one inline plotly.js)."""
    parts = []
    for k, fig in enumerate(figs):
        parts.append(f'<div class="chart" id="chart-{k}"></div>'
                     f'<script type="application/json" id="fig-{k}">{_json(fig)}</script>')
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{PAGE_CSS}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<h1>{html.escape(title)}</h1>{''.join(parts)}<script>{_DRAW_JS}"
            f"for (let k = 0; k < {len(figs)}; k++) draw(k);</script></body></html>")


# draw(k): figure k from its JSON block into div chart-k, once; the file's config shows the modebar at the
# presenter size (its own PNG button works offline too).
_DRAW_JS = """const CONFIG = %s;
function draw(k) {
  const div = document.getElementById('chart-' + k);
  if (!div || div.dataset.drawn) { if (div) Plotly.Plots.resize(div); return; }
  const fig = JSON.parse(document.getElementById('fig-' + k).textContent);
  div.dataset.drawn = '1';
  Plotly.newPlot(div, fig.data, fig.layout, CONFIG);
}
""".replace("%s", json.dumps({**chart_config("png"), "responsive": True}), 1)


@dataclass(frozen=True)
class Slide:
    """One Tour step as a slide: its title, lesson sentence, caption and figures."""

    title: str
    lesson: str
    caption: str
    figures: tuple[go.Figure, ...]


DECK_CSS = """html,body{margin:0;height:100%;font-family:system-ui,sans-serif;color:#111;background:#fff}
.slide{display:none;box-sizing:border-box;height:100vh;padding:1.5rem 2rem;flex-direction:column}
.slide.on{display:flex} h1{font-size:2rem;margin:0 0 .5rem} p.lesson{font-size:1.3rem;margin:.25rem 0}
.figs{display:flex;gap:1rem;flex:1;min-height:0} .chart{flex:1;min-width:0;min-height:360px}
p.caption{font-size:1rem;color:#444;margin:.25rem 0}
.nav{position:fixed;right:1rem;bottom:.5rem;color:#666}"""

_DECK_JS = """const slides = Array.from(document.querySelectorAll('.slide'));
let at = 0;
function show(i) {
  at = Math.max(0, Math.min(slides.length - 1, i));
  slides.forEach((s, j) => s.classList.toggle('on', j === at));
  slides[at].querySelectorAll('.chart').forEach(d => draw(Number(d.id.slice(6))));
  document.getElementById('where').textContent = (at + 1) + ' / ' + slides.length;
}
document.addEventListener('keydown', e => {
  if (['ArrowRight', 'PageDown', ' '].includes(e.key)) { show(at + 1); e.preventDefault(); }
  else if (['ArrowLeft', 'PageUp'].includes(e.key)) { show(at - 1); e.preventDefault(); }
  else if (e.key === 'Home') show(0);
  else if (e.key === 'End') show(slides.length - 1);
});
show(0);
"""


def slide_figure(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` styled for a projector (:func:`ui.figures.present`) that fills its slide: no fixed
    width or height (the slide's chart box sizes it)."""
    out = figures.present(go.Figure(fig))
    out.layout.height = None
    out.layout.width = None
    out.layout.autosize = True
    return out


def deck_html(slides: Sequence[Slide], title: str = "Attention Lab · Tour") -> str:
    """Tour steps as an offline slide deck: one slide per step (its lesson escaped, its figures in presenter
    style filling the slide), one inline plotly.js, arrow keys to move. A slide's charts are drawn when it is
    first shown (a hidden div has no size to draw at)."""
    body, k = [], 0
    for i, s in enumerate(slides, start=1):
        charts = []
        for fig in s.figures:
            data = _json(slide_figure(fig))
            charts.append(f'<div class="chart" id="chart-{k}"></div>'
                          f'<script type="application/json" id="fig-{k}">{data}</script>')
            k += 1
        body.append(f'<section class="slide" data-step="{i}"><h1>{html.escape(s.title)}</h1>'
                    f'<p class="lesson">{html.escape(s.lesson)}</p><div class="figs">{"".join(charts)}</div>'
                    f'<p class="caption">{html.escape(s.caption)}</p></section>')
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{DECK_CSS}</style><script>{get_plotlyjs()}</script></head><body>{''.join(body)}"
            f'<div class="nav">← → <span id="where"></span></div><script>{_DRAW_JS}{_DECK_JS}</script>'
            "</body></html>")


@dataclass(frozen=True)
class Sheet:
    """One worksheet entry: the step's number and title, its question and the link to the step."""

    number: int
    title: str
    question: Question
    url: str


SHEET_CSS = """body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;color:#111}
.q{break-inside:avoid;border-top:1px solid #999;padding:.5rem 0 1rem} ol.opts li{margin:.4rem 0}
.box{border:1px solid #666;height:3.5rem;margin-top:.5rem} .why{height:4.5rem;border-bottom:1px dotted #999}
a{word-break:break-all} @media print{a{color:#111}}"""


def worksheet_html(items: Sequence[Sheet], title: str = "Attention Lab · Tour worksheet") -> str:
    """The Tour's questions as a printable page: each with its link, its options to tick or a box for a
    number, and lines for the why. Print it to PDF from the browser (no PDF library on the server)."""
    qs = []
    for it in items:
        q = it.question
        if q.numeric:
            answer = f'<div class="box" aria-label="answer">{html.escape(q.unit)}</div>'
        else:
            ticks = "".join(f"<li>☐ {html.escape(o)}</li>" for o in q.options)
            answer = f'<ol class="opts" type="A">{ticks}</ol>'
        qs.append(f'<div class="q"><h2>Step {it.number} · {html.escape(it.title)}</h2>'
                  f"<p>{html.escape(q.prompt)}</p>{answer}<p>Why? (one sentence)</p><div class=\"why\"></div>"
                  f'<p>Check it: <a href="{html.escape(it.url, quote=True)}">{html.escape(it.url)}</a></p>'
                  "</div>")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{SHEET_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            "<p>Name: ____________________ &nbsp; Predict first, then open the link and press Reveal. "
            "(To keep it as a PDF: the browser's Print → Save as PDF.)</p>"
            f"{''.join(qs)}</body></html>")
