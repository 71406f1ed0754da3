"""A decoder's next token: the distribution at a temperature, and generation with the attention of
every generated token.

Shape legend: ``N`` layers, ``H`` query heads, ``P`` prompt tokens, ``T`` generated tokens,
``S`` keys (``P + T``), ``V`` vocabulary.

Generation runs the prompt once, then one token at a time with the model's key/value cache (the way a
decoder generates). Step ``t`` keeps the attention row of the query that predicted token ``t``: the last
prompt token for ``t = 0``, generated token ``t - 1`` after it, over every key before it and itself.
Greedy decoding takes the likeliest token; sampling draws from softmax(logits / temperature) with a
``torch.Generator`` seeded from ``seed``, so one seed gives one continuation.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attncore.budget import check_bytes
from attncore.errors import AttnInputError
from attncore.models.capture import PASS_OVERHEAD_BYTES, attention_modules, tokenize
from attncore.models.loading import LoadedModel, first_line
from attncore.models.modules import exclusive, hooked_run
from attncore.models.tokens import display_tokens, tokenizer_kind

__all__ = ["MAX_NEW_TOKENS", "MAX_TEMPERATURE", "MIN_TEMPERATURE", "Generation", "cache_kwarg", "cache_of",
           "generate", "generation_bytes", "next_distribution", "next_logits"]

MAX_NEW_TOKENS = 64  # generated tokens at most per request
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.05, 5.0


def _check_decoder(lm: LoadedModel) -> None:
    if not lm.causal or not hasattr(lm.model, "lm_head") and not hasattr(lm.model, "get_output_embeddings"):
        raise AttnInputError(f"{lm.name} is not a causal language model: it predicts no next token.")


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not MIN_TEMPERATURE <= t <= MAX_TEMPERATURE:
        raise AttnInputError(f"the temperature is {t:g}; it must lie between {MIN_TEMPERATURE:g} and "
                             f"{MAX_TEMPERATURE:g}.")
    return t


def next_logits(lm: LoadedModel, text: str) -> Tensor:
    """(V,) float32 CPU: the logits of the token after ``text`` (read as :func:`run_text` reads it)."""
    _check_decoder(lm)
    enc = tokenize(lm, text)
    dev = torch.device(lm.device)
    try:
        with exclusive(lm.model), torch.inference_mode():
            out = lm.model(**{k: v.to(dev) for k, v in enc.inputs.items()}, logits_to_keep=1)
    except Exception as exc:
        raise AttnInputError(f"{lm.name} could not run on this text: {first_line(exc)}") from exc
    return out.logits[0, -1].float().cpu()


def next_distribution(lm: LoadedModel, logits: Tensor, temperature: float,
                      k: int) -> list[tuple[str, float]]:
    """The ``k`` likeliest next tokens of ``logits`` (V,) at ``temperature``: (token as the tokenizer
    writes it, in its display form (:func:`attncore.models.tokens.display_tokens`), probability of
    softmax(logits / temperature)), likeliest first (ties: lower id)."""
    t = _check_temperature(temperature)
    p = torch.softmax(logits.double() / t, dim=-1)  # (V,)
    k = max(1, min(int(k), p.numel()))
    # stable order: probability descending, then id ascending
    top = torch.topk(p, min(p.numel(), k + 16)).indices.tolist()
    order = sorted(top, key=lambda i: (-float(p[i]), i))[:k]
    kind = tokenizer_kind(lm.tokenizer)
    names = [display_tokens([str(n)], kind)[0] for n in lm.tokenizer.convert_ids_to_tokens(order)]
    return [(n, float(p[i])) for n, i in zip(names, order, strict=True)]


def cache_of(out: Any) -> Any:
    """The key/value cache a forward pass returned (``cache``; ``past_key_values`` in older transformers)."""
    keys = out.keys() if hasattr(out, "keys") else ()
    return out["cache"] if "cache" in keys else out.past_key_values


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name ``model.forward`` takes its key/value cache by: ``cache`` in recent transformers 5
    releases, ``past_key_values`` before (5.17 still took only that one). Passing the wrong name is
    silently swallowed by ``**kwargs``: every step then decodes without its past."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@dataclass(frozen=True)
class Generation:
    """A continuation and where each of its tokens' predicting query looked.

    Attributes:
        prompt: (P,) the prompt's tokens; new: (T,) the generated tokens, in their display form
            (:func:`attncore.models.tokens.display_tokens` over prompt and continuation together).
        new_ids: (T,) their ids; text: the continuation decoded to text.
        probs: (T,) each chosen token's probability under softmax(logits / temperature).
        attentions: (T, N, H, S) float32 CPU, S = P + T - 1: step t's row over keys 0 .. P + t - 1
            (zero beyond); rows sum to 1.
        greedy, temperature, seed: how the tokens were chosen.
        stopped: True when the model produced its end-of-sequence token (kept as the last token).
        raw: (P + T,) the tokens as the tokenizer writes them (``Ġhead``).
    """

    prompt: tuple[str, ...]
    new: tuple[str, ...]
    new_ids: tuple[int, ...]
    text: str
    probs: tuple[float, ...]
    attentions: Tensor
    greedy: bool
    temperature: float
    seed: int
    stopped: bool
    raw: tuple[str, ...] = ()

    @property
    def tokens(self) -> tuple[str, ...]:
        """(P + T,) prompt and continuation."""
        return self.prompt + self.new


def generation_bytes(lm: LoadedModel, P: int, n_new: int) -> int:
    """Peak bytes of :func:`generate` after a ``P``-token prompt, beyond the model's weights (float32).

    The kept rows (T N H S, S = P + T - 1) and their copy into the result, the prompt pass's eager
    attention (3 H P^2: scores, masked scores, weights), the key/value cache (2 N S Hkv E per key and value,
    counted at the width D), the prompt pass's activations (about 16 P D) and one pass's fixed overhead
    (:data:`attncore.models.capture.PASS_OVERHEAD_BYTES`). Held against the measured peak by
    ``tests/test_plan_memory.py``.
    """
    S = P + n_new - 1
    width = int(getattr(lm.model.config, "hidden_size", 1024))
    return (2 * n_new * lm.layers * lm.heads * S * 4 + 3 * lm.heads * P * P * 4
            + 2 * lm.layers * S * width * 4 + 16 * P * width * 4 + PASS_OVERHEAD_BYTES)


def generate(lm: LoadedModel, text: str, n_new: int, *, greedy: bool = True, temperature: float = 1.0,
             seed: int = 0) -> Generation:
    """Generate up to ``n_new`` tokens after ``text`` (1 to :data:`MAX_NEW_TOKENS`), keeping the attention
    of every step (see the module docstring). Memory is estimated before running; raises
    :class:`AttnInputError` for a model that is not a Llama/Qwen-family decoder, a length or temperature
    out of bounds, or empty text."""
    _check_decoder(lm)
    if not 1 <= int(n_new) <= MAX_NEW_TOKENS:
        raise AttnInputError(f"asked for {n_new} new tokens; generate 1 to {MAX_NEW_TOKENS} at a time.")
    n_new = int(n_new)
    t = _check_temperature(temperature)
    mods = attention_modules(lm.model)
    if len(mods) != lm.layers:
        raise AttnInputError(f"{lm.name}: generation with attention is read from Llama/Qwen-family "
                             "decoders.")
    enc = tokenize(lm, text, max_tokens=lm.token_limit - n_new)
    P = enc.length
    check_bytes(generation_bytes(lm, P, n_new), f"generating {n_new} tokens after {P}",
                "Generate fewer tokens or use a shorter text.")
    dev = torch.device(lm.device)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    rows: list[Tensor] = []  # per step: (N, H, S_t)
    current: dict[int, Tensor] = {}

    def hook(layer: int) -> Any:
        def fn(_m: nn.Module, _args: Any, out: Any) -> Any:
            w = out[1]
            if w is None:
                raise AttnInputError(f"{lm.name} does not return attention weights (eager attention).")
            # (H, S_t): the last query's row, copied: a view would keep the prompt pass's whole (H, P, P)
            # weights of every layer alive (N H P^2: ~1 GB after a 960-token prompt, issue 44 F3)
            current[layer] = w[0, :, -1, :].detach().float().clone().cpu()
            return (out[0], None)

        return fn

    with exclusive(lm.model):
        handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(mods)]
        ids = enc.ids.to(dev)
        new_ids: list[int] = []
        probs: list[float] = []
        eos = getattr(lm.tokenizer, "eos_token_id", None)
        cache_kw = cache_kwarg(lm.model)
        stopped = False
        with hooked_run(lm.name, handles, "generate from this text"), torch.inference_mode():
            out = lm.model(input_ids=ids, use_cache=True, logits_to_keep=1)
            for step in range(n_new):
                rows.append(torch.stack([current[i] for i in range(lm.layers)]))  # (N, H, P + step)
                p = torch.softmax(out.logits[0, -1].double().cpu() / t, dim=-1)  # (V,)
                nxt = int(torch.argmax(p)) if greedy else int(torch.multinomial(p, 1, generator=gen))
                new_ids.append(nxt)
                probs.append(float(p[nxt]))
                if eos is not None and nxt == eos:
                    stopped = True
                    break
                if step + 1 < n_new:
                    step_in = {"input_ids": torch.tensor([[nxt]], device=dev), cache_kw: cache_of(out)}
                    out = lm.model(**step_in, use_cache=True, logits_to_keep=1)
    T = len(new_ids)
    att = torch.zeros(T, lm.layers, lm.heads, P + T - 1)
    for step, r in enumerate(rows):
        att[step, :, :, : r.shape[-1]] = r
    tok = lm.tokenizer
    raw = tuple(str(x) for x in tok.convert_ids_to_tokens(enc.ids[0].tolist() + new_ids))
    shown = display_tokens(raw, tokenizer_kind(tok))
    return Generation(prompt=shown[:P], new=shown[P:], new_ids=tuple(new_ids), text=tok.decode(new_ids),
                      probs=tuple(probs), attentions=att, greedy=bool(greedy), temperature=t, seed=int(seed),
                      stopped=stopped, raw=raw)
