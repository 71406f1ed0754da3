"""The Bigram-Backcopy task: a head that must sometimes do nothing, and what it learns.

Guo et al. 2024, "Active-Dormant Attention Heads: Mechanistically Demystifying Extreme-Token
Phenomena in LLMs" (their code: GuoTianYu2000/Active-Dormant-Attention, ``BBM/``). Every
sequence starts with a BOS token; the next token is drawn from the corpus's character
frequencies with the triggers removed; after that each token follows the corpus's bigram
transition probabilities, except that after a *trigger* (the 3 most frequent characters of the
corpus) the next token is a copy of the token just before the trigger. An attention head is
needed at trigger positions (to fetch the previous token) and useless everywhere else; a
softmax head must still spend a weight of 1 there, and learns to park it on BOS (a sink).

:class:`BigramBackcopy` builds the task from a text and samples sequences from a
``torch.Generator`` (on the fly, seeded); :func:`attncore.training.bbm_train.train_bbm` trains the
character transformer on it and probes it every ``eval_every`` steps on fixed held-out sequences
(:func:`probe`);
:func:`bos_ablation` and :func:`bbm_streaming` test whether the sink matters.

Shape legend: ``B`` sequences, ``T`` positions (the context), ``V`` vocabulary (the corpus's
characters and BOS), ``N`` layers, ``H`` heads, ``E`` head dim, ``D`` width.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attncore.errors import AttnInputError
from attncore.sinks import sink_scores
from attncore.training.config import TrainConfig
from attncore.training.measure import stream_nll
from attncore.training.model import CharTransformer, apply_rotary, rotary_angles
from attncore.training.train import build_vocab

__all__ = [
    "BOS_CANDIDATES",
    "COPY",
    "BIGRAM",
    "EVAL_SEED",
    "EVAL_SEQS",
    "MIN_CONTEXT",
    "MAX_VIEW_TOKENS",
    "MIN_DISTINCT",
    "N_TRIGGERS",
    "SINK_THRESHOLD",
    "Cancel",
    "Progress",
    "BigramBackcopy",
    "SequenceView",
    "bbm_label",
    "bbm_streaming",
    "bos_ablation",
    "capture",
    "eval_sequences",
    "first_crossing",
    "probe",
    "sequence_view",
]

# BOS is the first of these not in the corpus: ␂ (start of text), ▷, ␀, STX
BOS_CANDIDATES = ("\u2402", "\u25b7", "\u2400", "\x02")
N_TRIGGERS = 3
MIN_DISTINCT = N_TRIGGERS + 1  # at least one character that is not a trigger
MIN_CONTEXT = 8
EVAL_SEQS = 32  # held-out sequences probed at every evaluation point
EVAL_SEED = 20_241_001  # the held-out sequences: the same for every run, seed and variant (paired)
SINK_THRESHOLD = 0.3  # Gu et al.'s ε, and the BOS weight whose first crossing is reported
BOS_ROLE, BIGRAM, COPY = 0, 1, 2  # what predicting the next token from position i needs

Progress = Callable[..., None]
Cancel = Callable[[], bool]


def _entropy(p: Tensor) -> Tensor:
    """Entropy in nats of each row of ``p`` (..., V)."""
    return -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(dim=-1)


@dataclass(frozen=True)
class BigramBackcopy:
    """The task built from a corpus (see the module docstring).

    Attributes:
        vocab: the corpus's distinct characters (sorted), then the BOS character.
        bos: BOS's id (the last one).
        triggers: ids of the :data:`N_TRIGGERS` most frequent characters (ties: the lower id).
        cond: (V, V) float64 bigram transition probabilities, row = current token; a character
            never followed by another in the corpus (its last one) follows the unigram
            frequencies; nothing leads to BOS; BOS's row is :attr:`first`.
        first: (V,) the first token after BOS: the unigram frequencies without the triggers.
        corpus_chars: characters of the corpus.
        unigrams, bigrams: (C,) and (C, C) int64 counts in the corpus of its C = V - 1 characters and of
            each character followed by each other (what :meth:`save` writes).
    """

    vocab: str
    bos: int
    triggers: tuple[int, ...]
    cond: Tensor
    first: Tensor
    corpus_chars: int
    unigrams: Tensor = field(repr=False)
    bigrams: Tensor = field(repr=False)

    @classmethod
    def from_text(cls, text: str) -> BigramBackcopy:
        """The task of ``text``; :class:`AttnInputError` for fewer than 4 distinct characters."""
        chars = build_vocab(text)  # checks: text, not binary, at most 1000 distinct
        if len(chars) < MIN_DISTINCT:
            raise AttnInputError(
                f"the corpus has {len(chars)} distinct character(s); the Bigram-Backcopy task needs at least "
                f"{MIN_DISTINCT}: {N_TRIGGERS} triggers (its most frequent characters) and at least one "
                "other character to copy.")
        index = {c: i for i, c in enumerate(chars)}
        ids = torch.tensor([index[c] for c in text], dtype=torch.int64)
        n = len(chars)
        uni = torch.bincount(ids, minlength=n)
        pairs = torch.bincount(ids[:-1] * n + ids[1:], minlength=n * n).view(n, n)
        return cls.from_counts(chars, uni, pairs, len(text))

    @classmethod
    def from_counts(cls, chars: str, unigrams: Tensor, bigrams: Tensor, corpus_chars: int) -> BigramBackcopy:
        """The task from a corpus's distinct characters ``chars`` (C,), their counts ``unigrams`` (C,) and
        the counts ``bigrams`` (C, C) of each character followed by each other."""
        C = len(chars)
        if C < MIN_DISTINCT or tuple(unigrams.shape) != (C,) or tuple(bigrams.shape) != (C, C):
            raise AttnInputError(f"a Bigram-Backcopy task needs at least {MIN_DISTINCT} characters with a "
                                 "count each and a square table of bigram counts.")
        bos_char = next((c for c in BOS_CANDIDATES if c not in chars), None)
        if bos_char is None:
            raise AttnInputError("the corpus uses every character this app can take as the BOS token "
                                 f"({', '.join(repr(c) for c in BOS_CANDIDATES)}).")
        V, bos = C + 1, C
        uni = torch.zeros(V, dtype=torch.float64)
        uni[:C] = unigrams.to(torch.float64)
        pairs = torch.zeros(V, V, dtype=torch.float64)
        pairs[:C, :C] = bigrams.to(torch.float64)
        # the most frequent first; ties broken by the lower id (a stable sort of -count)
        order = torch.sort(-uni[:C], stable=True).indices
        triggers = tuple(sorted(int(i) for i in order[:N_TRIGGERS]))
        marginal = uni / uni.sum()
        rows = pairs.sum(dim=-1, keepdim=True)  # (V, 1)
        cond = torch.where(rows > 0, pairs / rows.clamp_min(1.0), marginal.expand(V, V))
        first = marginal.clone()
        first[list(triggers)] = 0.0
        first = first / first.sum()
        cond[bos] = first
        return cls(vocab=chars + bos_char, bos=bos, triggers=triggers, cond=cond, first=first,
                   corpus_chars=int(corpus_chars), unigrams=unigrams.to(torch.int64),
                   bigrams=bigrams.to(torch.int64))

    def save(self, path: str | Path) -> Path:
        """Write the task as JSON (its characters and their unigram and bigram counts): what
        :meth:`load` needs to rebuild it exactly, without the corpus."""
        uni, pairs = self.unigrams, self.bigrams
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"format": 1, "chars": self.vocab[: self.bos],
                                 "corpus_chars": self.corpus_chars,
                                 "unigrams": uni.tolist(), "bigrams": pairs.tolist(), **self.to_dict()},
                                ensure_ascii=False), encoding="utf-8")
        return p

    @classmethod
    def load(cls, path: str | Path) -> BigramBackcopy:
        """The task saved by :meth:`save`; :class:`AttnInputError` when the file is missing or malformed."""
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
            return cls.from_counts(str(d["chars"]), torch.tensor(d["unigrams"], dtype=torch.int64),
                                   torch.tensor(d["bigrams"], dtype=torch.int64), int(d["corpus_chars"]))
        except OSError as exc:  # its text would hold the full path
            raise AttnInputError(f"{p.name} cannot be read: {exc.strerror or type(exc).__name__}.") from exc
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise AttnInputError(f"{p.name} is not a saved Bigram-Backcopy task: {exc}") from exc

    @property
    def size(self) -> int:
        """V, BOS included."""
        return len(self.vocab)

    def is_trigger(self, ids: Tensor) -> Tensor:
        """Boolean mask of the trigger tokens in ``ids`` (any shape)."""
        trig = torch.tensor(self.triggers, dtype=ids.dtype, device=ids.device)
        return torch.isin(ids, trig)

    def sample(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        """``n`` sequences (n, length) int64 on the CPU: BOS, a first token, then bigram or copy steps.

        Every draw comes from ``generator`` (CPU): one uniform per position, turned into a token
        by the inverse cumulative distribution of its row.
        """
        if not 1 <= int(n) <= 1 << 16 or not 2 <= int(length) <= 1 << 16:
            raise AttnInputError(f"sample 1 to 65536 sequences of 2 to 65536 tokens; got {n} of {length}.")
        cdf = torch.cumsum(self.cond, dim=-1)  # (V, V)
        cdf[:, -1] = 1.0 + 1e-9  # rounding must never step past the last token
        u = torch.rand(int(n), int(length), generator=generator, dtype=torch.float64)  # (n, length)
        seq = torch.empty(int(n), int(length), dtype=torch.int64)
        seq[:, 0] = self.bos
        trig = self.is_trigger(torch.arange(self.size))  # (V,)
        for t in range(1, int(length)):
            x = seq[:, t - 1]
            nxt = torch.searchsorted(cdf[x], u[:, t : t + 1].contiguous()).squeeze(1).clamp_max(self.size - 1)
            if t >= 2:
                nxt = torch.where(trig[x], seq[:, t - 2], nxt)
            seq[:, t] = nxt
        return seq

    def roles(self, ids: Tensor) -> Tensor:
        """What predicting the token after each position needs, (..., T) int64: :data:`COPY` after a
        trigger (positions >= 1), BOS_ROLE at position 0, :data:`BIGRAM` elsewhere."""
        r = torch.where(self.is_trigger(ids), COPY, BIGRAM)
        r[..., 0] = BOS_ROLE
        return r

    def optimal_loss(self, ids: Tensor) -> Tensor:
        """The Bayes-optimal loss (nats) of predicting ``ids[..., i+1]`` from position i, (..., T-1):
        0 after a trigger (the copy is certain), the entropy of the bigram row elsewhere, the entropy
        of :attr:`first` after BOS."""
        h = _entropy(self.cond)  # (V,)
        x = ids[..., :-1]
        return torch.where(self.is_trigger(x), torch.zeros((), dtype=h.dtype), h[x.cpu()].to(h.dtype))

    def chars(self, ids: Tensor | list[int]) -> str:
        """The characters of ``ids`` (BOS as its character)."""
        seq = ids.tolist() if isinstance(ids, Tensor) else ids
        return "".join(self.vocab[i] for i in seq)

    def encode(self, text: str) -> tuple[Tensor, int]:
        """``text`` as a sequence (L,) with BOS prepended; characters outside the corpus's vocabulary
        (and BOS itself) are dropped. Returns the ids and how many characters were dropped."""
        index = {c: i for i, c in enumerate(self.vocab[: self.bos])}
        kept = [index[c] for c in text if c in index]
        return torch.tensor([self.bos, *kept], dtype=torch.int64), len(text) - len(kept)

    def to_dict(self) -> dict[str, Any]:
        """The task's facts for a result file: BOS, the triggers, sizes, the bigram entropy."""
        stationary = self.first  # weights of the first token; the rows' entropy is reported per row too
        return {
            "bos": self.vocab[self.bos], "bos_id": self.bos,
            "triggers": [self.vocab[i] for i in self.triggers], "trigger_ids": list(self.triggers),
            "vocab_size": self.size, "corpus_chars": self.corpus_chars,
            "first_token_entropy": float(_entropy(stationary)),
        }


