"""The Tour's step on the 1/√d intervention on a real model (SmolLM2): every logit times c at inference, on
the shipped text's first :data:`TOUR_L` tokens, through the Saturation page's own store and builders. Its show
function returns the fields of :class:`ui.tour.Shown` (``ui.tour`` wraps them; no import back)."""

from __future__ import annotations

from typing import Any

from attncore.decoder.scaling import FACTORS
from ui import cached_models, cached_scaling
from ui.saturation_real import all_runs
from ui.views import saturation_real as view
from ui.views import saturation_real_text as words

__all__ = ["TOUR_L", "show_real_scale"]

TOUR_L = 64  # 7 passes of 64 tokens: about a second on an idle machine


def show_real_scale(ctx: Any, where: Any) -> dict[str, Any]:
    """The step: the intervention's four panels and its lesson, and the page's state ("Open this in full")."""
    lm = cached_models.language_model("smollm2", ctx.device)
    runs = all_runs(ctx, TOUR_L, lm)
    gauss = cached_scaling.gaussian_rows(FACTORS, TOUR_L, ctx.seed).value
    at = words.gauss_at(gauss, FACTORS)
    one, eight = (next(r for r in runs if r.factor == c) for c in (1.0, 8.0))
    lesson = words.tour_lesson(TOUR_L, one, eight, at[1.0]["above90"], at[8.0]["above90"])
    return {"figures": (view.scale_figure(runs, FACTORS, gauss),), "lesson": lesson,
            "query": {"sat_tab": "Real model", "sat_rl": str(TOUR_L)},
            "caption": (f"SmolLM2-135M on the shipped text's first {TOUR_L} tokens, one forward pass per c "
                        "with every head's scaling set to c/√d; dashed: i.i.d. N(0, c²) logits on the same "
                        "rows. " + words.CAVEAT),
            "numbers": {"perplexity": [r.perplexity for r in runs],
                        "saturated": [r.saturated90 for r in runs]}}
