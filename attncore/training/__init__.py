"""attncore.training: train a small character transformer with a chosen attention variant.

Compute only (no UI imports). :mod:`~attncore.training.config` holds the variants and
:class:`TrainConfig`; :func:`train` runs one training; :mod:`~attncore.training.inspect`
looks inside a trained model (next-character distribution, sampling, attention maps);
:mod:`~attncore.training.measure` has the first-token sink metric and the StreamingLLM
test; :mod:`~attncore.training.io` saves and loads models and reads the shipped results;
``python -m attncore.training.experiments`` makes those results.
"""

from attncore.training.config import (
    MAX_TRAIN_BYTES,
    MAX_VOCAB,
    VARIANT_INFO,
    VARIANTS,
    TrainConfig,
    estimate_train_bytes,
)
from attncore.training.inspect import (
    MAX_INSPECT_CHARS,
    MAX_VIEW_CHARS,
    KnownText,
    attention_maps,
    char_label,
    encode,
    generate,
    known_text,
    next_char_distribution,
    next_char_probs,
    text_attention,
)
from attncore.training.io import (
    RESULT_NAMES,
    RESULTS_DIR,
    load_model,
    load_result,
    load_shipped_model,
    save_model,
    shipped_model_path,
)
from attncore.training.measure import (
    SinkMeasure,
    StreamingResult,
    first_token_sinks,
    stream_nll,
    streaming_test,
)
from attncore.training.model import CharTransformer
from attncore.training.train import (
    SATURATION_THRESHOLD,
    TrainResult,
    build_vocab,
    divergence_threshold,
    train,
)

__all__ = [
    "MAX_INSPECT_CHARS",
    "MAX_TRAIN_BYTES",
    "MAX_VIEW_CHARS",
    "MAX_VOCAB",
    "RESULTS_DIR",
    "RESULT_NAMES",
    "SATURATION_THRESHOLD",
    "VARIANTS",
    "VARIANT_INFO",
    "CharTransformer",
    "KnownText",
    "SinkMeasure",
    "StreamingResult",
    "TrainConfig",
    "TrainResult",
    "attention_maps",
    "build_vocab",
    "char_label",
    "divergence_threshold",
    "encode",
    "estimate_train_bytes",
    "first_token_sinks",
    "generate",
    "known_text",
    "load_model",
    "load_result",
    "load_shipped_model",
    "next_char_distribution",
    "next_char_probs",
    "save_model",
    "shipped_model_path",
    "stream_nll",
    "streaming_test",
    "text_attention",
    "train",
]