def eval_sequences(task: BigramBackcopy, context: int, n: int = EVAL_SEQS, seed: int = EVAL_SEED) -> Tensor:
    """The fixed held-out sequences (n, context + 1): the same for every run at this context."""
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return task.sample(n, context + 1, g)


def bbm_label(config: TrainConfig | dict[str, Any], with_seed: bool = True) -> str:
    """'softmax · seed 0', 'sink logit b₀=2 · seed 1', ... for a config."""
    c = config.to_dict() if isinstance(config, TrainConfig) else config
    v = c["variant"]
    name = {"standard": "softmax", "relu": "ReLU"}.get(v, v)
    if v == "sink_logit":
        name = f"sink logit b₀={float(c.get('sink_init', 0.0)):g}"
    return f"{name} · seed {c['seed']}" if with_seed else name


# ---------------------------------------------------------------------------- looking inside


@dataclass(frozen=True)
class Capture:
    """One forward pass with everything the probes read.

    Attributes:
        logits: (B, T, V).
        weights: one (B, H, T, S) tensor per layer (the variant's own normaliser).
        values: one (B, H, S, E) tensor per layer.
        gates: one (B, T, D) tensor per layer for the gated variant (σ(x W_g)), else empty.
    """

    logits: Tensor
    weights: list[Tensor]
    values: list[Tensor]
    gates: list[Tensor]


