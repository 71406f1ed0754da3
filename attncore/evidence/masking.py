"""Claims about masks, row sums and dropout (d2l's "Attention Scoring Functions" and the SDPA reference page).

``d2l_masked_softmax`` is d2l's ``masked_softmax`` as its text prints it (JAX), written in torch line
by line: the reference the d2l rows compare attncore and torch's SDPA with.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from attncore.attention import attention
from attncore.evidence.records import (
    CAVEAT,
    EXACT,
    FAILS,
    HOLDS,
    MISPRINT,
    ROW_SUM_TOL,
    Claim,
    Judgement,
    Measurement,
    Setting,
    fmt,
)
from attncore.explore import SyntheticSpec, synthetic_dropout, synthetic_stages
from attncore.kernels import (
    SDPA_LOCK,
    KernelSpec,
    fully_masked_rows,
    make_inputs,
    notebook_attention,
    tolerance,
)
from attncore.synthetic import make_generator, randn

__all__ = ["CLAIMS", "D2L_PRINTED", "d2l_masked_softmax", "numpy_sdpa", "sdpa"]

PRINTED_SUM_TOL = 1e-6  # the printed float32 rows, 8 digits each
DROP_P = 0.1  # the reference page's dropout_p
WITHIN_2SE = (
    0.9  # share of output entries whose mean over draws lies within 2 standard errors (expected 0.95)
)
MAX_Z = 4.5  # and none beyond this many (1024 entries: a false alarm under 1%)

# d2l's two printed masked_softmax calls: (valid_lens, the (2, 2, 4) output it prints).
D2L_PRINTED: tuple[tuple[tuple[tuple[int, ...], ...], tuple[tuple[tuple[float, ...], ...], ...]], ...] = (
    (
        ((2, 2), (3, 3)),
        (
            ((0.44036096, 0.55963904, 0.0, 0.0), (0.3914764, 0.60852355, 0.0, 0.0)),
            ((0.2912151, 0.43938962, 0.26939523, 0.0), (0.41406792, 0.29180348, 0.29412857, 0.0)),
        ),
    ),
    (
        ((1, 3), (2, 4)),
        (
            ((1.0, 0.0, 0.0, 0.0), (0.30580992, 0.3106621, 0.383528, 0.0)),
            ((0.39127716, 0.6087228, 0.0, 0.0), (0.19169618, 0.283323, 0.25459105, 0.27038974)),
        ),
    ),
)


def sdpa(*args: Tensor, **kwargs: object) -> Tensor:
    """``F.scaled_dot_product_attention`` under :data:`attncore.kernels.SDPA_LOCK` (another thread's
    backend choice must not apply to this call)."""
    with SDPA_LOCK:
        return F.scaled_dot_product_attention(*args, **kwargs)  # type: ignore[arg-type]


def d2l_masked_softmax(X: Tensor, valid_lens: Tensor | None) -> Tensor:
    """d2l's ``masked_softmax``: keys at positions ``>= valid_len`` get the score −1e6, then softmax.

    Args:
        X: (B, L, S) scores. valid_lens: (B,) one length per sequence or (B, L) one per query.

    Returns:
        (B, L, S) weights. A row with ``valid_len = 0`` has every score at −1e6, so its weights
        are uniform (1/S), not zero.
    """
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    shape = X.shape
    vl = valid_lens.repeat_interleave(shape[1]) if valid_lens.dim() == 1 else valid_lens.reshape(-1)
    flat = X.reshape(-1, shape[-1])  # (B·L, S)
    mask = torch.arange(flat.shape[1], dtype=torch.float32, device=X.device)[None, :] < vl[:, None]
    flat = torch.where(mask, flat, torch.full_like(flat, -1e6))
    return torch.softmax(flat.reshape(shape), dim=-1)


def _padding_weights(X: Tensor, valid_lens: Tensor) -> tuple[Tensor, Tensor]:
    """Weights of d2l's version and attncore's (B, L, S), for scores X (B, L, S), via attention on a one-hot
    trick: with q = identity rows the weights are softmax of X itself."""
    ref = d2l_masked_softmax(X, valid_lens)
    # attncore.attention normalises q·kᵀ·scale; feed the scores through q = X, k = I, scale = 1
    eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device).expand(X.shape[0], -1, -1)  # (B, S, S)
    _, w = attention(X, eye, eye, scale=1.0, valid_lens=valid_lens, return_weights=True)
    return ref, w


def _printed(setting: Setting) -> Measurement:
    worst_sum, zeros_ok, worst_ratio, worst_diff = 0.0, True, 0.0, 0.0
    g = make_generator(setting.seed)
    for lens, rows in D2L_PRINTED:
        vl = torch.tensor([r[0] for r in lens]) if all(len(set(r)) == 1 for r in lens) else torch.tensor(lens)
        printed = torch.tensor(rows, dtype=torch.float64)  # (2, 2, 4)
        per_row = torch.tensor(lens)  # (2, 2): the valid length of each printed row
        worst_sum = max(worst_sum, float((printed.sum(-1) - 1.0).abs().max()))
        keep = torch.arange(4)[None, None, :] < per_row[..., None]  # (2, 2, 4)
        zeros_ok &= bool((printed[~keep] == 0).all() and (printed[keep] > 0).all())
        kept = printed.masked_fill(~keep, math.nan)
        ratio = torch.nan_to_num(kept, nan=-math.inf).amax(-1) / torch.nan_to_num(kept, nan=math.inf).amin(-1)
        worst_ratio = max(worst_ratio, float(ratio.max()))
        # the same valid lengths on seeded uniform scores, as d2l draws them: attncore against d2l's code
        X = torch.rand(2, 2, 4, generator=g).to(setting.device)
        ref, w = _padding_weights(X, vl.to(setting.device))
        worst_diff = max(worst_diff, float((ref - w).abs().max()))
    return Measurement(
        {"sum_dev": worst_sum, "zeros_ok": zeros_ok, "ratio": worst_ratio, "e": math.e, "diff": worst_diff},
        basis=EXACT,
        scale="the two printed (2, 2, 4) arrays; attncore against d2l's code on seeded uniform scores, "
        f"float32, {setting.device}",
    )


def _printed_judge(m: Measurement) -> Judgement:
    if m.num("sum_dev") > PRINTED_SUM_TOL:
        return Judgement(MISPRINT, f"a printed row sums to 1 ± {fmt(m.num('sum_dev'), 2)}.")
    if not bool(m["zeros_ok"]):
        return Judgement(MISPRINT, "the printed zeros do not match the valid lengths.")
    if m.num("ratio") >= m.num("e"):
        return Judgement(
            MISPRINT,
            f"two weights of a printed row differ by a factor {m.num('ratio'):.2f}, more than e: impossible "
            "for scores drawn uniformly in [0, 1).",
        )
    if m.num("diff") > ROW_SUM_TOL:
        return Judgement(FAILS, f"attncore differs from d2l's code by {fmt(m.num('diff'), 2)}.")
    return Judgement(
        HOLDS,
        "the random scores cannot be redrawn (JAX's generator), but every printed row is a valid masked "
        "softmax of scores in [0, 1), and attncore gives d2l's weights.",
    )


D2L_OUTPUTS = Claim(
    key="d2l_outputs",
    source="d2l",
    quote="masked_softmax(jax.random.uniform(d2l.get_key(), (2, 2, 4)), jnp.array([2, 3])) → [[[0.44036096, "
    "0.55963904, 0., 0.], …]] (and the per-row [[1, 3], [2, 4]] call)",
    test="The printed arrays: each row sums to 1, zeros exactly at and beyond its valid length, no two "
    "weights further apart than e (scores in [0, 1)); attncore's padding mask against d2l's code on seeded "
    "scores.",
    tolerance=f"row sums within {PRINTED_SUM_TOL:g} of 1; attncore within {ROW_SUM_TOL:g} of d2l's code",
    measure=_printed,
    describe=lambda m: (
        f"printed rows sum to 1 within {fmt(m.num('sum_dev'), 2)}; largest weight ratio {m.num('ratio'):.3f} "
        f"(< e = 2.718); attncore vs d2l's code: {fmt(m.num('diff'), 2)}."
    ),
    judge=_printed_judge,
)


def _demo(setting: Setting, lens: tuple[int, ...]) -> Measurement:
    """d2l's DotProductAttention demo shapes (2 queries of dim 2, 10 keys) with these valid lengths."""
    g = make_generator(setting.seed)
    q, k = (
        randn(2, 1, 2, generator=g, device=setting.device),
        randn(2, 10, 2, generator=g, device=setting.device),
    )
    vl = torch.tensor(lens, device=setting.device)
    scores = q @ k.transpose(-2, -1) / math.sqrt(2)  # (2, 1, 10)
    ref, w = _padding_weights(scores, vl)
    pad = torch.arange(10, device=setting.device)[None, None, :] >= vl[:, None, None]  # (2, 1, 10)
    by_sdpa = sdpa(
        q, k, torch.eye(10, device=setting.device).expand(2, -1, -1), attn_mask=~pad
    )  # V = I: weights
    return Measurement(
        {
            "d2l_pad": float(ref[pad].max()),
            "attncore_pad": float(w[pad].max()),
            "sdpa_pad": float(by_sdpa[pad].abs().max()),
            "lens": ", ".join(map(str, lens)),
            "S": 10,
            "zero_row_d2l": float(ref[0].sum()) if lens[0] == 0 else math.nan,
        },
        scale="d2l's demo shapes: 2 queries of dim 2 over 10 keys, valid_lens "
        f"({', '.join(map(str, lens))}), float32, {setting.device}",
    )


