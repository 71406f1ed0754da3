"""What each page sends to the browser at its first render (issue 34, "Fast"): deterministic numbers.

Wall-clock times on a shared, loaded machine say little; what a page *sends* does not depend on the
load. For every page (``ui.nav.PAGES`` and the home page) opened at its default URL in Streamlit's
AppTest, this prints the charts the first script run draws and the bytes of their Plotly JSON, split
into charts in the open part of the page and charts inside a closed expander (sent all the same; an
expander or tab that computes its content only when opened sends nothing until then), and the largest
chart; then the other elements a new tab must lay out with its first chart (issue 34): data grids
(``st.dataframe``: each loads about 1.5 MB of grid JavaScript in the browser), HTML tables
(``st.table``: every cell a Markdown block) with their bytes, formulas (``st.latex``, typeset by KaTeX)
and the characters of Markdown text, all as sent, in closed expanders too.

``--against REF`` runs the same measurement on the committed tree of ``REF`` (``git archive`` into a
temporary folder, same virtual environment) and prints both beside each other with the ratio, in one run.

A benchmark, not an assertion: prints, never fails on a number.

Run:  python -m bench.payload [--only Tour,Training] [--against main]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.common import json_on_tree

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Chart:
    view: str
    bytes: int
    hidden: bool  # inside an expander that is closed at first render


@dataclass
class Others:
    """The first render's other heavy elements (the main area, closed expanders included)."""

    grids: int = 0  # st.dataframe
    tables: int = 0  # st.table
    table_bytes: int = 0  # the tables' Arrow data
    formulas: int = 0  # st.latex
    text: int = 0  # characters of Markdown, captions and formulas


@dataclass
class PagePayload:
    label: str
    charts: list[Chart] = field(default_factory=list)
    error: str = ""
    others: Others = field(default_factory=Others)

    @property
    def shown(self) -> list[Chart]:
        return [c for c in self.charts if not c.hidden]

    def total(self, charts: list[Chart] | None = None) -> int:
        return sum(c.bytes for c in (self.charts if charts is None else charts))


def _walk(node, hidden: bool, out: list[Chart], others: Others | None = None) -> None:
    """Every plotly chart under ``node``, with whether a closed expander hides it; the other heavy elements
    counted into ``others``."""
    kind = getattr(node, "type", "")
    if kind == "plotly_chart":
        spec = json.loads(node.proto.spec)
        view = str(((spec.get("layout") or {}).get("meta") or {}).get("view") or "?")
        out.append(Chart(view, len(node.proto.spec.encode()) + len(node.proto.config.encode()), hidden))
        return
    if others is not None:
        if kind in ("dataframe", "table"):
            size = len(node.proto.arrow_data.data)
            others.grids += kind == "dataframe"
            others.tables += kind == "table"
            others.table_bytes += size if kind == "table" else 0
        elif kind == "latex":
            others.formulas += 1
            others.text += len(node.value)
        elif kind in ("markdown", "caption"):
            others.text += len(node.value)
    if kind == "expander":  # AppTest's block: its proto is the Expandable message itself
        hidden = hidden or not bool(node.proto.expanded)
    for child in getattr(node, "children", {}).values():
        _walk(child, hidden, out, others)


def first_render(at) -> PagePayload:
    """What the script run of ``at`` (an AppTest that has run) sent to the main area."""
    res = PagePayload("")
    _walk(at._tree[0], False, res.charts, res.others)  # the main area (the sidebar holds no charts)
    return res


