"""The real decoder's passes as plans (:class:`attncore.plan.Plan`): each knows its memory estimate and runs
its work, so the estimate lives beside the work and ``tests/test_plan_memory.py`` holds one against the
other (peak resident memory measured in a fresh process, at 64, 394 and 1,024 tokens).

Shape legend: ``N`` layers, ``H`` query heads, ``L`` tokens, ``P`` prompt tokens, ``T`` new tokens, ``D``
residual width, ``V`` vocabulary.

Estimates: :func:`attncore.decoder.probe.forward_bytes` for a pass of
:func:`~attncore.decoder.probe.decoder_pass` (several passes in a row peak like one, plus what the work keeps
between them); :func:`attncore.models.generation.generation_bytes` for generation;
:func:`attncore.models.capture.decoder_pass_bytes` for the Heatmaps real-text pass. Seconds: a pass's
multiply-adds (2 x parameters x L for the matrices, 4 N H E L^2 for scores and weighted values, and about
16 N H L^2 more for the summaries when the weights are kept) at :data:`FLOPS_PER_SECOND`, a rough rate of
a small CPU server (the estimate only queues work and decides whether a view waits for a Run button, so only
its ratio to the default view's matters; the fuzz server of issue 44 ran the default Attention sinks view,
1.4e12 by this count, in 8.2 s: about 3x faster than this rate, and a GPU is faster still).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor

from attncore import models as _models
from attncore import qkv as _qkv
from attncore.decoder.entropy import EntropyProfile, entropy_profile
from attncore.decoder.eviction import EvictionResult, EvictionSetting, evict_losses, eviction_cost
from attncore.decoder.induction import (
    ABLATION_SHARES,
    Induction,
    InductionAblation,
    ablate_induction_heads,
    induction,
    repeated_tokens,
)
from attncore.decoder.lens import LensPass, lens_bytes, logit_lens
from attncore.decoder.patching import PARTS, PairIds, Patching, activation_patching, patch_bytes
from attncore.decoder.position import FirstTokenDeletion, GuRow, delete_first_token, gu_inputs
from attncore.decoder.probe import (
    DecoderPass,
    DecoderShape,
    ResidualEdit,
    check_ids,
    decoder_pass,
    decoder_shape,
    forward_bytes,
)
from attncore.decoder.scaling import FACTORS, LogitSpread, ScaledRun, logit_spread, scaled_runs, spread_bytes
from attncore.decoder.sinks import DecoderSinks, SinkVariant, decoder_sinks, sink_variants
from attncore.decoder.streaming import (
    Ablation,
    StreamResult,
    StreamSetting,
    ablations,
    massive_point,
    stream_losses,
)
from attncore.models.capture import attention_modules, decoder_pass_bytes, tokenize
from attncore.models.generation import Generation, generation_bytes
from attncore.models.loading import LoadedModel
from attncore.plan import Plan

__all__ = [
    "FLOPS_PER_SECOND",
    "ablations_plan",
    "deletion_plan",
    "entropy_plan",
    "eviction_plan",
    "generation_plan",
    "gu_plan",
    "induction_ablation_plan",
    "induction_plan",
    "lens_plan",
    "next_logits_plan",
    "pass_plan",
    "patching_plan",
    "pass_seconds",
    "qkv_plan",
    "scaling_plan",
    "sinks_plan",
    "spread_plan",
    "stream_plan",
    "text_plan",
    "variants_plan",
]

FLOPS_PER_SECOND = 5e10  # rough rate of a small CPU server on a decoder's pass (see the module docstring)


def _params(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def pass_seconds(model: Any, shape: DecoderShape, L: int, weights: bool = True) -> float:
    """Rough seconds of one pass of ``model`` over L tokens (see the module docstring)."""
    flops = 2.0 * _params(model) * L + 4.0 * shape.layers * shape.heads * shape.head_dim * L * L
    if weights:
        flops += 16.0 * shape.layers * shape.heads * L * L
    return flops / FLOPS_PER_SECOND


def pass_plan(model: Any, ids: Tensor, *, allowed: Tensor | None = None, weights: bool = True,
              maps: Sequence[tuple[int, int]] = (), stripe_offset: int | None = None, stripe_from: int = 0,
              edits: Sequence[ResidualEdit] = ()) -> Plan[DecoderPass]:
    """One :func:`~attncore.decoder.probe.decoder_pass` of ``ids`` (1, L), planned."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    return Plan(label=f"a {L:,}-token pass of the decoder",
                nbytes=int(forward_bytes(shape, L, weights, len(maps))),
                seconds=pass_seconds(model, shape, L, weights),
                work=lambda: decoder_pass(model, ids, allowed=allowed, weights=weights, maps=maps,
                                          stripe_offset=stripe_offset, stripe_from=stripe_from, edits=edits),
                model=model)