def _pad_judge(m: Measurement) -> Judgement:
    pads = [m.num("d2l_pad"), m.num("attncore_pad"), m.num("sdpa_pad")]
    worst = math.nan if any(math.isnan(p) for p in pads) else max(pads)
    if worst == 0.0:
        return Judgement(
            HOLDS, "exp(−1e6 − max) is exactly 0 in float32, as −∞ is, while a row has a valid key."
        )
    return Judgement(FAILS, f"a pad key still gets weight {fmt(worst, 2)}.")


D2L_PAD_ZERO = Claim(
    key="d2l_pad_zero",
    source="d2l",
    quote="Set their pre-softmax scores to a large negative number so exp flushes them to zero",
    test="Weight on the pad keys of d2l's demo (valid_lens 2 and 6 of 10 keys): d2l's masked_softmax, "
    "attncore.attention with valid_lens, and torch's SDPA with the same boolean mask.",
    tolerance="exactly 0 in float32",
    measure=lambda s: _demo(s, (2, 6)),
    describe=lambda m: (
        f"largest pad weight: d2l {fmt(m.num('d2l_pad'))}, attncore {fmt(m.num('attncore_pad'))}, SDPA "
        f"{fmt(m.num('sdpa_pad'))}."
    ),
    judge=_pad_judge,
)


