"""Real transformers, offline: load a model once, run text through it, return every attention map.

Shape legend: ``N`` layers, ``H`` query heads, ``Hkv`` key/value heads, ``L`` tokens (queries and keys).

One package, by concept:

- :mod:`attncore.models.bundled`: the models that ship with the app: all-MiniLM-L6-v2 (``"minilm"``,
  a BERT encoder) and SmolLM2-135M-Instruct (``"smollm2"``, 4-bit (Q4_1) weights dequantised to
  float32, a Llama-family decoder with grouped-query attention), and SmolLM2's converted copy;
- :mod:`attncore.models.folders`: local Hugging Face folders inside ``ATTNLAB_MODEL_DIRS`` and
  their safety checks;
- :mod:`attncore.models.loading`: :func:`load_model` (memory estimated first) and
  :class:`LoadedModel`;
- :mod:`attncore.models.capture`: :func:`tokenize` and :func:`run_text`, every attention map of
  one forward pass as a :class:`TextAttention`, the one contract every architecture returns (the
  per-head q, k, v of the same pass: :func:`attncore.qkv.capture`).

Nothing is downloaded at run time (``HF_HUB_OFFLINE=1`` is set before transformers is imported).
"""

from __future__ import annotations

import os

# transformers is imported lazily in load_model(); the hub must stay offline by then.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from attncore.models.bundled import (  # noqa: E402
    BUNDLED,
    BUNDLED_LABEL,
    BUNDLED_MODELS,
    MINILM,
    MODEL_CACHE_ENV,
    SMOLLM2,
    Bundled,
    Progress,
    converted_copy,
    model_cache_dir,
)
from attncore.models.capture import (  # noqa: E402
    HeadSummary,
    TextAttention,
    Tokenized,
    decoder_pass_bytes,
    run_text,
    summary_of,
    token_kinds,
    tokenize,
)
from attncore.models.folders import (  # noqa: E402
    MAX_MODEL_BYTES,
    MODEL_DIRS_ENV,
    allowed_model_dirs,
    discover_models,
    resolve_model_folder,
)
from attncore.models.loading import (  # noqa: E402
    MAX_DECODER_TOKENS,
    MAX_MODEL_CELLS,
    MAX_TEXT_CHARS,
    MAX_TOKENS,
    LoadedModel,
    canonical_source,
    load_bytes,
    load_model,
    wrap_model,
)

__all__ = [
    "BUNDLED",
    "BUNDLED_LABEL",
    "BUNDLED_MODELS",
    "MAX_DECODER_TOKENS",
    "MAX_MODEL_BYTES",
    "MAX_MODEL_CELLS",
    "MAX_TEXT_CHARS",
    "MAX_TOKENS",
    "MINILM",
    "MODEL_CACHE_ENV",
    "MODEL_DIRS_ENV",
    "SMOLLM2",
    "Bundled",
    "HeadSummary",
    "LoadedModel",
    "Progress",
    "TextAttention",
    "Tokenized",
    "allowed_model_dirs",
    "canonical_source",
    "converted_copy",
    "decoder_pass_bytes",
    "discover_models",
    "load_bytes",
    "load_model",
    "model_cache_dir",
    "resolve_model_folder",
    "run_text",
    "summary_of",
    "token_kinds",
    "tokenize",
    "wrap_model",
]
