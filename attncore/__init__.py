"""attncore: the compute core of Attention Lab (torch and numpy; no UI imports).

Shape vocabulary, the same in every module's docstrings and ``# (..)`` comments:

=======  ==============================================================
``B``    batch
``H``    (query) heads
``Hkv``  key/value heads (grouped-query attention: ``H`` a multiple of ``Hkv``)
``L``    queries (rows of an attention map)
``S``    keys (columns of an attention map)
``E``    query/key head dim (``d`` in formulas: ``1/sqrt(d)``)
``Ev``   value head dim
``N``    layers of a model
``n``    keys one row sees: ``S`` less the masked ones; in the streaming sweeps
         (:mod:`attncore.sweeps`), where nothing is materialised, the row length
``K``    keys per streamed block (sweeps)
``Lt``   query rows per logit tile (sweeps)
``P``    points of a parameter sweep (a logit scale, a strength, ...)
``D``    points of a head-dim grid (``D_GRID``); in :mod:`attncore.sinks` the gate input dim
``G``    gate width (sinks: ``Ev`` elementwise, 1 headwise)
``M``    Monte Carlo samples
``T``    dtypes compared side by side
=======  ==============================================================

Modules by concept: ``attention`` (the reference SDPA and its stages), ``masks``,
``normalizers``, ``scoring``, ``scale_rules``, ``stats`` (row statistics), ``theory``
(closed forms) and ``row_theory`` (exact expectations by quadrature), ``synthetic`` and
``explore`` (seeded inputs), ``sweeps`` (streaming statistics against length),
``gradients`` (saturation and the softmax Jacobian), ``sinks``, ``models`` (a real
model's attentions), ``qkv`` (its heads' q, k, v and outputs), ``dtypes``, ``device``,
``budget`` (limits), ``errors``.
"""

from attncore.attention import AttentionStages, attention, attention_stages
from attncore.device import describe_device, resolve_device
from attncore.errors import AttnInputError, ResourceLimitError
from attncore.gradients import (
    jacobian_frobenius,
    naive_softmax,
    softmax_jacobian,
    softmax_vjp,
    stable_softmax,
)
from attncore.models import LoadedModel, TextAttention, load_model, run_text
from attncore.normalizers import NORMALIZER_NAMES, Normalizer, get_normalizer
from attncore.row_theory import gaussian_row_expectations, sweep_theory
from attncore.sinks import SinkSpec, normaliser_zoo, sink_head_share, sink_report, sink_scores
from attncore.sweeps import SweepCancelled, SweepSpec, entropy_vs_length, reference_sweep

__all__ = [
    "NORMALIZER_NAMES",
    "AttentionStages",
    "AttnInputError",
    "LoadedModel",
    "Normalizer",
    "ResourceLimitError",
    "SinkSpec",
    "SweepCancelled",
    "SweepSpec",
    "TextAttention",
    "attention",
    "attention_stages",
    "describe_device",
    "entropy_vs_length",
    "gaussian_row_expectations",
    "get_normalizer",
    "jacobian_frobenius",
    "load_model",
    "naive_softmax",
    "normaliser_zoo",
    "reference_sweep",
    "resolve_device",
    "run_text",
    "sink_head_share",
    "sink_report",
    "sink_scores",
    "softmax_jacobian",
    "softmax_vjp",
    "stable_softmax",
    "sweep_theory",
]

__version__ = "0.1.0"