def entropy_plan(model: Any, ids: Tensor) -> Plan[EntropyProfile]:
    """Entropy by position of every head on ``ids`` (1, L): one pass with the weights, then its profile
    (the profile's band medians copy one (N, H, L) summary at a time: inside the pass's estimate)."""
    p = pass_plan(model, ids)
    return Plan(label="the entropy pass", nbytes=p.nbytes, seconds=p.seconds,
                work=lambda: entropy_profile(p.work()), model=model)


def sinks_plan(model: Any, ids: Tensor, texts: Sequence[str], eps: float) -> Plan[DecoderSinks]:
    """Sink heads, attractors, value drain and massive activations of ``ids`` (1, L): one pass with
    weights."""
    p = pass_plan(model, ids)
    return Plan(label="the sink heads", nbytes=p.nbytes, seconds=p.seconds,
                work=lambda: decoder_sinks(model, ids, texts, eps=eps, run=p.work()), model=model)


def variants_plan(model: Any, ids: Tensor, texts: Sequence[str], *, other_first: int, other_text: str,
                  shift: int, length: int, eps: float) -> Plan[tuple[SinkVariant, ...]]:
    """The three variants of :func:`~attncore.decoder.sinks.sink_variants`: three passes of ``length`` tokens
    in a row (each keeps only its (N, H) scores, so they peak like one)."""
    shape = decoder_shape(model)
    return Plan(label="the three variants", nbytes=int(forward_bytes(shape, length)),
                seconds=3 * pass_seconds(model, shape, length),
                work=lambda: sink_variants(model, ids, texts, other_first=other_first, other_text=other_text,
                                           shift=shift, length=length, eps=eps),
                model=model)


def ablations_plan(model: Any, ids: Tensor, texts: Sequence[str], windows: Callable[[], Sequence[Tensor]],
                   L: int, count: int) -> Plan[tuple[Ablation, ...]]:
    """The first-token ablations on ``count`` windows of ``L`` tokens (``windows()`` makes them), after a
    probe pass (no weights kept) on the first ``L`` tokens of ``ids`` that finds the edited layer and dims
    (the first token's 4 largest where its residual norm peaks, edited after the layer where it first passes
    half). 4 passes without weights per window; the dense passes' results are kept until the end
    ((N + 1) L D each, beside the running pass)."""
    shape = decoder_shape(model)
    probe_ids = ids[:, :L]
    kept = count * 4.0 * (shape.layers + 1) * L * shape.hidden  # the dense runs' residuals, kept
    nbytes = max(forward_bytes(shape, L), forward_bytes(shape, L, weights=False) + kept)

    def work() -> tuple[Ablation, ...]:
        layer, dims = massive_point(model, probe_ids)
        return ablations(model, list(windows()), layer, dims)

    return Plan(label="the ablations", nbytes=int(nbytes),
                seconds=pass_seconds(model, shape, L) + 4 * count * pass_seconds(model, shape, L, False),
                work=work, model=model)


