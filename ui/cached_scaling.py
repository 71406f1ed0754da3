"""The cache boundary of the Saturation page's real-model tab: SmolLM2's scaled-logit statistics (planned,
:class:`ui.cached.Planned`) and the Gaussian prediction beside them. The 1/sqrt(E) intervention runs setting
by setting in :mod:`ui.saturation_real` (progress, Stop), not here."""

from __future__ import annotations

import streamlit as st
import torch

from attncore.decoder import plans as _plans
from attncore.decoder import scaling as _scaling
from attncore.plan import Plan
from ui.cached import Planned, Timed, timed
from ui.cached_decoder import shipped_ids
from ui.cached_models import language_model

__all__ = ["decoder_spread", "gaussian_rows"]


def _spread_plan(L: int, device: str) -> Plan[_scaling.LogitSpread]:
    lm = language_model("smollm2", device)
    return _plans.spread_plan(lm.model, shipped_ids(L, device))


decoder_spread = Planned("decoder_spread", _spread_plan)
"""decoder_spread(L, device): every SmolLM2 head's scaled-logit statistics on the shipped text's first L
tokens."""


@st.cache_resource(max_entries=8, show_spinner=False)
def gaussian_rows(sigmas: tuple[float, ...], L: int, seed: int) -> Timed[dict[str, torch.Tensor]]:
    """:func:`attncore.decoder.scaling.gaussian_rows` at ``sigmas`` on causal rows of ``L`` keys."""
    return timed(lambda: _scaling.gaussian_rows(sigmas, L, seed=seed))
