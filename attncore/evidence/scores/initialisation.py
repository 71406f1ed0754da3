"""The claim about scores at initialisation ("Random init | Scores near N(0, d_k)")."""

from __future__ import annotations

import math

import torch

from attncore.evidence.records import (
    FAILS,
    HOLDS,
    Claim,
    Judgement,
    Measurement,
    Setting,
)
from attncore.synthetic import make_generator
from attncore.training import CharTransformer, TrainConfig

__all__ = ["CLAIMS", "RANDOM_INIT"]

INIT_FACTOR = 2.0  # "scores near N(0, d)": variance within this factor of d


def _init_scores(setting: Setting) -> Measurement:
    cfg = TrainConfig()
    g = make_generator(setting.seed)
    vocab = "".join(chr(c) for c in range(32, 97))  # 65 characters, like tiny Shakespeare's
    model = CharTransformer.create(cfg, vocab, g)
    idx = torch.randint(0, len(vocab), (8, cfg.context), generator=g)  # (B, T)
    with torch.no_grad():
        blk = model.blocks[0]
        q, k, _ = blk.attn.split_heads(blk.ln1(model.tok(idx)))  # each (B, H, T, E)
        dots = (q @ k.transpose(-2, -1)).flatten().double()  # (B·H·T·T,)
    var = float(dots.var())
    d = cfg.d_head
    return Measurement(
        {
            "ratio": var / d,
            "var": var,
            "d_head": d,
            "var_q": float(q.double().var()),
            "theory_ratio": (cfg.d_model * 0.02**2) ** 2,
        },
        scale=(
            f"layer 1 of attncore.training's default model (d_model {cfg.d_model}, {cfg.n_head} heads, "
            f"weights N(0, 0.02²)) at initialisation, 8 × {cfg.context} random characters"
        ),
    )


def _init_judge(m: Measurement) -> Judgement:
    r = m.num("ratio")
    if 1.0 / INIT_FACTOR <= r <= INIT_FACTOR:
        return Judgement(HOLDS, f"Var(q·k) = {r:.2f}·d_head at initialisation.")
    return Judgement(
        FAILS,
        f"GPT-style initialisation gives q, k entries of variance {m.num('var_q'):.3f}, so Var(q·k) = "
        f"{r:.4f}·d_head (std {math.sqrt(m.num('var')):.2f} at d_head {int(m.num('d_head'))}, not "
        f"{math.sqrt(m.num('d_head')):.1f}); the unit-variance premise is an assumption about the inputs.",
    )


RANDOM_INIT = Claim(
    key="random_init",
    source="sqrtd",
    slow=True,
    quote="When scaling matters most: Random init | Scores near N(0, d_k) | Critical",
    test="Var(q·k)/d_head of the character transformer's first layer at initialisation, on random "
    "characters.",
    tolerance=f"“near N(0, d_k)”: variance within a factor {INIT_FACTOR:g} of d_k",
    measure=_init_scores,
    describe=lambda m: (
        f"Var(q·k) = {m.num('ratio'):.4f}·d_head (closed form (d_model·0.02²)² = "
        f"{m.num('theory_ratio'):.4f}); d_head = {int(m.num('d_head'))}."
    ),
    judge=_init_judge,
)


CLAIMS: tuple[Claim, ...] = (RANDOM_INIT,)