def _every_length(setting: Setting) -> Measurement:
    """d2l's demo shapes with one sequence per valid length 0 … 10 of its 10 keys: the largest pad weight
    of d2l's masked_softmax over valid lengths ≥ 1, and the all-padding row (valid_len = 0) apart."""
    S = 10
    g = make_generator(setting.seed)
    q, k = (
        randn(S + 1, 1, 2, generator=g, device=setting.device),
        randn(S + 1, S, 2, generator=g, device=setting.device),
    )
    vl = torch.arange(S + 1, device=setting.device)  # (B,): valid_len 0, 1, …, S
    scores = q @ k.transpose(-2, -1) / math.sqrt(2)  # (B, 1, S)
    ref, w = _padding_weights(scores, vl)
    pad = torch.arange(S, device=setting.device)[None, None, :] >= vl[:, None, None]  # (B, 1, S)
    by_sdpa = sdpa(q, k, torch.eye(S, device=setting.device).expand(S + 1, -1, -1), attn_mask=~pad)  # weights
    some = pad.clone()
    some[0] = False  # the rows with at least one valid key
    return Measurement(
        {
            "d2l_pad": float(ref[some].max()),
            "attncore_pad": float(w[some].max()),
            "sdpa_pad": float(by_sdpa[some].abs().max()),
            "lens_max": S,
            "S": S,
            "zero_d2l": float(ref[0].max()),
            "zero_row_d2l": float(ref[0].sum()),
            "zero_attncore": float(w[0].abs().max()),
            "zero_sdpa": float(by_sdpa[0].abs().max()),
        },
        scale=f"d2l's demo shapes: one query of dim 2 over {S} keys per sequence, valid_len 0, 1, …, {S}, "
        f"float32, {setting.device}",
    )


