"""The page registry: one entry per page, used by the sidebar navigation and the home cards."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAGES", "PageEntry"]


@dataclass(frozen=True)
class PageEntry:
    path: str  # script path relative to the app root
    label: str
    icon: str
    summary: str


PAGES: tuple[PageEntry, ...] = (
    PageEntry("pages/1_Heatmaps.py", "Heatmaps", ":material/grid_on:",
              "Attention weights and the stages that make them: raw, scaled and masked scores, "
              "weights. Masks (causal, padding, sliding window, packed documents), scoring "
              "functions, normalisers, heads and grouped-query attention, and a compare mode."),
)

# Entropy vs length page (issue 3).
PAGES = PAGES + (
    PageEntry("pages/2_Entropy_vs_length.py", "Entropy vs length", ":material/trending_up:",
              "How a softmax row flattens as the context grows: entropy, max weight, effective support and "
              "output scale streamed to 2²⁴ keys against exact theory; scale rules (1/√d, SSMax, Llama 4), "
              "temperatures and normalisers; SSMax's figure 1."),
)
