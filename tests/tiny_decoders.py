"""Tiny RANDOM grouped-query decoders (Llama and Qwen2 configs) built in memory, no download, with a
word-level tokenizer: the test beds of the decoder capture and generation (attncore.models, attncore.qkv)."""

from __future__ import annotations

import torch

from attncore.models import LoadedModel, wrap_model

WORDS = tuple(
    [
        "the",
        "cat",
        "sat",
        "on",
        "mat",
        "and",
        "dog",
        "slept",
        "a",
        "bird",
        "sang",
        ".",
        ",",
        "when",
        "head",
        "has",
        "nothing",
        "useful",
        "to",
        "read",
        "softmax",
        "still",
        "makes",
        "it",
        "spend",
        "all",
        "of",
        "its",
        "attention",
        "somewhere",
    ]
)


def tiny_tokenizer():
    """A whitespace word-level tokenizer over :data:`WORDS` (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(dict.fromkeys(WORDS))}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def tiny_decoder(
    family: str = "llama",
    *,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 8,
    seed: int = 0,
) -> LoadedModel:
    """A seeded random ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` (eager attention, float32) as a
    :class:`LoadedModel`: ``heads`` query heads sharing ``kv_heads`` key/value heads."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = tiny_tokenizer()
    common = dict(
        vocab_size=len(tok),
        hidden_size=heads * head_dim,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        rope_theta=10_000.0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        raise ValueError(family)
    model.config._attn_implementation = "eager"
    return wrap_model(model, tok, name=f"tiny-{family}")
