"""An induction head forms: a 2-layer attention-only transformer on repeated random tokens (Olsson et al.
2022, "In-context Learning and Induction Heads"), trained with Adam, watched at every evaluation point.

Shape legend: ``B`` sequences, ``T`` tokens of one copy, ``L = 2T`` positions, ``V`` vocabulary, ``N``
layers (2), ``H`` heads per layer, ``D`` width, ``E = D / H`` head dim.

The task: T tokens drawn uniformly from [0, V), then the same T again. The first copy cannot be predicted
(its loss stays near ln V); the second can, by the two-head circuit Olsson et al. describe: a
*previous-token head* in layer 0 writes "the token before me" into each position, and an *induction head* in
layer 1 attends from query ``i = T + j`` to the key whose previous token equals the query's token, key
``j + 1 = i - T + 1``, and copies it: a stripe ``T - 1`` below the diagonal of its map.

The two scores are the measures :mod:`attncore.decoder.induction` computes on SmolLM2, so this model's view
and the real model's mean the same:

- induction score of a head: its mean weight from the second copy's queries ``i = T .. 2T-1`` on key
  ``i - T + 1`` (:func:`induction_score`, the decoder's ``stripe_offset = T - 1, stripe_from = T``);
- previous-token score: its mean weight from queries ``i = 1 .. 2T-1`` on key ``i - 1``
  (:func:`previous_token_score`);
- losses: the mean loss on the first copy's tokens ``1 .. T-1`` and the second's ``T+1 .. 2T-1`` (the
  decoder's ``loss_first`` and ``loss_second``).

The phase change is located by a rule (:func:`phase_change`): where the second-copy loss falls fastest
between evaluation points, with the points where it has made 10% and 90% of its whole fall; the heads'
maps are kept at those two points ("before" and "after").

The training loop and the shipped run's command line are :mod:`attncore.training.induction`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attncore.errors import AttnInputError
from attncore.synthetic import make_generator
from attncore.training.config import TrainConfig
from attncore.training.model import apply_rotary, rotary_angles

__all__ = [
    "EVAL_SEED",
    "FORMED_SCORE",
    "PHASE_FRACTIONS",
    "SIZE",
    "VOCAB",
    "AttentionOnly",
    "Phase",
    "copy_losses",
    "hand_built_circuit",
    "induction_config",
    "induction_score",
    "phase_change",
    "previous_token_score",
    "repeated_batch",
    "training_batch",
    "uniform_scores",
]

VOCAB = 64  # V: the random tokens' vocabulary (uniform guessing: ln 64 = 4.16 nats)
EVAL_SEED = 12_345  # the fixed evaluation batch is drawn from this seed, whatever the run's seed
FORMED_SCORE = 0.5  # a head is an induction head when its score reaches this (half its weight on the stripe)
PHASE_FRACTIONS = (0.1, 0.9)  # the phase change begins / ends when the fall has gone this far
# The run's size: 2 layers x 1 head, width 64, T = 16 (L = 32), batch 32, Adam lr 1e-2, 1,000 steps: about
# a minute on one thread of a shared 2-core CPU (the shipped file's runs record their seconds).
SIZE: dict[str, int | float] = {"copy": 16, "d_model": 64, "n_head": 1, "batch": 32, "steps": 1000,
                                "lr": 1e-2, "eval_every": 25, "eval_batch": 64}


def induction_config(seed: int = 0, **changes: int | float) -> TrainConfig:
    """The run's :class:`TrainConfig` (2 layers, rotary positions, ``context = 2T``) from
    :data:`SIZE` with ``changes`` (``copy``, ``d_model``, ``n_head``, ``batch``, ``steps``, ``lr``,
    ``eval_every``; no others)."""
    unknown = set(changes) - set(SIZE) - {"warmup"}
    if unknown:
        raise AttnInputError(f"unknown setting(s) of the induction run: {', '.join(sorted(unknown))}.")
    s = {**SIZE, **changes}
    steps = int(s["steps"])
    return TrainConfig(variant="standard", n_layer=2, n_head=int(s["n_head"]), d_model=int(s["d_model"]),
                       context=2 * int(s["copy"]), batch=int(s["batch"]), steps=steps, lr=float(s["lr"]),
                       warmup=int(changes.get("warmup", 0)),
                       eval_every=max(1, min(int(s["eval_every"]), steps)),
                       seed=int(seed), positions="rotary", weight_decay=0.0, dropout=0.0)


def repeated_batch(B: int, T: int, generator: torch.Generator, vocab: int = VOCAB) -> Tensor:
    """(B, 2T) int64: per row, T tokens drawn uniformly from [0, ``vocab``) with ``generator`` (CPU),
    twice."""
    first = torch.randint(0, vocab, (B, T), generator=generator)  # (B, T)
    return torch.cat([first, first], dim=1)


def training_batch(B: int, T: int, generator: torch.Generator, vocab: int = VOCAB) -> Tensor:
    """(B, 2T) int64 training sequences: per row a period ``P`` drawn uniformly from [T/4, T], then
    ``2T - 2P`` random tokens and ``P`` random tokens twice (all uniform over [0, ``vocab``), from
    ``generator``, CPU).

    The evaluation sequences (:func:`repeated_batch`) are the rows with ``P = T``. A varied period is what
    makes the model learn induction: with every copy at the same place, a head that attends ``T - 1``
    positions back by position alone would predict the second copy without reading a token.
    """
    L = 2 * T
    tokens = torch.randint(0, vocab, (B, L), generator=generator)  # (B, L)
    P = torch.randint(max(2, T // 4), T + 1, (B, 1), generator=generator)  # (B, 1)
    pos = torch.arange(L).expand(B, L)  # (B, L)
    src = torch.where(pos >= L - P, pos - P, pos)  # the second copy reads the P positions before it
    return tokens.gather(1, src)


# ---------------------------------------------------------------------------- the model


class AttentionOnly(nn.Module):
    """A causal attention-only transformer: a token embedding, N layers of H heads each added to the residual
    stream (no MLP, no LayerNorm), an untied unembedding; positions by rotary q and k (``positions =
    "rotary"``, the trained model: a head can attend one position back at every position alike) or by a
    position embedding added to the token's (``"learned"``, the hand-built circuit's one-hot positions)."""

    def __init__(self, vocab: int, context: int, d_model: int, n_layer: int, n_head: int,
                 generator: torch.Generator | None = None, positions: str = "rotary") -> None:
        """Weights drawn with ``generator`` (CPU): N(0, 1/D) for the embeddings, N(0, 1/D) for the
        projections (so q·k/√E is O(1) at the start)."""
        super().__init__()
        if d_model % n_head or (d_model // n_head) % 2:
            raise AttnInputError(f"d_model ({d_model}) must be a multiple of n_head ({n_head}) with an even "
                                 "head dim.")
        if positions not in ("rotary", "learned"):
            raise AttnInputError(f"positions are 'rotary' or 'learned'; got {positions!r}.")
        self.vocab, self.context, self.D, self.N, self.H = vocab, context, d_model, n_layer, n_head
        self.E = d_model // n_head
        self.rotary = positions == "rotary"
        g = generator if generator is not None else make_generator(0)
        std = 1.0 / math.sqrt(d_model)

        def w(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=g) * std)

        self.embed = w(vocab, d_model)  # (V, D)
        self.pos = w(context, d_model)  # (L, D); unused (and untrained) with rotary positions
        self.wq = nn.ParameterList([w(d_model, d_model) for _ in range(n_layer)])  # (D, H E) each
        self.wk = nn.ParameterList([w(d_model, d_model) for _ in range(n_layer)])
        self.wv = nn.ParameterList([w(d_model, d_model) for _ in range(n_layer)])
        # q and k biases (start at 0): a direction the same at every token, which rotary positions turn into
        # a preference for a relative position (the previous-token head's)
        self.bq = nn.Parameter(torch.zeros(n_layer, d_model))  # (N, H E)
        self.bk = nn.Parameter(torch.zeros(n_layer, d_model))
        self.wo = nn.ParameterList([w(d_model, d_model) for _ in range(n_layer)])
        self.unembed = w(d_model, vocab)  # (D, V)

    def forward(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``ids`` (B, L) -> (logits (B, L, V), weights (N, B, H, L, L)): every head's attention map."""
        B, L = ids.shape
        if self.context < L:
            raise AttnInputError(f"the model reads at most {self.context} positions; got {L}.")
        x = self.embed[ids] + (0.0 if self.rotary else self.pos[:L])  # (B, L, D)
        mask = torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()
        cos, sin = rotary_angles(torch.arange(L, device=ids.device), self.E)  # (L, E/2)
        maps = []
        for n in range(self.N):
            q = (x @ self.wq[n] + self.bq[n]).view(B, L, self.H, self.E).transpose(1, 2)  # (B, H, L, E)
            k = (x @ self.wk[n] + self.bk[n]).view(B, L, self.H, self.E).transpose(1, 2)
            v = (x @ self.wv[n]).view(B, L, self.H, self.E).transpose(1, 2)
            if self.rotary:
                q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.E)  # (B, H, L, L)
            a = s.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            maps.append(a)
            o = (a @ v).transpose(1, 2).reshape(B, L, self.D)  # (B, L, H E)
            x = x + o @ self.wo[n]
        return x @ self.unembed, torch.stack(maps)