def _zero_judge(m: Measurement) -> Judgement:
    pads = [m.num("d2l_pad"), m.num("attncore_pad"), m.num("sdpa_pad")]
    worst = math.nan if any(math.isnan(p) for p in pads) else max(pads)
    if worst != 0.0:
        return Judgement(FAILS, f"with at least one valid key a pad key still gets weight {fmt(worst, 2)}.")
    if m.num("zero_d2l") == 0.0:
        return Judgement(HOLDS, "no pad key gets weight at any valid length, 0 included.")
    return Judgement(
        CAVEAT,
        f"outside the chapter's use, a sequence that is all padding (valid_len = 0) has −1e6 on every key: a "
        f"constant row, so d2l's softmax spreads {m.num('zero_row_d2l'):.0f} over them "
        f"({fmt(m.num('zero_d2l'))} each, 1/{int(m.num('S'))}); attncore gives {fmt(m.num('zero_attncore'))} "
        f"and SDPA here {fmt(m.num('zero_sdpa'))}.",
    )


D2L_VALID_LEN_ZERO = Claim(
    key="d2l_valid_len_zero",
    source="d2l",
    quote="Padded sequences in a minibatch — we don't want <pad> keys to receive attention mass.",
    test="d2l's masked_softmax, attncore.attention and torch's SDPA on d2l's demo shapes at every valid "
    "length of 10 keys: the weight on the pad keys where a sequence has at least one valid key, and apart "
    "from it the all-padding row (valid_len = 0).",
    tolerance="exactly 0 for valid_len ≥ 1 (the chapter's use); the all-padding row makes the caveat",
    measure=_every_length,
    describe=lambda m: (
        f"valid_len 1 … {int(m.num('lens_max'))}: largest pad weight d2l {fmt(m.num('d2l_pad'))}, attncore "
        f"{fmt(m.num('attncore_pad'))}, SDPA {fmt(m.num('sdpa_pad'))}; valid_len = 0: d2l "
        f"{fmt(m.num('zero_d2l'))} on each pad key (row sum {m.num('zero_row_d2l'):.3g})."
    ),
    judge=_zero_judge,
)


def _dropout(setting: Setting) -> Measurement:
    spec = SyntheticSpec(seed=setting.seed)
    d = synthetic_dropout(spec, DROP_P, 0, setting.device)
    return Measurement(
        {"within": d.within(2.0), "max_z": d.max_z(), "draws": d.n, "entries": d.exact.numel()},
        scale=f"head 0 of the Heatmaps page's default synthetic attention (L = S = {spec.L}, d_k = "
        f"{spec.d_k}), p = {DROP_P:g}, {d.n} seeded draws, {setting.device}",
    )


def _dropout_judge(m: Measurement) -> Judgement:
    if m.num("within") >= WITHIN_2SE and m.num("max_z") <= MAX_Z:
        return Judgement(
            HOLDS,
            "inverted dropout (survivors ÷ (1 − p)) leaves every output unbiased; one draw is noisy (std "
            f"√(p/(1−p)·Σw²v²)), {int(m.num('draws'))} draws average it out.",
        )
    return Judgement(
        FAILS,
        f"only {m.num('within'):.1%} of the entries lie within 2 standard errors (largest |z| "
        f"{m.num('max_z'):.1f}).",
    )


