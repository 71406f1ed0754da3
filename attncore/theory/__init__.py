"""Closed forms drawn next to the measurements, one module per concept.

Every function takes plain numbers (or numpy arrays) and returns the same kind (a float for
scalar input), so the UI can evaluate a curve on a grid without touching torch:

* :mod:`~attncore.theory.dot_products`: the variance, law and kurtosis of q·k;
* :mod:`~attncore.theory.saturation`: softmax saturation, the Jacobian's norm, float overflow;
* :mod:`~attncore.theory.sinks`: mean-field sinks, softmax1, sigmoid attention and gates;
* :mod:`~attncore.theory.dropout`: inverted dropout's unbiased mean and the std of one draw;
* :mod:`~attncore.theory.rows`: large-n forms for a row of n Gaussian logits (the exact
  expectations by quadrature are in :mod:`attncore.row_theory`).

Import from the package (``from attncore import theory``; ``theory.peak_weight(...)``).
"""

from __future__ import annotations

from attncore.theory.dot_products import (
    INITS,
    dot_product_density,
    dot_product_kurtosis,
    dot_product_std,
    dot_product_variance,
    init_score_ratio,
    init_weight_variance,
    normal_density,
    sample_std_error,
    scaled_logit_std,
    uniform_entropy,
)
from attncore.theory.dropout import dropout_keep_scale, dropout_output_std
from attncore.theory.rows import (
    asymptote_valid_from,
    entropy_asymptote,
    entropy_corrected,
    freezing_length,
    fully_scaled_multiplier,
    gaussian_max_moment,
    margin_for_half_weight,
    max_weight_asymptote,
    output_std_flat,
    output_std_lognormal,
    output_std_onehot,
    peak_weight,
    scaled_chi2_mgf,
    ssmax_margin_for_half_weight,
)
from attncore.theory.saturation import (
    exp_overflow_logit,
    expected_max_normal,
    inverse_chi_mean,
    jacobian_norm_large_scale,
    jacobian_norm_small_scale,
    max_weight_large_scale,
    max_weight_small_scale,
    saturated_jacobian_bound,
    saturation_jacobian_norm,
    saturation_other_weight,
    saturation_threshold,
    saturation_top_weight,
    top2_gap_density_at_zero,
    uniform_row_jacobian_norm,
    unscaled_jacobian_norm_large_d,
    unscaled_max_weight_large_d,
)
from attncore.theory.sinks import (
    gate_bias_for_mean,
    gate_mean_theory,
    gate_rms_theory,
    gaussian_expectation,
    real_mass_theory,
    relu_mass_theory,
    relu_output_rms_theory,
    sigmoid_mass_theory,
    sigmoid_output_rms_theory,
    sink_weight_theory,
    softmax_output_rms_theory,
    uniform_share,
)

__all__ = [
    "INITS",
    "asymptote_valid_from",
    "dot_product_density",
    "dot_product_kurtosis",
    "dot_product_std",
    "dot_product_variance",
    "dropout_keep_scale",
    "dropout_output_std",
    "entropy_asymptote",
    "entropy_corrected",
    "exp_overflow_logit",
    "expected_max_normal",
    "freezing_length",
    "fully_scaled_multiplier",
    "gate_bias_for_mean",
    "gate_mean_theory",
    "gate_rms_theory",
    "gaussian_expectation",
    "gaussian_max_moment",
    "init_score_ratio",
    "init_weight_variance",
    "inverse_chi_mean",
    "jacobian_norm_large_scale",
    "jacobian_norm_small_scale",
    "margin_for_half_weight",
    "max_weight_asymptote",
    "max_weight_large_scale",
    "max_weight_small_scale",
    "normal_density",
    "output_std_flat",
    "output_std_lognormal",
    "output_std_onehot",
    "peak_weight",
    "real_mass_theory",
    "relu_mass_theory",
    "relu_output_rms_theory",
    "sample_std_error",
    "saturated_jacobian_bound",
    "saturation_jacobian_norm",
    "saturation_other_weight",
    "saturation_threshold",
    "saturation_top_weight",
    "scaled_chi2_mgf",
    "scaled_logit_std",
    "sigmoid_mass_theory",
    "sigmoid_output_rms_theory",
    "sink_weight_theory",
    "softmax_output_rms_theory",
    "ssmax_margin_for_half_weight",
    "top2_gap_density_at_zero",
    "uniform_entropy",
    "uniform_row_jacobian_norm",
    "uniform_share",
    "unscaled_jacobian_norm_large_d",
    "unscaled_max_weight_large_d",
]
