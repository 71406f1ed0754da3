"""Finding the parts of a transformers model the capture hooks read (no other attncore.models import)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from torch import nn

from attncore.errors import AttnInputError

__all__ = ["attention_implementation", "attention_modules", "exclusive", "first_line", "hooked_run",
           "model_lock"]

_LOCKS: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters), for plain error messages."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


@contextlib.contextmanager
def exclusive(model: nn.Module) -> Iterator[None]:
    """Hold ``model`` alone for the block (re-entrant within one thread).

    Forward hooks belong to modules, not to threads: while one session's pass has capture hooks on a
    shared (cached) model, another session's pass of the same model would run them too, and each would
    read the other's activations. Every pass of a shared model, hooked or not, runs inside this; the
    passes of one model queue, the passes of different models do not.
    """
    with model_lock(model):
        yield


def model_lock(model: nn.Module) -> threading.RLock:
    """The one re-entrant lock :func:`exclusive` holds for ``model`` (created on first use), for a caller that
    waits for it with a timeout (``ui.model_queue``: a waiting student sees their place)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
    return lock


@contextlib.contextmanager
def attention_implementation(model: nn.Module, name: str) -> Iterator[bool]:
    """Run the block with a transformers model's attention implementation set to ``name`` (e.g. ``"sdpa"``
    for a pass that needs no weights: torch's fused kernel instead of materialised maps), then restore
    it. Holds :func:`exclusive` (the setting is the shared model's). Yields False, changing nothing, for
    a model without the setting or one that does not support ``name``."""
    cfg = getattr(model, "config", None)
    old = getattr(cfg, "_attn_implementation", None)
    supported = name == "eager" or bool(getattr(model, f"_supports_{name}", False))
    with exclusive(model):
        if cfg is None or old is None or old == name or not supported:
            yield old == name
            return
        cfg._attn_implementation = name
        try:
            yield True
        finally:
            cfg._attn_implementation = old


@contextlib.contextmanager
def hooked_run(name: str, handles: list[Any], doing: str = "run on this text") -> Iterator[None]:
    """Around a forward pass with capture hooks: an :class:`AttnInputError` passes through, any other
    exception becomes one (``'<name> could not <doing>: Type: message'``), and the hooks in ``handles``
    (appended to inside the block too) are removed however the block ends."""
    try:
        yield
    except AttnInputError:
        raise
    except Exception as exc:  # transformers raises many kinds; the message is what matters
        raise AttnInputError(f"{name} could not {doing}: {first_line(exc)}") from exc
    finally:
        for h in handles:
            h.remove()


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules of a Llama/Qwen-family decoder in layer order (``model.layers[i].self_attn``
    with ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``); empty for other architectures."""
    base = getattr(model, "model", model)
    blocks = getattr(base, "layers", None)
    if blocks is None:
        return []
    mods = [getattr(b, "self_attn", None) for b in blocks]
    ok = all(m is not None and all(isinstance(getattr(m, n, None), nn.Linear)
                                   for n in ("q_proj", "k_proj", "v_proj", "o_proj")) for m in mods)
    return mods if ok and mods else []  # type: ignore[return-value]