def hand_built_circuit(vocab: int, T: int, strength: float = 30.0) -> AttentionOnly:
    """A 2-layer, 1-head-per-layer :class:`AttentionOnly` with set weights that *is* an induction circuit.

    The residual stream has three blocks: the token one-hot (V), the position one-hot (L = 2T) and a
    "previous token" one-hot (V), so D = 2V + 2T. Layer 0 (previous-token head): position ``p`` queries
    position ``p - 1`` (score ``strength`` on it, 0 elsewhere) and writes that key's token into the
    previous-token block. Layer 1 (induction head): a query's token matches a key's previous token (score
    ``strength``) and copies the key's token into the token block, which the unembedding reads.
    """
    L = 2 * T
    D = 2 * vocab + L
    m = AttentionOnly(vocab, L, D, n_layer=2, n_head=1, positions="learned")
    tok, pos, prev = slice(0, vocab), slice(vocab, vocab + L), slice(vocab + L, D)
    scale = math.sqrt(D) * strength  # the forward pass divides the scores by √E = √D
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.embed[:, tok] = torch.eye(vocab)
        m.pos[:, pos] = torch.eye(L)
        # layer 0: q = position p, k = position p + 1 (so key j matches query j + 1)
        m.wq[0][pos, pos] = torch.eye(L) * scale
        m.wk[0][pos, pos] = torch.diag(torch.ones(L - 1), 1)  # key position j -> column j + 1
        m.wv[0][tok, prev] = torch.eye(vocab)
        m.wo[0][prev, prev] = torch.eye(vocab)
        # layer 1: q = the query's token, k = the key's previous token; v copies the key's token
        m.wq[1][tok, tok] = torch.eye(vocab) * scale
        m.wk[1][prev, tok] = torch.eye(vocab)
        m.wv[1][tok, tok] = torch.eye(vocab)
        m.wo[1][tok, tok] = torch.eye(vocab) * strength
        m.unembed[tok, :] = torch.eye(vocab)
    return m


