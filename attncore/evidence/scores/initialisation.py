"""The claim about scores at initialisation ("Random init | Scores near N(0, d_k)").

The tutorial's table assumes what its derivation assumes: q and k with independent unit-variance
entries, so Var(q·k) = d_k. Whether a freshly initialised model meets that premise depends on its
initialisation: with unit-variance inputs (a LayerNorm's output) and weights of variance σ², each q
and k entry has variance d_model·σ², so Var(q·k)/d_k = (d_model·σ²)² (:func:`attncore.theory.
init_score_ratio`). The row measures the premise itself and three common initialisations at this
app's model width, each against its closed form, and judges the claim under its own premise.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attncore import theory
from attncore.evidence.records import (
    CAVEAT,
    FAILS,
    HOLDS,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
    fmt_pm,
)
from attncore.synthetic import make_generator
from attncore.training import TrainConfig

__all__ = ["CLAIMS", "DRAWS", "INIT_LABELS", "RANDOM_INIT", "TOKENS", "init_scores"]

INIT_FACTOR = 2.0  # "scores near N(0, d)": variance within this factor of d
DRAWS = 8  # independent weight draws per initialisation (each gives n_head heads)
TOKENS = 256  # query tokens and, separately, key tokens per draw
INIT_LABELS = {
    "premise": "the tutorial's premise (q, k entries N(0, 1))",
    "xavier": "Xavier (Glorot)",
    "torch_linear": "PyTorch's default nn.Linear",
    "normal_0.02": "N(0, 0.02²) (GPT-2)",
}


def _weight(init: str, D: int, g: torch.Generator) -> Tensor:
    """One (D, D) projection weight drawn by torch's own initialiser for ``init``."""
    w = torch.empty(D, D)
    if init == "xavier":
        torch.nn.init.xavier_uniform_(w, generator=g)
    elif init == "torch_linear":  # what nn.Linear.reset_parameters does
        torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=g)
    else:
        torch.nn.init.normal_(w, std=0.02, generator=g)
    return w


def _head_ratios(q: Tensor, k: Tensor, H: int) -> Tensor:
    """Var(q·k)/E per head for q (N, H·E) and k (N, H·E) from different tokens: (H,)."""
    N, HE = q.shape
    E = HE // H
    qh, kh = q.view(N, H, E).transpose(0, 1), k.view(N, H, E).transpose(0, 1)  # (H, N, E)
    dots = (qh @ kh.transpose(-2, -1)).double()  # (H, N, N)
    return dots.flatten(1).var(dim=1) / E


def init_scores(setting: Setting) -> Measurement:
    """Var(q·k)/d_head for the premise and each of :data:`attncore.theory.INITS`, sampled and in closed form.

    Per initialisation, :data:`DRAWS` independent (W_q, W_k) of shape (D, D), D = the app's d_model,
    split into its n_head heads of E = d_head; q from :data:`TOKENS` tokens x ~ N(0, I_D), k from as
    many others. The value is the mean over the DRAWS·n_head heads, its error their spread.
    """
    cfg = TrainConfig()
    D, H, E = cfg.d_model, cfg.n_head, cfg.d_head
    g = make_generator(setting.seed)
    vals: dict[str, float | int | str | bool] = {"d_model": D, "d_head": E, "heads": DRAWS * H}
    se: dict[str, float] = {}
    for init in ("premise", *theory.INITS):
        ratios = []
        for _ in range(DRAWS):
            if init == "premise":
                q, k = torch.randn(TOKENS, D, generator=g), torch.randn(TOKENS, D, generator=g)  # (N, D)
            else:
                wq, wk = _weight(init, D, g), _weight(init, D, g)
                x, x2 = torch.randn(TOKENS, D, generator=g), torch.randn(TOKENS, D, generator=g)
                q, k = x @ wq.T, x2 @ wk.T  # (N, D): every head's q and k
            ratios.append(_head_ratios(q.to(setting.device), k.to(setting.device), H).cpu())
        r = torch.cat(ratios)  # (DRAWS·H,)
        vals[f"ratio_{init}"] = float(r.mean())
        se[f"ratio_{init}"] = float(r.std() / math.sqrt(r.numel()))
        var_w = 1.0 if init == "premise" else theory.init_weight_variance(init, D, D)
        vals[f"theory_{init}"] = 1.0 if init == "premise" else theory.init_score_ratio(var_w, D)
    return Measurement(
        vals,
        se,
        scale=f"{DRAWS} draws × {H} heads per initialisation, W_q, W_k ({D} × {D}, this app's d_model) by "
        f"torch.nn.init, {TOKENS} query and {TOKENS} key tokens N(0, I), float32, {setting.device}",
    )


def _near(r: float) -> bool:
    return 1.0 / INIT_FACTOR <= r <= INIT_FACTOR


def _inits_text(m: Measurement) -> str:
    return ", ".join(f"{INIT_LABELS[i]} {fmt(m.num(f'ratio_{i}'), 2)}·d_k" for i in theory.INITS)


def _init_judge(m: Measurement) -> Judgement:
    r = m.num("ratio_premise")
    if not _near(r):
        return Judgement(
            FAILS,
            f"even with unit-variance q and k Var(q·k) = {fmt_pm(r, m.err('ratio_premise'))}·d_k, outside a "
            f"factor {INIT_FACTOR:g} of d_k.",
        )
    far = [i for i in theory.INITS if not _near(m.num(f"ratio_{i}"))]
    premise = f"under its own premise (unit-variance q, k) Var(q·k) = {fmt(r, 3)}·d_k"
    if not far:
        return Judgement(
            HOLDS, f"{premise}, and every common initialisation tried meets it ({_inits_text(m)})."
        )
    return Judgement(
        CAVEAT,
        f"{premise}; with unit-variance inputs at d_model {int(m.num('d_model'))} the initialisation "
        f"decides: {_inits_text(m)}, so only where q and k come out with unit variance are the scores "
        f"near N(0, d_k) (not under {', '.join(INIT_LABELS[i] for i in far)}).",
    )


RANDOM_INIT = Claim(
    key="random_init",
    source="sqrtd",
    slow=True,
    quote="When scaling matters most: Random init | Scores near N(0, d_k) | Critical",
    test="Var(q·k)/d_k under the tutorial's premise (q, k ~ N(0, I)) and for q = W_q x, k = W_k x' under "
    "three common initialisations of W_q, W_k (Xavier, PyTorch's default nn.Linear, N(0, 0.02²)) at this "
    "app's d_model with unit-variance inputs, each beside its closed form (d_model·σ²)².",
    tolerance=f"“near N(0, d_k)”: variance within a factor {INIT_FACTOR:g} of d_k under the premise; the "
    "initialisations outside that factor make the caveat",
    measure=init_scores,
    describe=lambda m: (
        "Var(q·k)/d_k: "
        + "; ".join(
            f"{INIT_LABELS[i]} {fmt_pm(m.num(f'ratio_{i}'), m.err(f'ratio_{i}'))} (closed form "
            f"{fmt(m.num(f'theory_{i}'), 3)})"
            for i in ("premise", *theory.INITS)
        )
        + f"; d_model {int(m.num('d_model'))}, d_k {int(m.num('d_head'))}."
    ),
    judge=_init_judge,
)


CLAIMS: tuple[Claim, ...] = (RANDOM_INIT,)
