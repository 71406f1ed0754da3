"""attncore: the compute core of Attention Lab (no UI imports).

Shape legend used across the package: ``B`` batch, ``H`` heads, ``L`` queries,
``S`` keys, ``E`` query/key dim, ``Ev`` value dim.
"""

from attncore.attention import AttentionStages, attention, attention_stages
from attncore.device import describe_device, resolve_device
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.normalizers import NORMALIZER_NAMES, Normalizer, get_normalizer

__all__ = [
    "NORMALIZER_NAMES",
    "AttentionStages",
    "AttnInputError",
    "Normalizer",
    "ResourceLimitError",
    "attention",
    "attention_stages",
    "describe_device",
    "get_normalizer",
    "resolve_device",
]

__version__ = "0.1.0"

# Saturation & gradients page (issue 4)
from attncore.gradients import (  # noqa: E402
    jacobian_frobenius,
    naive_softmax,
    softmax_jacobian,
    softmax_vjp,
    stable_softmax,
)

__all__ += ["jacobian_frobenius", "naive_softmax", "softmax_jacobian", "softmax_vjp", "stable_softmax"]


# ---------------------------------------------------------------------------- Attention sinks page
from attncore.models import LoadedModel, TextAttention, load_model, run_text  # noqa: E402
from attncore.sinks import (  # noqa: E402
    SinkSpec,
    normaliser_zoo,
    sink_head_share,
    sink_report,
    sink_scores,
)

__all__ += [
    "LoadedModel",
    "SinkSpec",
    "TextAttention",
    "load_model",
    "normaliser_zoo",
    "run_text",
    "sink_head_share",
    "sink_report",
    "sink_scores",
]

# Entropy vs length page (issue 3): the streaming sweep engine and its exact theory.
from attncore.row_theory import gaussian_row_expectations, sweep_theory  # noqa: E402
from attncore.sweeps import SweepCancelled, SweepSpec, entropy_vs_length, reference_sweep  # noqa: E402

__all__ += [
    "SweepCancelled",
    "SweepSpec",
    "entropy_vs_length",
    "gaussian_row_expectations",
    "reference_sweep",
    "sweep_theory",
]