@torch.no_grad()
def capture(model: CharTransformer, idx: Tensor, allowed: Tensor | None = None) -> Capture:
    """Run ``model`` on ``idx`` (B, T) block by block through attncore's materialised attention,
    keeping each layer's weights, values and gates. ``allowed`` (T, T) as in the model's forward."""
    B, T = idx.shape
    cos, sin = rotary_angles(torch.arange(T, device=idx.device), model.config.d_head)  # (T, E/2)
    x = model.tok(idx)  # (B, T, D)
    weights, values, gates = [], [], []
    for blk in model.blocks:
        h = blk.ln1(x)
        q, k, v = blk.attn.split_heads(h)  # (B, H, T, E)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out, w = blk.attn.core(q, k, v, h, allowed, True)
        weights.append(w)
        values.append(v)
        g = blk.attn.gate_values(h)  # (B, T, D) for the gated variants
        if g is not None:
            gates.append(g)
        x = x + blk.attn.proj(out)
        x = x + blk.mlp(blk.ln2(x))
    logits = model.ln_f(x) @ model.tok.weight.t()  # (B, T, V)
    return Capture(logits=logits, weights=weights, values=values, gates=gates)


def _by_role(x: Tensor, roles: Tensor, role: int) -> list[float] | None:
    """Mean of ``x`` (B, H, T) over the positions with ``role`` (roles (B, T)): (H,) or None if none."""
    m = (roles == role).to(x.dtype)[:, None, :]  # (B, 1, T)
    n = float(m.sum())
    if n == 0:
        return None
    return [float(v) for v in (x * m).sum(dim=(0, 2)) / n]


