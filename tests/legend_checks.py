"""Legend swatches of a Plotly figure (JSON): two entries with the same look read as one (issue 41)."""

from __future__ import annotations

from typing import Any


def _colour(tr: dict[str, Any]) -> Any:
    line, marker = tr.get("line") or {}, tr.get("marker") or {}
    c = marker.get("color") if tr.get("type") in ("bar", "histogram") or tr.get("mode") == "markers" else None
    c = c if c is not None else line.get("color", marker.get("color", tr.get("fillcolor")))
    return tuple(c) if isinstance(c, list) else c


def swatches(fig: dict[str, Any]) -> list[tuple[str, tuple]]:
    """(name, (type, mode, colour, dash, symbol)) of every trace that has a legend entry."""
    data = fig.get("data", [])
    shown = fig.get("layout", {}).get("showlegend", len(data) > 1)
    out = []
    for tr in data:
        if tr.get("showlegend") is False or (tr.get("showlegend") is None and not shown):
            continue
        if tr.get("type") in ("heatmap", "histogram2d", "contour") or not tr.get("name"):
            continue
        mode = tr.get("mode", "lines+markers" if tr.get("type", "scatter") == "scatter" else "")
        look = (tr.get("type", "scatter"), mode if "lines" in mode else "",
                _colour(tr), (tr.get("line") or {}).get("dash", "solid") if "lines" in mode else None,
                (tr.get("marker") or {}).get("symbol", "circle") if "markers" in mode else None)
        out.append((tr["name"], look))
    return out


def duplicate_swatches(fig: dict[str, Any]) -> list[tuple[str, str]]:
    """Pairs of differently named legend entries that look the same (colour, dash, symbol)."""
    seen: dict[tuple, str] = {}
    dups = []
    for name, look in swatches(fig):
        if look in seen and seen[look] != name:
            dups.append((seen[look], name))
        seen.setdefault(look, name)
    return dups
