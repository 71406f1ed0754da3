"""Claims about the spread of q·k, the worked examples, softmax saturation and its gradients, and scores
at initialisation (most from the "Why √d" tutorial).

One module per concept: :mod:`~attncore.evidence.scores.spread` (the variance and std of q·k, the
√d growth), :mod:`~attncore.evidence.scores.worked` (the printed rows, τ),
:mod:`~attncore.evidence.scores.saturation` (saturation, the softmax Jacobian, the gradient sweep,
overflow) and :mod:`~attncore.evidence.scores.initialisation` (Var(q·k) at initialisation).
:data:`CLAIMS` is all of them.

Each claim's live test runs the Saturation & gradients page's computation at that page's default
settings (20,000 samples of q·k, 500 per d in the std-vs-d sweep, 16 keys and a batch of 64 in the
gradient sweep, the scores [9.2, −3.1, 8.8, −5.4, 1.2] at d = 64), so the numbers here are the
numbers that page shows for the same seed and device.
"""

from __future__ import annotations

from attncore.evidence.records import Claim
from attncore.evidence.scores import initialisation, saturation, spread, worked
from attncore.evidence.scores.saturation import gradient_sweep_at_defaults
from attncore.evidence.scores.spread import SAMPLES, std_sweep_at_defaults
from attncore.evidence.scores.worked import (
    SOURCE_SCALED,
    SOURCE_SCALED_SCORES,
    SOURCE_SCORES,
    SOURCE_UNSCALED,
)

__all__ = [
    "CLAIMS",
    "SAMPLES",
    "SOURCE_SCALED",
    "SOURCE_SCALED_SCORES",
    "SOURCE_SCORES",
    "SOURCE_UNSCALED",
    "gradient_sweep_at_defaults",
    "std_sweep_at_defaults",
]

CLAIMS: tuple[Claim, ...] = spread.CLAIMS + worked.CLAIMS + saturation.CLAIMS + initialisation.CLAIMS