def induction_plan(model: Any, T: int, seed: int, exclude: Sequence[int] = ()) -> Plan[Induction]:
    """Induction scores on T seeded random tokens repeated once: two passes of 2 T tokens with weights, the
    second keeping the top 3 heads' maps."""
    shape = decoder_shape(model)
    L = 2 * int(T)
    repeated_tokens(shape.vocab, T, seed, exclude)  # its checks, before anything is planned
    return Plan(label="the induction test", nbytes=int(forward_bytes(shape, L, maps=3)),
                seconds=2 * pass_seconds(model, shape, L),
                work=lambda: induction(model, T, seed, exclude=exclude), model=model)


def stream_plan(model: Any, ids: Tensor, settings: Sequence[StreamSetting],
                progress: Callable[[int, int, StreamSetting], None] | None = None) -> Plan[StreamResult]:
    """StreamingLLM's settings on ``ids`` (1, L): one pass without weights per setting, in a row."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    return Plan(label="the StreamingLLM panel", nbytes=int(forward_bytes(shape, L, weights=False)),
                seconds=len(settings) * pass_seconds(model, shape, L, weights=False),
                work=lambda: stream_losses(model, ids, settings, progress=progress), model=model)


def eviction_plan(model: Any, ids: Tensor, settings: Sequence[EvictionSetting], record: Sequence[int],
                  progress: Callable[[int, int, EvictionSetting], None] | None = None,
                  cancel: Callable[[], bool] | None = None) -> Plan[EvictionResult]:
    """The eviction policies' token-by-token decodes of ``ids`` (1, L), one setting after another, the caches
    of the ``record`` layers kept; memory and seconds from :func:`~attncore.decoder.eviction.eviction_cost`
    (one setting's cache at a time plus every setting's kept positions)."""
    ids = check_ids(ids, model)
    cost = eviction_cost(decoder_shape(model), int(ids.shape[1]), settings, len(record))
    return Plan(label=f"the eviction panel ({len(settings)} decodes of {int(ids.shape[1]):,} tokens)",
                nbytes=int(cost.nbytes), seconds=cost.seconds,
                work=lambda: evict_losses(model, ids, settings, record=record, progress=progress,
                                          cancel=cancel),
                model=model, advice="Use fewer settings or a shorter text.")


def generation_plan(lm: LoadedModel, text: str, n_new: int, *, greedy: bool = True, temperature: float = 1.0,
                    seed: int = 0) -> Plan[Generation]:
    """Up to ``n_new`` tokens after ``text`` with every step's attention
    (:func:`~attncore.models.generation.generate`)."""
    P = tokenize(lm, text, max_tokens=lm.token_limit - max(1, int(n_new))).length
    shape = decoder_shape(lm.model)
    seconds = pass_seconds(lm.model, shape, P) + int(n_new) * pass_seconds(lm.model, shape, 1)
    return Plan(label=f"generating {n_new} tokens after {P:,}", nbytes=generation_bytes(lm, P, int(n_new)),
                seconds=seconds,
                work=lambda: _models.generation.generate(lm, text, n_new, greedy=greedy,
                                                         temperature=temperature, seed=seed),
                model=lm.model, advice="Generate fewer tokens or use a shorter text.")


def _seconds(lm: LoadedModel, L: int) -> float:
    try:
        return pass_seconds(lm.model, decoder_shape(lm.model), L)
    except Exception:  # an encoder (MiniLM) is no Llama-family decoder: its matrices at the same rate
        return 2.0 * _params(lm.model) * L / FLOPS_PER_SECOND


def text_plan(lm: LoadedModel, text: str, max_tokens: int | None = None,
              layers: tuple[int, ...] | None = None) -> Plan[Any]:
    """The Heatmaps real-text pass (:func:`attncore.models.run_text`): every layer's maps up to the model's
    map limit, past it every head's summary and the maps of ``layers``; the estimate is the one
    :func:`~attncore.models.run_text` checks."""
    L = tokenize(lm, text, max_tokens).length
    keep_all = lm.full_map_limit >= L
    hooked = len(attention_modules(lm.model)) == lm.layers
    kept = lm.layers if keep_all else len(set(layers or (0,)))
    nbytes = decoder_pass_bytes(lm, L, kept, 1 if hooked else 2)
    return Plan(label=f"one pass of {lm.name} over {L:,} tokens", nbytes=int(nbytes), seconds=_seconds(lm, L),
                work=lambda: _models.run_text(lm, text, max_tokens=max_tokens, layers=layers), model=lm.model)


def next_logits_plan(lm: LoadedModel, text: str) -> Plan[Tensor]:
    """The next token's logits after ``text`` (one pass that keeps one row of logits)."""
    L = tokenize(lm, text).length
    return Plan(label="the next-token distribution", nbytes=int(decoder_pass_bytes(lm, L, 0)),
                seconds=_seconds(lm, L), work=lambda: _models.generation.next_logits(lm, text),
                model=lm.model)