DROPOUT_MEAN = Claim(
    key="dropout_mean",
    source="d2l",
    also=("sdpa",),
    quote="dropout_layer = nn.Dropout(self.dropout, deterministic=not training) … return "
    "dropout_layer(attention_weights)@values",
    test=f"The mean output of seeded dropout draws (p = {DROP_P:g}) on the Heatmaps page's default head, "
    "against the output without dropout, entry by entry in standard errors of the mean (closed form).",
    tolerance=f"at least {WITHIN_2SE:.0%} of the entries within 2 standard errors and none beyond {MAX_Z:g}",
    measure=_dropout,
    describe=lambda m: (
        f"{m.num('within'):.1%} of {int(m.num('entries'))} entries within 2 SE of the no-dropout output "
        f"after {int(m.num('draws'))} draws; largest |z| {m.num('max_z'):.2f}."
    ),
    judge=_dropout_judge,
)


def _dropout_flag(setting: Setting) -> Measurement:
    x = make_inputs(KernelSpec(heads=4, head_dim=64, seed=setting.seed), 64, 64, setting.device)
    devices = [torch.device(setting.device)] if torch.device(setting.device).type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):  # SDPA's dropout uses the global RNG
        torch.manual_seed(setting.seed)
        plain = sdpa(x.query, x.key, x.value)
        a = sdpa(x.query, x.key, x.value, dropout_p=DROP_P)
        b = sdpa(x.query, x.key, x.value, dropout_p=DROP_P)
    return Measurement(
        {"vs_plain": float((a - plain).abs().max()), "vs_again": float((a - b).abs().max())},
        scale=f"F.scaled_dot_product_attention, 4 heads × 64 × 64, under torch.no_grad, {setting.device}",
    )


def _flag_judge(m: Measurement) -> Judgement:
    if m.num("vs_plain") > 0 and m.num("vs_again") > 0:
        return Judgement(
            CAVEAT,
            "SDPA has no training flag: it drops weights whenever dropout_p > 0, also under no_grad or in "
            "eval mode; the caller must pass 0 at inference (nn.MultiheadAttention does so in eval mode).",
        )
    return Judgement(HOLDS, "SDPA did not drop weights outside training.")


DROPOUT_TRAINING_ONLY = Claim(
    key="dropout_training_only",
    source="sdpa",
    quote="# With dropout (training only): out = F.scaled_dot_product_attention(Q, K, V, dropout_p=0.1)",
    test="Two SDPA calls with dropout_p = 0.1 under torch.no_grad (no training), against each other and "
    "against dropout_p = 0.",
    tolerance="any difference means weights were dropped",
    measure=_dropout_flag,
    describe=lambda m: (
        f"under no_grad the outputs differ from dropout_p = 0 by up to {fmt(m.num('vs_plain'))} and from "
        f"each other by {fmt(m.num('vs_again'))}."
    ),
    judge=_flag_judge,
)


def _row_sums(setting: Setting) -> Measurement:
    spec = SyntheticSpec(seed=setting.seed)
    w = synthetic_stages(spec, setting.device).weights  # (H, L, S)
    return Measurement(
        {"dev": float((w.sum(-1) - 1.0).abs().max()), "rows": w.shape[0] * w.shape[1]},
        scale=f"the Heatmaps page's default: {spec.heads} heads, L = S = {spec.L}, d_k = {spec.d_k}, "
        f"float32, {setting.device}",
    )


def _row_sum_judge(m: Measurement) -> Judgement:
    if m.num("dev") <= ROW_SUM_TOL:
        return Judgement(
            HOLDS,
            "for softmax rows that see at least one key; softmax1 and sigmoid rows (Heatmaps' normaliser "
            "control) and fully masked rows do not sum to 1.",
        )
    return Judgement(FAILS, f"a row sums to 1 ± {fmt(m.num('dev'), 2)}.")


