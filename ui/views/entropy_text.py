"""Entropy vs length page: its words. The explanations, the headline metrics, the captions and the
validity table's formats, each sentence built from the numbers it quotes; the page draws them.

Plain functions of attncore results (DataFrames) and settings returning strings; no streamlit calls.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attncore.sweeps import EngineChoice
from ui.views.entropy import ASYMPTOTE_RTOL, Series, engine_sentence, n_label

__all__ = ["FIGURE1_INTRO", "FIGURE1_LATEX", "METHOD_LATEX", "VALIDITY_FORMATS", "figure1_caption",
           "formulas_text", "method_text", "metric_cells", "metrics_caption", "metrics_heading",
           "sweep_caption", "validity_caption"]


def formulas_text() -> str:
    """What the formulas assume, and the fully scaled fix (the expander below the panels)."""
    return (
        "With logits of a fixed spread σ, every extra key takes a share: the row flattens, its entropy "
        "climbs like log n and its largest weight falls. To stay sharp, a head must produce ever larger "
        "logits as n grows (no n × n matrix is formed; the dashed lines are computed by quadrature). "
        "Here $\\sigma^2$ is the logits' variance (1 for unit Gaussian q, k with 1/√d scaling and τ = 1). "
        "The large-n asymptotes need n well past $e^{\\sigma^2}$, and the dotted lines are drawn only "
        f"where they lie within {ASYMPTOTE_RTOL:.0%} of the exact expectation (from the first n that stays "
        "so); below about "
        "$e^{\\sigma^2/2}$ the row is *frozen*: a handful of keys carry nearly all the weight. The output of "
        "attention over unit-variance values shrinks like $\\sqrt{e^{\\sigma^2}/n}$ (Graphcore's log-normal "
        "rule); multiplying it by $\\sqrt{n/e}$ (\"fully scaled\" attention) restores unit scale at σ = 1. "
        "That fix trained worse, though: in the post that derives it (Graphcore's \"Almost-scaled "
        "dot-product attention\"), a small character-level language model on Shakespeare reached a final "
        "training loss of about 1.4 with fully scaled attention against 1.2 with standard attention, so the "
        "shrinking output seems to help training, for reasons the post calls an open question."
    )


def _engine_tail(engine: str) -> str:
    if engine == "fused":
        return ("Here the sweeps run as fused Triton kernels: every program draws its random "
                "numbers in-kernel (Philox) and keeps the same running sums over its chunk of keys, chunks "
                "are merged in float64, and nothing of size n is ever stored, up to 2³⁰ keys per row; "
                "*vectors* draws each tile of keys once and shares it across up to 128 query rows through "
                "tensor-core products (keys and values rounded to tf32, queries split into two tf32 parts: "
                "float32-accurate logits). Their Gaussians take 40 random bits for the radius and reach "
                "7.54σ, beyond the largest of 2³⁰ keys, so nothing is redrawn. A long sweep draws its short "
                "lengths first, marked \"measuring…\", while the long ones stream.")
    return ("torch's float32 Gaussian never exceeds 5.77σ, which matters for the largest of 16M keys, so "
            "samples above 5σ are redrawn from the exact tail. Curves that differ only in temperature, "
            "scale rule or normaliser read one stream of draws, each with its own factor: a comparison "
            "draws its random numbers once, and the server keeps them for the next sweep (they do not "
            "depend on d either), so moving d or τ only redoes the sums. A long sweep draws its short "
            "lengths first, marked \"measuring…\", while the long ones stream.")


def method_text(engine: str = "torch") -> str:
    """How attncore computes the panels, as the engine that ran on this device (``torch`` or ``fused``)
    does it."""
    return (
        "**Streaming.** Keys arrive in blocks; per query row attncore keeps the running maximum m and "
        "three sums, rescaling them whenever a block raises the maximum (the online softmax of "
        "FlashAttention). Entropy, max weight and $\\sum p^2$ follow from the sums at any length, so a "
        "row of 2²⁴ keys needs a few MB, and one pass to the largest n serves every shorter n.\n\n"
        "**Two methods.** *vectors* draws real Gaussian q, k, v and measures the output spread directly. "
        "*logits* uses that, given q, the scores $q\\cdot k_j/\\sqrt d$ of Gaussian keys are iid "
        "$N(0, |q|^2/d)$: it draws those n numbers per row instead of n·d, and the output spread is "
        "exactly $\\sqrt{\\textstyle\\sum_j p_j^2}$ for unit-variance values. "
        + _engine_tail(engine) + "\n\n"
        "**Rows that need not sum to 1.** For softmax1 and sigmoid, entropy and effective support are "
        "those of the row renormalised to sum 1; max weight, $\\sum p^2$ and the output use the raw "
        "weights, so the output std also shows how much mass the row spends.\n\n"
        "**Theory.** With $|q|^2\\sim\\chi^2_d$ averaged by Gauss nodes, every expectation reduces to "
        "one- and two-dimensional integrals through $1/D=\\int_0^\\infty e^{-tD}dt$ and independence "
        "of the keys; the dashed lines are those integrals, accurate to about 1e-5."
    )


METHOD_LATEX = (r"m' = \max(m, \max_{j\in B} x_j),\quad "
                r"s_0 \leftarrow e^{m-m'}s_0 + \sum_{j\in B} e^{x_j-m'},\quad "
                r"H = \log s_0 - \frac{s_1}{s_0},\quad \max_j p_j = \frac{1}{s_0}")


def metrics_heading(s: Series, df: pd.DataFrame) -> str:
    """The line above the headline metrics: which curve, at which n."""
    return (f"**The numbers below describe the first curve, {s.label}, at its longest n = "
            f"{n_label(int(df.iloc[-1]['n']))}.**")


def metric_cells(df: pd.DataFrame, th: pd.DataFrame, given: pd.DataFrame) -> list[dict[str, Any]]:
    """The four headline metrics of a curve at its longest n (``st.metric`` arguments: label, value,
    delta, help): measured with 2 standard errors, the exact value given its queries and overall."""
    last = df.iloc[-1]
    n = int(last["n"])
    t, g = th.set_index("n").loc[n], given.iloc[0]
    full = last["output_std"] * math.sqrt(n / math.e)
    return [
        {"label": f"Entropy at n = {n_label(n)}",
         "value": f"{last['entropy']:.3f} ± {2 * last['entropy_sem']:.3f}",
         "delta": f"given these queries {g['entropy']:.3f} · exact {t['entropy']:.3f}",
         "help": "Nats: measured mean over the query rows ± 2 standard errors. Given these queries: "
                 "the exact expectation over the keys for the query rows this seed drew, which is "
                 "what the measurement estimates. Exact: the expectation over random queries too. "
                 f"The uniform maximum is log n = {math.log(n):.3f}."},
        {"label": "Max weight", "value": f"{last['max_weight']:.3g} ± {2 * last['max_weight_sem']:.1g}",
         "delta": f"given these queries {g['max_weight']:.3g} · exact {t['max_weight']:.3g}",
         "help": f"Uniform: 1/n = {1 / n:.2g}."},
        {"label": "Effective support exp(H)", "value": f"{last['effective_support']:,.0f} keys",
         "delta": f"exact {t['effective_support']:,.0f} · {last['effective_support'] / n:.1%} of n",
         "help": None},
        {"label": "Output std", "value": f"{last['output_std']:.3g}",
         "delta": f"given these queries {g['output_std']:.3g} · exact {t['output_std']:.3g}",
         "help": f"Fully scaled (× √(n/e)): {full:.3f}."},
    ]


def metrics_caption(s: Series, df: pd.DataFrame, th: pd.DataFrame, given: pd.DataFrame) -> str:
    """The caption under the headline metrics: both exact values, and why they can differ."""
    n = int(df.iloc[-1]["n"])
    t, g = th.set_index("n").loc[n], given.iloc[0]
    return (
        f"{s.label} at n = {n_label(n)}. Exact given these {s.spec.queries} queries (the keys averaged over, "
        f"what the measurement estimates): entropy {g['entropy']:.3f}, max weight {g['max_weight']:.3g}, "
        f"output std {g['output_std']:.3g}. Exact over random queries as well: {t['entropy']:.3f}, "
        f"{t['max_weight']:.3g}, {t['output_std']:.3g}. The two can differ by more than the error bar: "
        "this seed's query norms |q| are one draw, and they set every row's logit spread.")


# The validity table's number formats (column -> printf format).
VALIDITY_FORMATS = {"asymptote holds for n ≫ e^σ²": "%.3g", "frozen below n ≈ e^(σ²/2)": "%.3g",
                    "σ² at largest n": "%.3f", "H measured": "%.4f", "H exact": "%.4f", "H asymptote": "%.4f",
                    "H with 1/n term": "%.4f", f"asymptotes within {ASYMPTOTE_RTOL:.0%} from n": "%.3g"}


def validity_caption() -> str:
    """Under the validity table: the 1/n term, and where the expansions are shown."""
    return ("The 1/n term: $E[H] \\approx \\log n - \\sigma^2/2 + (\\sigma^2 e^{\\sigma^2} - "
            "(e^{\\sigma^2}-1)/2)/n$ (second-order delta method). Both expansions are shown only "
            f"where they lie within {ASYMPTOTE_RTOL:.0%} of the exact value; a blank cell means they "
            "are further off at this n (outside their range they can even leave [0, log n], where "
            "every entropy lies). Unscaled logits at d = 64 have σ² = 64: the asymptote would need "
            "n ≫ e⁶⁴ ≈ 6·10²⁷, so such a row stays frozen at every length you can run.")


def sweep_caption(series: list[Series], shown: int, queries: int, method: str, theory_seconds: float,
                  computed: int, engines: list[EngineChoice]) -> str:
    """The compute caption's detail: curves, lengths, work, the theory's time, reuse and the engines."""
    work = sum(s.spec.queries * max(s.spec.lengths) for s in series)
    reused = "" if computed == len(series) else \
        f" {len(series) - computed} of {len(series)} curves reused from an earlier run."
    return (f"{len(series)} curves × {shown} lengths, {queries} "
            f"query rows, method {method}, up to {work / 1e6:,.0f}M logits per curve "
            f"set; theory in {theory_seconds * 1e3:.0f} ms.{reused} "
            f"{engine_sentence(engines, [s.label for s in series])}")


FIGURE1_INTRO = (
    "The setup of figure 1 in Nakanishi's *Scalable-Softmax Is Superior for Attention* (2025): one "
    "key has logit +3, every other key −2. Softmax lets the crowd win: the spike keeps 0.600 of the "
    "weight at n = 100 but only 0.129 at n = 1000. SSMax multiplies the logits by s·log n, so the "
    "gap the spike needs grows with n as fast as the crowd does."
)
FIGURE1_LATEX = (r"p_{\text{peak}} = \frac{1}{1 + (n-1)\,e^{-\Delta}}\ \ \text{(softmax)},\qquad "
                 r"p_{\text{peak}} = \frac{1}{1 + (n-1)\,n^{-s\Delta}}\ \ \text{(SSMax)},\qquad "
                 r"\Delta = \text{peak} - \text{rest}")


def figure1_caption(df: pd.DataFrame, peak: float, rest: float) -> str:
    """Under figure 1: the measured peak weights at n = 100 and 1000, and where softmax drops below ½."""
    gap = peak - rest
    at = df.set_index("n")
    sm, ss = at["softmax"], at["ssmax"]
    cross = f" Softmax drops below ½ at n = 1 + e^Δ ≈ {1 + math.exp(gap):,.0f}." if 0 < gap < 40 else ""
    return (f"Measured with attncore's normalisers on materialised rows: softmax {sm[100]:.3f} at n = 100 "
            f"and {sm[1000]:.3f} at n = 1000; SSMax {ss[100]:.3f} and {ss[1000]:.3f}.{cross} "
            "Right: closed forms only.")
