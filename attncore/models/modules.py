"""Finding the parts of a transformers model the capture hooks read (no other attncore.models import)."""

from __future__ import annotations

from torch import nn

__all__ = ["attention_modules"]


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
