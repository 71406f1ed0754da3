"""Label defects a browser can see and AppTest cannot (issue 34), measured in the page Chromium drew.

:data:`LABEL_CHECK_JS` returns, for every visible Plotly chart and metric on the page, the defects of four
classes (each a list of strings, empty when the page is clean):

* ``ticks``: two tick labels of one axis whose boxes overlap (labels piled into one block);
* ``legend``: a legend swatch whose colour is not the colour its series is drawn in (a pale band's fill
  standing for a line, so two series look alike);
* ``colorbar``: a colour bar (with its tick labels and title) that reaches into a plot area of its figure,
  past its figure's edge (cut off) or into another chart on the page (the panel beside it);
* ``metric``: a metric whose value or label is cut (its text wider than its box: "11.952 ± 0….");
* ``notes``: a note or title of a chart (its own, an axis's) drawn over another (a status label over a panel's
  title; a rotated y-axis title longer than its plot reaching into the chart's title).

:func:`label_defects` runs it; the browser tests call it over every page's default view and presenter mode.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

__all__ = ["LABEL_CHECK_JS", "label_defects"]

LABEL_CHECK_JS = r"""() => {
  const out = {ticks: [], legend: [], colorbar: [], metric: [], notes: [], charts: 0, metrics: 0};
  const canvas = document.createElement('canvas').getContext('2d');
  const rgba = c => {  // any CSS colour -> [r, g, b, a]
    if (!c || c === 'none') return null;
    canvas.fillStyle = '#000'; canvas.fillStyle = c;
    const s = canvas.fillStyle;
    if (s[0] === '#') return [parseInt(s.slice(1, 3), 16), parseInt(s.slice(3, 5), 16), parseInt(s.slice(5, 7), 16), 1];
    const m = s.match(/[\d.]+/g).map(Number);
    return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1];
  };
  const box = el => el.getBoundingClientRect();
  const visible = r => r.width > 0.5 && r.height > 0.5;
  const overlap = (a, b, slack) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > slack &&
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > slack;
  const name = gd => ((gd.layout && gd.layout.meta && gd.layout.meta.view) || '?');
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot')).filter(gd => visible(box(gd)));
  for (const gd of plots) {
    out.charts += 1;
    const view = name(gd);
    // 1. tick labels of one axis (one layer of one subplot) must not overlap
    // Rotated labels (a long category axis) are compared across their slant: anchors d px apart along the
    // axis leave d·|sin θ| px between two lines of text, which must hold the font's height.
    const rotation = t => {  // the text's slant and its anchor on screen, from its transform
      const m = t.getScreenCTM();
      if (!m) return null;
      const deg = Math.atan2(m.b, m.a) * 180 / Math.PI;
      if (Math.abs(deg) % 180 < 5) return null;
      const x0 = t.x.baseVal.length ? t.x.baseVal[0].value : 0, y0 = t.y.baseVal.length ? t.y.baseVal[0].value : 0;
      return {deg, x: m.a * x0 + m.c * y0 + m.e, y: m.b * x0 + m.d * y0 + m.f};
    };
    // Upright labels clash when their boxes overlap by more than a third of a line (a text box holds the
    // font's ascent and descent: adjacent rows of small text touch without covering each other).
    const covers = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
      Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.33 * Math.min(a.height, b.height);
    for (const layer of gd.querySelectorAll('.xaxislayer-above, .yaxislayer-above')) {
      const isX = layer.classList.contains('xaxislayer-above');
      const texts = Array.from(layer.querySelectorAll('.xtick text, .ytick text'))
        .filter(t => (t.textContent || '').trim())
        .map(t => ({text: t.textContent, r: box(t), rot: rotation(t), fs: parseFloat(getComputedStyle(t).fontSize)}))
        .filter(t => visible(t.r));
      const clash = (a, b) => {
        if (a.rot && b.rot) {
          const d = isX ? Math.abs(a.rot.x - b.rot.x) : Math.abs(a.rot.y - b.rot.y);
          return d * Math.abs(Math.sin(a.rot.deg * Math.PI / 180)) < 0.8 * Math.min(a.fs, b.fs);
        }
        return covers(a.r, b.r);
      };
      for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++)
        if (clash(texts[i], texts[j])) {
          out.ticks.push(`${view}: tick labels '${texts[i].text}' and '${texts[j].text}' overlap`);
          i = texts.length; break;
        }
    }
    // 2. a legend swatch shows the colour its series is drawn in
    const full = gd._fullData || [];
    const drawnColour = tr => {  // the colour a trace is seen in: its line, else its markers, else its fill
      const lineOn = (tr.mode || '').includes('lines') && tr.line && tr.line.width !== 0;
      if (tr.type === 'scatter' && lineOn && typeof tr.line.color === 'string') return rgba(tr.line.color);
      if (tr.marker && typeof tr.marker.color === 'string' && ((tr.mode || '').includes('markers') || tr.type !== 'scatter'))
        return rgba(tr.marker.color);
      if (tr.fill && tr.fill !== 'none' && typeof tr.fillcolor === 'string') return rgba(tr.fillcolor);
      return null;
    };
    for (const item of gd.querySelectorAll('.legend .traces')) {
      const d = item.__data__ && item.__data__[0] && item.__data__[0].trace;
      if (!d || !visible(box(item))) continue;
      const group = d.legendgroup || '';
      const peers = full.filter(t => t.visible !== false && (group ? t.legendgroup === group : t === d));
      // the series a reader looks for: a drawn line or markers in the group (a band's fill only if alone)
      const strong = peers.map(drawnColour).filter(c => c && c[3] >= 0.5);
      if (!strong.length) continue;
      const want = strong[0];
      const paths = Array.from(item.querySelectorAll('.legendlines path, .legendpoints path, .legendfill path, .legendundefined path, path.legendbar, path.legend3dandfriends, .legendpoints .scatterpts'))
        .filter(p => { const r = box(p); return r.width > 0.5 || r.height > 0.5; });  // a line is 0 px high
      const seen = paths.map(p => {
        const st = getComputedStyle(p);
        const stroke = rgba(st.stroke), fill = rgba(st.fill);
        const so = parseFloat(st.strokeOpacity || '1') * parseFloat(st.opacity || '1');
        const fo = parseFloat(st.fillOpacity || '1') * parseFloat(st.opacity || '1');
        const c = [];
        if (stroke && parseFloat(st.strokeWidth || '0') > 0) c.push([stroke[0], stroke[1], stroke[2], stroke[3] * so]);
        if (fill) c.push([fill[0], fill[1], fill[2], fill[3] * fo]);
        return c;
      }).flat();
      const close = c => Math.abs(c[0] - want[0]) + Math.abs(c[1] - want[1]) + Math.abs(c[2] - want[2]) <= 24 && c[3] >= 0.5;
      if (!seen.some(close)) {
        const label = (item.textContent || '').trim();
        out.legend.push(`${view}: legend '${label}' swatch ${JSON.stringify(seen.map(c => c.map(v => Math.round(v * 100) / 100)))} is not its series' colour ${JSON.stringify(want)}`);
      }
    }
    // 3. colour bars stay clear of plot areas, inside their figure, and off other charts
    const svg = gd.querySelector('.main-svg');
    const fig = svg ? box(svg) : box(gd);
    const areas = Array.from(gd.querySelectorAll('.draglayer .nsewdrag')).map(box).filter(visible);
    for (const cb of gd.querySelectorAll('.colorbar')) {
      const parts = Array.from(cb.querySelectorAll('text, rect.cbbg, .cbfills rect')).map(box).filter(visible);
      if (!parts.length) continue;
      const r = {left: Math.min(...parts.map(p => p.left)), right: Math.max(...parts.map(p => p.right)),
                 top: Math.min(...parts.map(p => p.top)), bottom: Math.max(...parts.map(p => p.bottom))};
      const labels = Array.from(cb.querySelectorAll('text')).map(box).filter(visible);
      if (labels.some(a => areas.some(b => overlap(a, b, 1))))
        out.colorbar.push(`${view}: a colour bar's labels reach into a plot area`);
      if (r.right > fig.right + 1 || r.left < fig.left - 1 || r.top < fig.top - 1 || r.bottom > fig.bottom + 1)
        out.colorbar.push(`${view}: a colour bar is cut by its figure's edge (${Math.round(r.left)}..${Math.round(r.right)} in ${Math.round(fig.left)}..${Math.round(fig.right)})`);
      for (const other of plots) if (other !== gd && overlap(r, box(other), 1))
        out.colorbar.push(`${view}: a colour bar reaches into the chart ${name(other)} beside it`);
    }
    // 5. titles (the chart's and its axes') and notes (annotations) of one chart do not cover each other
    const notes = Array.from(gd.querySelectorAll('.infolayer text[class$="title"], .annotation-text-g text, ' +
        '.annotation text'))  // gtitle, xtitle, x2title, ytitle, …, a colour bar's title
      .filter(t => (t.textContent || '').trim()).map(t => [t.textContent, box(t)]).filter(([, r]) => visible(r));
    for (let i = 0; i < notes.length; i++) for (let j = i + 1; j < notes.length; j++)
      if (notes[i][0] !== notes[j][0] && overlap(notes[i][1], notes[j][1], 2))
        out.notes.push(`${view}: '${notes[i][0]}' is drawn over '${notes[j][0]}'`);
  }
  // 4. metric values and labels are not cut
  for (const m of document.querySelectorAll('[data-testid=stMetric]')) {
    if (!visible(box(m))) continue;
    out.metrics += 1;
    for (const el of m.querySelectorAll('[data-testid=stMetricValue], [data-testid=stMetricValue] *, [data-testid=stMetricLabel] p, [data-testid=stMetricDelta] *')) {
      if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible') {
        out.metric.push(`metric '${(m.querySelector('[data-testid=stMetricLabel]') || m).textContent.trim()}': '${el.textContent.trim()}' is cut (${el.scrollWidth} px of text in ${el.clientWidth} px)`);
        break;
      }
    }
  }
  return out;
}"""

CLASSES = ("ticks", "legend", "colorbar", "metric", "notes")


def label_defects(page: Page) -> dict[str, Any]:
    """The label defects of the page as drawn now, by class, with the number of charts and metrics read."""
    return dict(page.evaluate(LABEL_CHECK_JS))