ROWS_SUM_TO_ONE = Claim(
    key="rows_sum_to_one",
    source="sdpa",
    quote="Each row of A sums to 1 — it's a distribution over key positions for each query position.",
    test="Row sums of the Heatmaps page's default weights (attncore.attention).",
    tolerance=f"within {ROW_SUM_TOL:g} of 1 (float32)",
    measure=_row_sums,
    describe=lambda m: f"{int(m.num('rows'))} rows sum to 1 within {fmt(m.num('dev'), 2)}.",
    judge=_row_sum_judge,
)


def _causal(setting: Setting) -> Measurement:
    g = make_generator(setting.seed)
    q, k, v = (randn(1, 4, 16, 64, generator=g, device=setting.device) for _ in range(3))
    out, w = attention(q, k, v, is_causal=True, return_weights=True)
    ref = sdpa(q, k, v, is_causal=True)
    above = torch.ones(16, 16, dtype=torch.bool, device=setting.device).triu(1)
    return Measurement(
        {
            "above": float(w[..., above].abs().max()),
            "diff": float((out - ref).abs().max()),
            "tol": tolerance("float32"),
        },
        scale="4 heads, L = S = 16, d_k = 64 (the Heatmaps page with mask = causal), float32, "
        f"{setting.device}",
    )


def _causal_judge(m: Measurement) -> Judgement:
    if m.num("above") == 0.0 and m.num("diff") <= m.num("tol"):
        return Judgement(
            HOLDS, "e^(−∞) = 0 exactly; the same as SDPA's is_causal (top-left aligned when L ≠ S)."
        )
    return Judgement(
        FAILS,
        f"weights above the diagonal reach {fmt(m.num('above'))}; SDPA differs by {fmt(m.num('diff'))}.",
    )


CAUSAL_ZERO = Claim(
    key="causal_zero",
    source="sdpa",
    quote="With causal mask … Implemented by setting masked positions to [−∞] before softmax, so they become "
    "0 after exponentiation.",
    test="attncore's causal weights above the diagonal, and its output against "
    "F.scaled_dot_product_attention (is_causal=True).",
    tolerance=f"exactly 0 above the diagonal; outputs within {tolerance('float32'):g}",
    measure=_causal,
    describe=lambda m: (
        f"largest weight above the diagonal {fmt(m.num('above'))}; output vs SDPA {fmt(m.num('diff'), 2)}."
    ),
    judge=_causal_judge,
)


def numpy_sdpa(Q: np.ndarray, K: np.ndarray, V: np.ndarray, causal: bool = False) -> np.ndarray:
    """The reference page's numpy ``scaled_dot_product_attention`` as it prints it, line by line.

    Args:
        Q: (B, L, E); K: (B, S, E); V: (B, S, Ev). ``causal`` hides keys ``j > i`` with −1e9.

    Returns:
        (B, L, Ev) in the inputs' dtype.
    """
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(0, 2, 1)  # (B, L, S)
    scores = scores / np.sqrt(d_k)
    if causal:
        T_q, T_k = scores.shape[1], scores.shape[2]
        mask = np.triu(np.ones((T_q, T_k), dtype=bool), k=1)
        scores[:, mask] = -1e9
    scores_max = scores.max(axis=-1, keepdims=True)  # (B, L, 1)
    exp_scores = np.exp(scores - scores_max)  # (B, L, S)
    weights = exp_scores / exp_scores.sum(axis=-1, keepdims=True)  # (B, L, S)
    return weights @ V  # (B, L, Ev)