# ---------------------------------------------------------------------------- the measures


def induction_score(weights: Tensor, T: int) -> Tensor:
    """(..., L, L) maps of sequences of two copies of T tokens -> (...) the mean weight from queries
    ``i = T .. 2T-1`` on key ``i - T + 1`` (:mod:`attncore.decoder.induction`'s score)."""
    diag = torch.diagonal(weights, offset=-(T - 1), dim1=-2, dim2=-1)  # (..., L - T + 1): query i = T-1+m
    return diag[..., 1:].mean(dim=-1)  # queries T .. 2T-1


def previous_token_score(weights: Tensor) -> Tensor:
    """(..., L, L) maps -> (...) the mean weight from queries ``i = 1 .. L-1`` on key ``i - 1``."""
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


def uniform_scores(T: int) -> tuple[float, float]:
    """(induction score, previous-token score) of a head that spreads its weight evenly over the keys each
    query sees (query ``i`` sees ``i + 1``): the means of ``1 / (i + 1)`` over the two scores' queries."""
    ind = sum(1.0 / (i + 1) for i in range(T, 2 * T)) / T
    prev = sum(1.0 / (i + 1) for i in range(1, 2 * T)) / (2 * T - 1)
    return ind, prev


def copy_losses(logits: Tensor, ids: Tensor) -> tuple[float, float]:
    """(B, 2T, V) logits of (B, 2T) repeated ids -> (mean loss on the first copy's tokens 1..T-1, on the
    second's T+1..2T-1), nats."""
    T = ids.shape[1] // 2
    nll = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:],
                                      reduction="none")  # (B, 2T-1): position i predicts token i + 1
    return float(nll[:, : T - 1].double().mean()), float(nll[:, T:].double().mean())


@dataclass(frozen=True)
class Phase:
    """Where the second-copy loss fell, by :func:`phase_change`'s rule.

    Attributes:
        step: the middle of the steepest interval between two evaluation points (the phase change).
        rate: that interval's fall, nats per 1,000 steps.
        begins, ends: the first evaluation steps at which the loss had made 10% and 90% of its fall
            (None: it never did); the maps "before" and "after" are taken at the point before ``begins``
            and at ``ends``.
        before_index, after_index: those two points' indices in the run's evaluation steps.
        fall: the whole fall, first evaluation point minus the lowest (nats).
    """

    step: float
    rate: float
    begins: int | None
    ends: int | None
    before_index: int
    after_index: int
    fall: float


def phase_change(steps: list[int], loss_second: list[float]) -> Phase:
    """The phase change of a run from its evaluation ``steps`` and its second-copy loss there."""
    if len(steps) < 2 or len(steps) != len(loss_second):
        raise AttnInputError("a phase change needs at least two evaluation points.")
    rates = [(loss_second[i] - loss_second[i + 1]) / (steps[i + 1] - steps[i]) for i in range(len(steps) - 1)]
    k = max(range(len(rates)), key=lambda i: rates[i])
    fall = loss_second[0] - min(loss_second)
    marks: list[int | None] = []
    for f in PHASE_FRACTIONS:
        level = loss_second[0] - f * fall
        marks.append(next((i for i, v in enumerate(loss_second) if v <= level), None) if fall > 0 else None)
    b, e = marks
    before = max(0, (b if b is not None else k) - 1)
    after = e if e is not None else len(steps) - 1
    return Phase(step=(steps[k] + steps[k + 1]) / 2, rate=1000.0 * rates[k],
                 begins=None if b is None else steps[b], ends=None if e is None else steps[e],
                 before_index=before, after_index=after, fall=fall)