def _losses(logits: Tensor, ids: Tensor, roles: Tensor) -> Tensor:
    """Per-position loss (B, T) of predicting ids[:, 1:] from logits (B, T, V)."""
    nll = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    return nll.view(roles.shape)


def _mean_where(x: Tensor, mask: Tensor) -> float | None:
    n = int(mask.sum())
    return float(x[mask].double().mean()) if n else None


@torch.no_grad()
def probe(model: CharTransformer, task: BigramBackcopy, ids: Tensor) -> dict[str, Any]:
    """Every measurement of one evaluation point, on held-out sequences ``ids`` (B, T + 1).

    Per layer and head (lists N x H): ``bos_trigger`` / ``bos_other``, the mean weight on BOS
    from trigger positions and from the other positions (>= 1); ``nowhere_trigger`` /
    ``nowhere_other``, the mean of 1 - Σ_j w_ij (the weight sent nowhere: softmax1's and the
    sink logit's extra slot, what sigmoid and ReLU leave unspent; 0 for softmax and gated);
    ``gate_trigger`` / ``gate_other`` for the gated variant (mean gate of the head's channels,
    else None); ``alpha0``, Gu et al.'s first-token score (the mean weight on key 0 from every
    query, :func:`attncore.sinks.sink_scores`); ``value_ratio``, ‖v_BOS‖ over the mean ‖v_j‖ of
    the other positions. Per layer: ``sink_share``, the share of heads with alpha0 > 0.3.
    Losses (nats): ``loss`` (all positions), ``copy_loss`` (trigger positions: optimum 0),
    ``bigram_loss`` (the others, BOS excluded) against ``bigram_entropy`` (their Bayes-optimal
    loss), ``bigram_excess`` (the mean KL divergence from the true bigram row to the model's
    prediction there: ``bigram_loss - bigram_entropy`` without the noise of the sampled next
    tokens, >= 0), ``copy_acc`` (share of copies predicted as the most likely token).
    """
    model_dev = model.device
    x = ids[:, :-1].to(model_dev)
    roles = task.roles(ids[:, :-1]).to(model_dev)  # (B, T)
    cap = capture(model, x)
    nll = _losses(cap.logits, ids.to(model_dev), roles)
    opt = task.optimal_loss(ids).to(model_dev)
    pred = cap.logits.argmax(dim=-1) == ids[:, 1:].to(model_dev)
    logp = torch.log_softmax(cap.logits.double(), dim=-1)  # (B, T, V)
    true = task.cond.to(model_dev)[x]  # (B, T, V): the true next-token distribution at bigram positions
    excess = (true * (torch.log(true.clamp_min(1e-300)) - logp)).sum(-1)  # KL(true || model), (B, T)
    T = x.shape[1]
    allowed = torch.ones(T, T, dtype=torch.bool, device=model_dev).tril()
    out: dict[str, Any] = {
        "loss": float(nll.double().mean()),
        "copy_loss": _mean_where(nll, roles == COPY),
        "bigram_loss": _mean_where(nll, roles == BIGRAM),
        "bigram_entropy": _mean_where(opt, roles == BIGRAM),
        "bigram_excess": _mean_where(excess, roles == BIGRAM),
        "copy_acc": _mean_where(pred.double(), roles == COPY),
        "n_trigger": int((roles == COPY).sum()), "n_other": int((roles == BIGRAM).sum()),
    }
    keys = ("bos_trigger", "bos_other", "nowhere_trigger", "nowhere_other", "gate_trigger", "gate_other",
            "alpha0", "value_ratio", "sink_share")
    layers: dict[str, list[Any]] = {k: [] for k in keys}
    for li, w in enumerate(cap.weights):
        bos = w[..., 0].double()  # (B, H, T)
        nowhere = 1.0 - w.double().sum(dim=-1)  # (B, H, T)
        layers["bos_trigger"].append(_by_role(bos, roles, COPY))
        layers["bos_other"].append(_by_role(bos, roles, BIGRAM))
        layers["nowhere_trigger"].append(_by_role(nowhere, roles, COPY))
        layers["nowhere_other"].append(_by_role(nowhere, roles, BIGRAM))
        if cap.gates:
            H = w.shape[1]
            g = cap.gates[li].double().view(*x.shape, H, -1).mean(dim=-1).transpose(1, 2)  # (B, H, T)
            layers["gate_trigger"].append(_by_role(g, roles, COPY))
            layers["gate_other"].append(_by_role(g, roles, BIGRAM))
        else:
            layers["gate_trigger"].append(None)
            layers["gate_other"].append(None)
        a0 = sink_scores(w.double(), allowed)[..., 0].mean(dim=0)  # (H,)
        layers["alpha0"].append([float(a) for a in a0])
        layers["sink_share"].append(float((a0 > SINK_THRESHOLD).double().mean()))
        vn = cap.values[li].double().norm(dim=-1)  # (B, H, T)
        ratio = vn[:, :, 0].mean(dim=0) / vn[:, :, 1:].mean(dim=(0, 2)).clamp_min(1e-30)  # (H,)
        layers["value_ratio"].append([float(r) for r in ratio])
    out.update(layers)
    return out


