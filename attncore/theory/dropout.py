"""Closed forms for attention dropout (inverted dropout of the weights).

Each weight ``w`` is kept with probability ``1 - p`` and divided by ``1 - p``: ``w m / (1 - p)``
with ``m ~ Bernoulli(1 - p)``. The output ``o = sum_j w_j m_j v_j / (1 - p)`` then has the
no-dropout output as its expectation and, per entry, the variance
``p / (1 - p) * sum_j w_j^2 v_j^2``.

Shape legend: ``...`` leading dims, ``L`` queries, ``S`` keys, ``Ev`` value dim.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dropout_keep_scale", "dropout_output_std"]


def dropout_keep_scale(p: float) -> float:
    """The factor a kept weight is multiplied by, ``1 / (1 - p)``, which makes the mean unbiased."""
    return 1.0 / (1.0 - p)


def dropout_output_std(weights: Any, value: Any, p: float) -> Any:
    """Std of one dropout draw's output per entry: ``sqrt(p / (1 - p) * (weights**2 @ value**2))``.

    Args:
        weights: (..., L, S) weights before dropout (numpy array or torch tensor).
        value: (..., S, Ev) values (same kind as ``weights``).
        p: dropout probability in [0, 1).

    Returns:
        (..., L, Ev), the same kind as the inputs.
    """
    return (p / (1.0 - p) * ((weights * weights) @ (value * value))) ** 0.5