def qkv_plan(lm: LoadedModel, text: str, max_tokens: int | None = None) -> Plan[Any]:
    """Every head's q, k, v and output on ``text`` (:func:`attncore.qkv.capture`): the vectors kept
    (:func:`attncore.qkv.capture_bytes`) beside one pass
    (:func:`attncore.models.capture.decoder_pass_bytes`)."""
    L = tokenize(lm, text, max_tokens).length
    cfg = lm.model.config
    E = int(getattr(cfg, "head_dim", 0) or getattr(cfg, "hidden_size", 64 * lm.heads) // lm.heads)
    H, Hkv = lm.heads, lm.kv_heads or lm.heads
    # N L E floats per head: the hooks' q, k, v and output (2 H + 2 Hkv), then each layer's rotated q and
    # repeated k, v (3 H) and the four stacked results (4 H), all alive at the end
    vectors = 4 * lm.layers * L * E * (9 * H + 2 * Hkv)
    nbytes = max(_qkv.capture_bytes(lm.layers, H, L, E, E), vectors) + decoder_pass_bytes(lm, L, 0)
    return Plan(label="reading q, k and v", nbytes=int(nbytes), seconds=_seconds(lm, L),
                work=lambda: _qkv.capture(lm, text, max_tokens), model=lm.model)


def deletion_plan(model: Any, ids: Tensor) -> Plan[FirstTokenDeletion]:
    """The first token of ``ids`` (1, L) masked from every later query and deleted
    (:func:`~attncore.decoder.position.delete_first_token`): three passes in a row (dense with weights, the
    mask without, the cut text with weights); the dense pass's summaries are kept while the cut text's pass
    runs, so the peak is bounded by two passes with weights."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    return Plan(label="deleting the first token", nbytes=int(2 * forward_bytes(shape, L)),
                seconds=2 * pass_seconds(model, shape, L) + pass_seconds(model, shape, L, False),
                work=lambda: delete_first_token(model, ids), model=model)


def gu_plan(model: Any, ids: Tensor, *, seed: int, prefix_id: int | None, prefix_text: str,
            exclude: Sequence[int] = ()) -> Plan[tuple[GuRow, ...]]:
    """Gu et al.'s inputs of L = ``ids.shape[-1]`` tokens (:func:`~attncore.decoder.position.gu_inputs`):
    three passes, six with ``prefix_id``, in a row, each keeping every head's map (N H L^2) until its row is
    summarised."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    passes = 6 if prefix_id is not None else 3
    every_map = shape.layers * shape.heads
    return Plan(label="Gu et al.'s inputs", nbytes=int(forward_bytes(shape, L, maps=every_map)),
                seconds=passes * pass_seconds(model, shape, L),
                work=lambda: gu_inputs(model, ids, seed=seed, prefix_id=prefix_id, prefix_text=prefix_text,
                                       exclude=exclude),
                model=model)


def induction_ablation_plan(model: Any, ind: Induction, *, sets: int, seed: int,
                            shares: Sequence[float] = ABLATION_SHARES) -> Plan[InductionAblation]:
    """The top induction heads and ``sets`` random sets of each size zeroed
    (:func:`~attncore.decoder.induction.ablate_induction_heads`): 1 + sizes x (1 + sets) passes of 2 T tokens
    without weights, one at a time (each keeps only its (2 T - 1,) losses)."""
    shape = decoder_shape(model)
    L = int(ind.ids.shape[-1])
    n = shape.layers * shape.heads
    sizes = dict.fromkeys(max(1, round(float(s) * n)) for s in shares)
    passes = 1 + len(sizes) * (1 + int(sets))
    return Plan(label="the induction heads' ablation", nbytes=int(forward_bytes(shape, L, weights=False)),
                seconds=passes * pass_seconds(model, shape, L, False),
                work=lambda: ablate_induction_heads(model, ind, sets=sets, seed=seed, shares=shares),
                model=model)


def lens_plan(model: Any, ids: Tensor, position: int | None = None) -> Plan[LensPass]:
    """The logit lens and direct logit attribution of ``position`` of ``ids`` (1, L)
    (:func:`~attncore.decoder.lens.logit_lens`): one hooked pass, estimated by
    :func:`~attncore.decoder.lens.lens_bytes`."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    return Plan(label="the logit lens", nbytes=int(lens_bytes(shape, L)),
                seconds=pass_seconds(model, shape, L, False),
                work=lambda: logit_lens(model, ids, position), model=model)


def spread_plan(model: Any, ids: Tensor) -> Plan[LogitSpread]:
    """Every head's scaled-logit statistics on ``ids`` (1, L)
    (:func:`~attncore.decoder.scaling.logit_spread`): one pass without weights, each layer's logits
    rebuilt and summarised in its hook
    (:func:`~attncore.decoder.scaling.spread_bytes`)."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    return Plan(label="the logit statistics", nbytes=int(spread_bytes(shape, L)),
                seconds=pass_seconds(model, shape, L), work=lambda: logit_spread(model, ids), model=model)