def _manual(setting: Setting) -> Measurement:
    T = 128
    vals: dict[str, float | int | str | bool] = {"tol": tolerance("float32")}
    # the claim: the numpy function, with and without its causal flag, against SDPA
    for causal in (False, True):
        spec = KernelSpec(heads=4, head_dim=64, mask="causal" if causal else "none", seed=setting.seed)
        x = make_inputs(spec, T, T, setting.device)
        ref = sdpa(x.query, x.key, x.value, is_causal=causal).cpu()  # (1, H, T, E)
        q, k, v = (t.cpu().flatten(0, 1).numpy() for t in (x.query, x.key, x.value))  # (H, T, E)
        ours = torch.from_numpy(numpy_sdpa(q, k, v, causal=causal)).view_as(ref)
        vals["causal_diff" if causal else "plain_diff"] = float((ours - ref).abs().max())
    # the extension: a boolean mask (the function takes none) through the manual masked_fill(−∞) version
    spec = KernelSpec(heads=4, head_dim=64, mask="boolean", seed=setting.seed)
    x = make_inputs(spec, T, T, setting.device)
    empty = fully_masked_rows(spec.mask, T)
    seen = torch.ones(T, dtype=torch.bool, device=setting.device)
    seen[empty] = False
    manual = notebook_attention(x.query, x.key, x.value, attn_mask=x.attn_mask)
    ref = sdpa(x.query, x.key, x.value, attn_mask=x.attn_mask)
    vals.update(
        {
            "diff": float((manual[..., seen, :] - ref[..., seen, :]).abs().max()),
            "nan_rows": int((~torch.isfinite(manual[..., ~seen, :])).any(-1).sum()),
            "empty_rows": len(empty) * spec.heads,
            "sdpa_empty": float(ref[..., ~seen, :].abs().max()),
        }
    )
    return Measurement(
        vals,
        scale=f"4 heads, T = {T}, d = 64, float32: the numpy function on the CPU, SDPA on {setting.device}; "
        f"the extension: the Kernels page's boolean mask (rows {', '.join(map(str, empty))} see no key)",
    )


def _manual_judge(m: Measurement) -> Judgement:
    worst = max(m.num("plain_diff"), m.num("causal_diff"))
    if worst > m.num("tol"):
        return Judgement(FAILS, f"the numpy version differs from SDPA by {fmt(worst)}.")
    ext = (
        f"equal where a row sees a key ({fmt(m.num('diff'), 2)})"
        if m.num("diff") <= m.num("tol")
        else f"{fmt(m.num('diff'), 2)} apart where a row sees a key"
    )
    if m.num("nan_rows"):
        ext += (
            f"; a row that sees none gets NaN from masked_fill(−∞) ({int(m.num('nan_rows'))} rows) and "
            f"{fmt(m.num('sdpa_empty'))} from SDPA here"
        )
    return Judgement(
        HOLDS,
        f"equal within {m.num('tol'):g} with and without its causal flag, the only mask it takes. Extension "
        f"beyond the text (a boolean mask, through the torch snippet's masked_fill(−∞)): {ext}.",
    )


MANUAL_EQUIVALENT = Claim(
    key="manual_equivalent",
    source="sdpa",
    quote="def scaled_dot_product_attention(Q, K, V, causal=False): \"\"\" Equivalent to "
    "F.scaled_dot_product_attention.",
    test="The page's numpy function, line by line (−1e9 above the diagonal when causal), against SDPA "
    "without a mask and with is_causal=True. Extension, beyond the text: the manual masked_fill(−∞) version "
    "(attncore.kernels.notebook_attention) under a boolean mask that hides every key from some rows.",
    tolerance=f"within {tolerance('float32'):g} (float32); the extension is reported, not judged",
    measure=_manual,
    describe=lambda m: (
        f"largest difference {fmt(m.num('plain_diff'), 2)} (no mask), {fmt(m.num('causal_diff'), 2)} "
        f"(causal); extension, boolean mask: {fmt(m.num('diff'), 2)} where rows see a key, "
        f"{int(m.num('nan_rows'))} of {int(m.num('empty_rows'))} fully masked rows NaN in the manual version."
    ),
    judge=_manual_judge,
)


CLAIMS: tuple[Claim, ...] = (
    D2L_OUTPUTS,
    D2L_PAD_ZERO,
    D2L_VALID_LEN_ZERO,
    DROPOUT_MEAN,
    ROWS_SUM_TO_ONE,
    CAUSAL_ZERO,
    MANUAL_EQUIVALENT,
    DROPOUT_TRAINING_ONLY,
)
