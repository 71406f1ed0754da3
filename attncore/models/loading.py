"""Loading a model once: a bundled one (:mod:`attncore.models.bundled`) or a local folder
(:mod:`attncore.models.folders`), in eval mode, float32, with eager attention (the implementation that
can return weights). Memory is estimated before anything is read.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attncore.budget import check_bytes
from attncore.errors import AttnInputError
from attncore.models import bundled as _bundled
from attncore.models.bundled import BUNDLED_MODELS, SMOLLM2, Progress
from attncore.models.folders import resolve_model_folder
from attncore.models.modules import attention_modules, first_line

__all__ = [
    "MAX_DECODER_TOKENS",
    "MAX_MODEL_CELLS",
    "MAX_TEXT_CHARS",
    "MAX_TOKENS",
    "LoadedModel",
    "canonical_source",
    "first_line",
    "load_bytes",
    "load_model",
    "wrap_model",
]

MAX_TEXT_CHARS = 20_000  # characters tokenised at most (longer text is cut first)
MAX_TOKENS = 512  # tokens per forward pass at most for an encoder (BERT's position limit)
MAX_DECODER_TOKENS = 1024  # tokens per forward pass of a bundled decoder (maps past the cell cap: summaries)
MAX_MODEL_CELLS = 40 * 1024 * 1024  # layers x heads x L x L kept (160 MB in float32)


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for :func:`attncore.models.run_text`.

    Attributes:
        name: short label (``all-MiniLM-L6-v2``, ``SmolLM2-135M-Instruct`` or the folder name).
        path: the folder it was loaded from.
        model, tokenizer: the transformers objects (eval mode, float32).
        layers, heads: N and H of the attention maps.
        token_limit: most tokens per pass.
        device: where the model lives.
        seconds: how long loading took (first load in this process).
        kv_heads: Hkv, the key/value heads (``heads`` without grouped-query attention).
        causal: a decoder (query i sees keys j <= i).
        description: what the model is, in one phrase (the bundled ones say their precision).
        map_limit: most tokens for which every layer's maps are kept (N x H x L^2 within
            :data:`MAX_MODEL_CELLS`); longer texts keep per-head summaries and one layer's maps.
        converted: True when this load dequantised the GGUF file (the first time only).
    """

    name: str
    path: str
    model: Any
    tokenizer: Any
    layers: int
    heads: int
    token_limit: int
    device: str
    seconds: float
    kv_heads: int = 0
    causal: bool = False
    description: str = ""
    map_limit: int = 0
    converted: bool = False

    @property
    def groups(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.heads // self.kv_heads if self.kv_heads else 1

    @property
    def full_map_limit(self) -> int:
        """:attr:`map_limit`, or :attr:`token_limit` when it was not set."""
        return self.map_limit or self.token_limit


def _model_limit(config: Any, tokenizer: Any, cap: int) -> int:
    limits = [cap]
    for name in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        v = getattr(config, name, None)
        if isinstance(v, int) and v > 0:
            limits.append(v)
            break
    tm = getattr(tokenizer, "model_max_length", None)
    if isinstance(tm, int) and 0 < tm < 1_000_000:
        limits.append(tm)
    return min(limits)


def canonical_source(source: str) -> str:
    """The cache key of a model source: a bundled key (``"minilm"``, ``"smollm2"``), or the resolved
    folder after every safety check.

    Ten spellings of one folder (``a/b``, ``a/./b``, ``a/../a/b``, a symlink to it, ...) give one key,
    so a cache keyed on this loads the model once.
    """
    return source if source in BUNDLED_MODELS else str(resolve_model_folder(source))


def load_bytes(source: str) -> int:
    """Peak bytes of loading ``source`` (a bundled key or a folder), estimated before reading it."""
    if source in BUNDLED_MODELS:
        return _bundled.load_bytes(source)
    folder = Path(source)
    size = sum(f.stat().st_size for f in folder.glob("*") if f.is_file()
               and f.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    return int(1.25 * size) + 64 * 1024**2


def _load_smollm2(dev: torch.device, progress: Progress | None) -> tuple[Path, Any, Any, bool]:
    """(folder, model, tokenizer, converted now) for SmolLM2: from the float32 copy, else converted."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted = False
    copy = _bundled.converted_copy()
    model = tokenizer = None
    if copy is None:
        copy, model, tokenizer = _bundled.convert_smollm2(progress)
        converted = model is not None
    if model is None:
        if copy is None:  # pragma: no cover - convert_smollm2 returns a model or a copy
            raise AttnInputError("SmolLM2 could not be converted.")
        tokenizer = AutoTokenizer.from_pretrained(copy, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(copy, local_files_only=True, attn_implementation="eager",
                                                     dtype=torch.float32)
    folder = copy if copy is not None else _bundled.smollm2_gguf().parent
    return folder, model, tokenizer, converted


def load_model(source: str = _bundled.BUNDLED, device: torch.device | str = "cpu",
               progress: Progress | None = None) -> LoadedModel:
    """Load a model for attention maps: a bundled key (``"minilm"``, ``"smollm2"``) or a local folder path.

    The model is put in eval mode on ``device`` in float32 with eager attention. Its peak memory
    is estimated first (:func:`attncore.budget.check_bytes`). SmolLM2's first load dequantises the
    shipped 4-bit file (tens of seconds; ``progress(fraction, message)`` follows it) and keeps a
    float32 copy that later loads read. Raises :class:`AttnInputError` for a folder that is refused
    or cannot be loaded, or a missing package; never downloads anything.
    """
    t0 = time.perf_counter()
    b = BUNDLED_MODELS.get(source)
    if b is not None:
        folder = _bundled.bundled_folder(source) if b is not SMOLLM2 else None
        name = b.name
    else:
        folder = resolve_model_folder(source)
        name = folder.name
    if b is SMOLLM2:
        _bundled.smollm2_gguf()  # a plain message when the package is missing, before estimating
    check_bytes(load_bytes(source if b is not None else str(folder)), f"loading {name}",
                "Raise ATTNCORE_MAX_BYTES or use a smaller model.")
    import transformers
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    converted = False
    try:
        if b is SMOLLM2:
            folder, model, tokenizer, converted = _load_smollm2(torch.device(device), progress)
        else:
            assert folder is not None
            config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
            model = AutoModel.from_pretrained(folder, config=config, local_files_only=True,
                                              trust_remote_code=False, attn_implementation="eager",
                                              dtype=torch.float32)
    except AttnInputError:
        raise
    except Exception as exc:  # transformers raises many kinds; the message is what matters
        # the bundled models' folders are inside the server's installation or cache: name them, not their path
        why = first_line(exc).replace(str(folder), name) if folder is not None else first_line(exc)
        raise AttnInputError(f"could not load the model {name}: {why}") from exc
    return wrap_model(model, tokenizer, name=name, path=str(folder), device=device,
                      seconds=time.perf_counter() - t0, description=b.description if b else "",
                      converted=converted)


def wrap_model(model: Any, tokenizer: Any, *, name: str, path: str = "", device: torch.device | str = "cpu",
               seconds: float = 0.0, description: str = "", converted: bool = False) -> LoadedModel:
    """A transformers ``model`` and ``tokenizer`` as a :class:`LoadedModel` (eval mode, on ``device``):
    layers, heads, key/value heads, causality and the token limits read from its config."""
    dev = torch.device(device)
    model = model.to(dev).eval()
    cfg = model.config
    layers = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0) or 0)
    heads = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0) or 0)
    if layers < 1 or heads < 1:
        raise AttnInputError(f"{name}: the config does not say how many layers and heads it has.")
    kv = int(getattr(cfg, "num_key_value_heads", 0) or heads)
    if heads % kv:
        raise AttnInputError(f"{name}: {heads} query heads do not split into {kv} key/value groups.")
    causal = bool(getattr(cfg, "is_decoder", False)) or any(
        a.endswith("ForCausalLM") for a in (getattr(cfg, "architectures", None) or [])) or \
        type(model).__name__.endswith("ForCausalLM")
    per_map = layers * heads
    cell_cap = int(math.isqrt(MAX_MODEL_CELLS // per_map))
    model_limit = _model_limit(cfg, tokenizer, MAX_DECODER_TOKENS if causal else MAX_TOKENS)
    # an encoder keeps every map (its limit is the cell cap); a Llama/Qwen-family decoder reads up to
    # MAX_DECODER_TOKENS and past the cell cap keeps per-head summaries and the shown layer's maps
    long_ok = causal and len(attention_modules(model)) == layers
    limit = model_limit if long_ok else min(model_limit, cell_cap)
    if min(limit, cell_cap) < 2:
        raise AttnInputError(f"{name} has {layers} layers x {heads} heads: too many to show.")
    return LoadedModel(name=name, path=path, model=model, tokenizer=tokenizer, layers=layers, heads=heads,
                       token_limit=limit, device=str(dev), seconds=seconds, kv_heads=kv, causal=causal,
                       description=description, map_limit=min(limit, cell_cap), converted=converted)
