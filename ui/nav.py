"""The page registry: one entry per page, used by the sidebar navigation and the home cards."""

from __future__ import annotations

from dataclasses import dataclass

from attncore.models.bundled import BUNDLED_MODELS

__all__ = ["PAGES", "REAL_TEXT_LINKS", "DeepLink", "PageEntry"]


@dataclass(frozen=True)
class PageEntry:
    path: str  # script path relative to the app root
    label: str
    icon: str
    summary: str


PAGES: tuple[PageEntry, ...] = (
    PageEntry("pages/0_Tour.py", "Tour", ":material/tour:",
              "Start here: a lecture in fourteen steps, each a live view from the pages below with one "
              "sentence of lesson made from its numbers, Previous / Next, and a link that opens it in full."),
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
              "softmax1, a learned sink logit, sigmoid and gated attention on the same logits, a sink "
              "learned in training, and the sinks of real transformers, offline: all-MiniLM-L6-v2 on your "
              "own text and the SmolLM2-135M decoder (sink heads, value drain, massive activations, "
              "StreamingLLM's window)."),
    PageEntry("pages/5_Kernels.py", "Kernels", ":material/bolt:",
              "What F.scaled_dot_product_attention really runs: which backends (flash, memory-efficient, "
              "cuDNN, math) accept a call and torch's reasons when they refuse, the default choice, time "
              "and peak memory against T beside the materialised versions, and what is said of "
              "FlashAttention checked."),
    PageEntry("pages/6_Training_lab.py", "Training lab", ":material/model_training:",
              "Does the scaling choice matter once a model learns? A small character transformer trained "
              "with standard, unscaled, fully scaled, softmax1, sink-logit and gated attention: the shipped "
              "experiments behind three published claims (fully scaled attention, the √d ablation, softmax "
              "off by one) with verdicts, then live runs with a queue, progress and Stop, and kept runs to "
              "compare."),
    PageEntry("pages/7_Evidence.py", "Evidence", ":material/fact_check:",
              "Every checkable claim of the five source texts in one table: the quote, what tests it, the "
              "measurement (live on this machine, exact, or from the shipped training runs), a verdict "
              "computed by "
              "a stated rule, its caveat, and a link to the view that shows it."),
)


@dataclass(frozen=True)
class DeepLink:
    """A home-page link into one view of a page: the URL state the page's own controls write."""

    page: PageEntry
    query: dict[str, str]
    label: str
    help: str


_BY_LABEL = {entry.label: entry for entry in PAGES}
# The real-model views, one click from home (the same state their source switches write).
REAL_TEXT_LINKS: tuple[DeepLink, ...] = (
    DeepLink(_BY_LABEL["Heatmaps"], {"rt_src": "real"}, "Heads on real text",
             "Heatmaps with the real-text source: every layer and head, the chosen head's map, token strips, "
             "q, k, v and the output."),
    DeepLink(_BY_LABEL["Attention sinks"], {"snk_view": "model"}, "Sinks in a real model",
             "Attention sinks, real-model part: where each layer and head of a transformer puts its weight "
             "on your text."),
)


def real_models(last: str) -> str:
    """The bundled real-text models by name, from the registry (:data:`BUNDLED_MODELS`), then ``last``:
    "all-MiniLM-L6-v2, SmolLM2-135M-Instruct and the character model"."""
    names = [b.name for b in BUNDLED_MODELS.values()]
    return ", ".join(names) + f" and {last}"