def first_crossing(steps: list[int], values: list[float | None],
                   threshold: float = SINK_THRESHOLD) -> int | None:
    """The first step whose value exceeds ``threshold`` (None if none does)."""
    for s, v in zip(steps, values, strict=True):
        if v is not None and v > threshold:
            return s
    return None


MAX_VIEW_TOKENS = 256  # a sequence the app's views show: (N, H, L, L) weights are kept


@dataclass(frozen=True)
class SequenceView:
    """One model on one sequence, for a page.

    Attributes:
        chars: the sequence's characters (BOS first).
        roles: (L,) what predicting the next token from each position needs (:meth:`BigramBackcopy.roles`).
        weights: (N, H, L, L) float32 CPU attention weights (the variant's own normaliser).
        loss: (L - 1,) float64 loss of predicting each next token.
        gates: (N, H, L) mean gate per head and position (gated variant), else None.
    """

    chars: str
    roles: Tensor
    weights: Tensor
    loss: Tensor
    gates: Tensor | None

    @property
    def bos(self) -> Tensor:
        """(N, H, L) weight on BOS from every position."""
        return self.weights[..., 0]

    @property
    def nowhere(self) -> Tensor:
        """(N, H, L) weight sent nowhere (1 - the row's sum)."""
        return 1.0 - self.weights.double().sum(dim=-1)


