"""Measurements on a real causal decoder LM (Llama family: SmolLM2, Llama, Qwen2, Mistral).

Shape legend as in :mod:`attncore`: ``N`` layers, ``H`` query heads, ``Hkv`` key/value heads, ``L`` tokens.

* :mod:`~attncore.decoder.probe`: one forward pass with per-head summaries reduced inside hooks, under
  any (L, L) mask with the true positions; residual edits; one layer's q, k, v.
* :mod:`~attncore.decoder.sinks`: sink heads (Gu et al. 2024), what else draws weight, value-state
  drain, massive activations (Sun et al. 2024), does content matter.
* :mod:`~attncore.decoder.streaming`: StreamingLLM's windows and the first-token ablations.
* :mod:`~attncore.decoder.eviction`: decoding with a KV cache of a fixed budget under eviction policies
  (a sliding window, StreamingLLM, H2O, TOVA): losses and what each cache keeps.
* :mod:`~attncore.decoder.entropy`: entropy against position per head, head classes.
* :mod:`~attncore.decoder.induction`: induction heads on repeated random tokens (Olsson et al. 2022).
* :mod:`~attncore.decoder.lens`: logit lens and direct logit attribution of one position (heads, MLPs,
  embedding), and the positions whose lens reads massive activations.
* :mod:`~attncore.decoder.text`: the shipped public-domain text.

Every function takes a transformers causal LM and token ids; none loads a model.
"""

from attncore.decoder import entropy, eviction, induction, probe, sinks, streaming, text

__all__ = ["entropy", "eviction", "induction", "probe", "sinks", "streaming", "text"]
