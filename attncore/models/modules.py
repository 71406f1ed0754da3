"""Finding the parts of a transformers model the capture hooks read (no other attncore.models import)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn

from attncore.errors import AttnInputError

__all__ = ["attention_modules", "first_line", "hooked_run"]


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters), for plain error messages."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


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