@torch.no_grad()
def sequence_view(model: CharTransformer, task: BigramBackcopy, ids: Tensor) -> SequenceView:
    """``model`` on one sequence ``ids`` (L,) starting with BOS, 2 <= L <= :data:`MAX_VIEW_TOKENS`."""
    L = int(ids.shape[0])
    if not 2 <= L <= MAX_VIEW_TOKENS or int(ids[0]) != task.bos:
        raise AttnInputError(f"show a sequence of 2 to {MAX_VIEW_TOKENS} tokens that starts with BOS; "
                             f"got {L}.")
    if model.vocab != task.vocab:
        raise AttnInputError("this model was not trained on this task (its vocabulary differs).")
    x = ids[None].to(model.device)  # (1, L)
    cap = capture(model, x)
    nll = F.cross_entropy(cap.logits[0, :-1].float(), x[0, 1:], reduction="none").double().cpu()
    weights = torch.stack([w[0] for w in cap.weights]).float().cpu()  # (N, H, L, L)
    gates = None
    if cap.gates:
        H = weights.shape[1]
        per_head = [g[0].view(L, H, -1).mean(dim=-1).t() for g in cap.gates]  # each (H, L)
        gates = torch.stack(per_head).float().cpu()  # (N, H, L)
    return SequenceView(chars=task.chars(ids), roles=task.roles(ids[None])[0], weights=weights, loss=nll,
                        gates=gates)


# ---------------------------------------------------------------------------- does the sink matter?


def no_bos_mask(T: int, device: torch.device | str = "cpu") -> Tensor:
    """(T, T) causal mask in which no query but BOS's own may see key 0 (BOS)."""
    allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    allowed[1:, 0] = False
    return allowed


@torch.no_grad()
def bos_ablation(model: CharTransformer, task: BigramBackcopy, ids: Tensor) -> dict[str, float | None]:
    """Loss with and without attention to BOS, at trigger and other positions, on ``ids`` (B, T + 1).

    The ablation hides key 0 from every query i >= 1 in every layer, before the variant's
    normaliser: softmax renormalises over the rest (w_j / (1 - w_0)); softmax1, the sink logit,
    sigmoid and ReLU lose BOS's term (their other weights are computed as before).
    """
    dev = model.device
    x = ids[:, :-1].to(dev)
    roles = task.roles(ids[:, :-1]).to(dev)
    out: dict[str, float | None] = {}
    for name, allowed in (("", None), ("_ablated", no_bos_mask(x.shape[1], dev))):
        logits, _ = model(x, allowed=allowed)
        nll = _losses(logits, ids.to(dev), roles)
        out["copy_loss" + name] = _mean_where(nll, roles == COPY)
        out["bigram_loss" + name] = _mean_where(nll, roles == BIGRAM)
    for k in ("copy", "bigram"):
        a, b = out[f"{k}_loss_ablated"], out[f"{k}_loss"]
        out[f"{k}_delta"] = None if a is None or b is None else a - b
    return out


@torch.no_grad()
def bbm_streaming(model: CharTransformer, task: BigramBackcopy, ids: Tensor, window: int) -> dict[str, Any]:
    """StreamingLLM's test (Xiao et al. 2023) on sequences ``ids`` (B, L) longer than the context.

    Each sequence is decoded token by token with a cache of the last ``window`` tokens
    (``window``), the same plus BOS (``window_bos``) and every token (``full``), keys placed at
    their slots in the cache (:func:`attncore.training.measure.stream_nll`). Returns, per policy,
    the mean loss of the predictions of tokens at positions >= the context (``<policy>_<role>``
    with role ``copy`` or ``bigram``, and ``<policy>`` over both).
    """
    ctx = model.config.context
    B, L = ids.shape
    if not ctx < L <= 16 * ctx:
        raise AttnInputError(f"the streaming test needs sequences longer than the context ({ctx}) and at "
                             f"most {16 * ctx} tokens; got {L}.")
    if not 1 <= int(window) < ctx:
        raise AttnInputError(f"the window must lie in 1..{ctx - 1} (below the context); got {window}.")
    roles = task.roles(ids)[:, ctx - 1 : L - 1]  # predictions of tokens ctx .. L-1
    out: dict[str, Any] = {"window": int(window), "length": int(L), "sequences": int(B), "context": ctx}
    policies = (("full", "full", 0), ("window", "window", 0), ("window_sinks", "window_bos", 1))
    for policy, name, sinks in policies:
        nll = stream_nll(model, ids, policy, int(window), sinks)[:, ctx - 1 :]  # (B, L - ctx)
        out[name] = float(nll.mean())
        out[f"{name}_copy"] = _mean_where(nll, roles == COPY)
        out[f"{name}_bigram"] = _mean_where(nll, roles == BIGRAM)
    return out
