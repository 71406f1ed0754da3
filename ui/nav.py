"""The page registry: one entry per page, used by the sidebar navigation and the home cards."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAGES", "PageEntry"]


@dataclass(frozen=True)
class PageEntry:
    path: str  # script path relative to the app root
    label: str
    icon: str
    summary: str


PAGES: tuple[PageEntry, ...] = (
    PageEntry("pages/1_Heatmaps.py", "Heatmaps", ":material/grid_on:",
              "Attention weights and the stages that make them: raw, scaled and masked scores, "
              "weights, for synthetic inputs or real text. Masks (causal, padding, sliding window, "
              "packed documents), scoring functions, normalisers, heads and grouped-query attention, "
              "and a compare mode."),
    PageEntry("pages/2_Entropy_vs_length.py", "Entropy vs length", ":material/trending_up:",
              "How a softmax row flattens as the context grows: entropy, max weight, effective support and "
              "output scale streamed to 2²⁴ keys against exact theory; scale rules (1/√d, SSMax, Llama 4), "
              "temperatures and normalisers; SSMax's figure 1."),
    PageEntry("pages/3_Saturation_and_gradients.py", "Saturation & gradients", ":material/speed:",
              "Why divide by √d: the spread of q·k against d, softmax saturation, the softmax "
              "Jacobian and gradient norms through attention (scaled vs unscaled), and how the "
              "naive softmax overflows in float16, bfloat16 and float32."),
    PageEntry("pages/4_Attention_sinks.py", "Attention sinks", ":material/anchor:",
              "Why a head dumps its weight on a meaningless token: a synthetic sink, softmax against "
              "softmax1, a learned sink logit, sigmoid and gated attention on the same logits, and the "
              "sinks of a real transformer (all-MiniLM-L6-v2, offline) on your own text."),
    PageEntry("pages/5_Kernels.py", "Kernels", ":material/bolt:",
              "What F.scaled_dot_product_attention really runs: which backends (flash, memory-efficient, "
              "cuDNN, math) accept a call and torch's reasons when they refuse, the default choice, time "
              "and peak memory against T beside the materialised versions, and what is said of "
              "FlashAttention checked."),
    PageEntry("pages/6_Training_lab.py", "Training lab", ":material/model_training:",
              "Does the scaling choice matter once a model learns? A small character transformer trained "
              "with standard, unscaled, fully scaled, softmax1, sink-logit and gated attention: the shipped "
              "experiments of sources 003, 001 and 000 with verdicts, then live runs with a queue, "
              "progress and Stop, and kept runs to compare."),
)