def measure(labels: list[str] | None) -> list[PagePayload]:
    """Open every page in AppTest (entered through app.py, as in the browser) and read its charts."""
    sys.path.insert(0, str(Path.cwd()))
    from streamlit.testing.v1 import AppTest

    from ui.nav import PAGES

    pages = [("Home", "app.py")] + [(e.label, e.path) for e in PAGES]
    out = []
    for label, path in pages:
        if labels and not any(w.lower() in label.lower() for w in labels):
            continue
        res = PagePayload(label)
        try:
            at = AppTest.from_file(str(Path.cwd() / "app.py"), default_timeout=600)
            if path != "app.py":
                at.switch_page(path)
            at.run()
            if at.exception:
                res.error = str(at.exception[0].value)[:200]
            got = first_render(at)
            res.charts, res.others = got.charts, got.others
        except Exception as exc:  # a benchmark reports, it does not stop
            res.error = f"{type(exc).__name__}: {exc}"[:200]
        out.append(res)
    return out


def _against(ref: str, labels: list[str] | None) -> list[PagePayload]:
    """The same measurement on the committed tree of ``ref``, in a subprocess."""
    rows = json_on_tree(ref, __file__, ["--only", ",".join(labels)] if labels else [])
    return [PagePayload(r["label"], [Chart(**c) for c in r["charts"]], r["error"],
                        Others(**r.get("others", {}))) for r in rows]


def _kb(n: int) -> str:
    return f"{n / 1024:7.1f}"


def _others(o: Others) -> str:
    return f"{o.grids:>5} {o.tables:>6} {_kb(o.table_bytes)} {o.formulas:>8} {_kb(o.text)}"


def report(ours: list[PagePayload], base: list[PagePayload] | None, ref: str) -> None:
    by = {p.label: p for p in base or []}
    head = f"{'page':<24} {'charts':>6} {'open':>5} {'KB':>7} {'open KB':>7} {'largest chart':<26}"
    if base is not None:
        head += f" | {ref}: {'charts':>6} {'open':>5} {'KB':>7} {'open KB':>7}  ratio open KB"
    print(head)
    for p in ours:
        big = max(p.charts, key=lambda c: c.bytes, default=None)
        largest = f"{big.view} {big.bytes / 1024:.1f} KB" if big else "-"
        line = (f"{p.label:<24} {len(p.charts):>6} {len(p.shown):>5} {_kb(p.total())} "
                f"{_kb(p.total(p.shown))} {largest:<26}")
        b = by.get(p.label)
        if base is not None:
            if b is None:
                line += " | (page not in " + ref + ")"
            else:
                ratio = p.total(p.shown) / b.total(b.shown) if b.total(b.shown) else float("nan")
                line += (f" | {'':>{len(ref) + 1}} {len(b.charts):>6} {len(b.shown):>5} {_kb(b.total())} "
                         f"{_kb(b.total(b.shown))}  {ratio:6.2f}")
        if p.error:
            line += f"  ERROR {p.error}"
        print(line)
    cols = f"{'grids':>5} {'tables':>6} {'tbl KB':>7} {'formulas':>8} {'text KB':>7}"
    print(f"\nother elements sent with the first chart\n{'page':<24} {cols}"
          + (f" | {ref}: {cols}" if base else ""))
    for p in ours:
        b = by.get(p.label)
        print(f"{p.label:<24} {_others(p.others)}"
              + (f" | {'':>{len(ref) + 1}} {_others(b.others)}" if b else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated parts of page labels")
    ap.add_argument("--against", default="", help="a git ref to measure beside this tree")
    ap.add_argument("--json", action="store_true", help="print the measurement as JSON (one line)")
    ap.add_argument("--detail", action="store_true", help="list every chart")
    a = ap.parse_args()
    labels = [w for w in a.only.split(",") if w] or None
    ours = measure(labels)
    if a.json:
        print(json.dumps([{"label": p.label, "charts": [asdict(c) for c in p.charts], "error": p.error,
                           "others": asdict(p.others)} for p in ours]))
        return
    base = _against(a.against, labels) if a.against else None
    report(ours, base, a.against)
    if a.detail:
        for p in ours:
            items = [f"{c.view}{' (closed)' if c.hidden else ''} {c.bytes / 1024:.1f} KB" for c in p.charts]
            print(f"\n{p.label}: " + ", ".join(items))


if __name__ == "__main__":
    main()