def scaling_plan(model: Any, ids: Tensor, factors: Sequence[float] = FACTORS,
                 progress: Callable[[int, int, ScaledRun], None] | None = None,
                 cancel: Callable[[], bool] | None = None) -> Plan[tuple[ScaledRun, ...]]:
    """The 1/sqrt(E) intervention (:func:`~attncore.decoder.scaling.scaled_runs`): one eager pass per
    factor, in a row, each keeping only its (N, H) summaries and (L - 1,) losses (they peak like one pass
    with weights)."""
    ids = check_ids(ids, model)
    shape = decoder_shape(model)
    L = int(ids.shape[1])
    return Plan(label=f"the scale intervention ({len(factors)} passes of {L:,} tokens)",
                nbytes=int(forward_bytes(shape, L)), seconds=len(factors) * pass_seconds(model, shape, L),
                work=lambda: scaled_runs(model, ids, factors, progress=progress, cancel=cancel), model=model)


def patching_plan(model: Any, pair: PairIds, *, parts: tuple[str, ...] = PARTS,
                  progress: Callable[[int, int, Patching], None] | None = None,
                  cancel: Callable[[], bool] | None = None, resume: Patching | None = None) -> Plan[Patching]:
    """Activation patching of ``pair`` (:func:`~attncore.decoder.patching.activation_patching`): two passes of
    one row, then per layer one batched pass of L rows (the residual) and one of H rows (the heads), one at a
    time, estimated by :func:`~attncore.decoder.patching.patch_bytes`; seconds count each row as a pass."""
    shape = decoder_shape(model)
    L = pair.length
    rows = 2 + shape.layers * ((L if "resid" in parts else 0) + (shape.heads if "heads" in parts else 0))
    return Plan(label=f"patching a pair of {L} tokens", nbytes=int(patch_bytes(shape, L)),
                seconds=rows * pass_seconds(model, shape, L, False),
                work=lambda: activation_patching(model, pair, parts=parts, progress=progress, cancel=cancel,
                                                 resume=resume),
                model=model, advice="Use shorter prompts.")
