"""Attention Lab: home page. The other pages live in pages/ (classic multipage)."""

from __future__ import annotations

import streamlit as st

from attncore.models.bundled import BUNDLED_MODELS
from ui.nav import PAGES, REAL_TEXT_LINKS, real_models
from ui.page import PageContext, run_page

# What is not computed live (the home page says so; tests/test_home_text.py checks it).
SHIPPED = ("the results of the Training lab's experiments (trained once with several seeds by "
           "`python -m attncore.training.experiments`; each names the command, machine and commit that made "
           "it, and the Entropy page quotes one of them), and the weights of the models whose attention the "
           "real-text views compute live: " + real_models("the character model trained by that command")
           + ".")


TOUR = PAGES[0]  # the Tour, first in the navigation


def start_here() -> None:
    """The first thing on the home page: where a new visitor (or a lecture) starts."""
    with st.container(border=True):
        st.page_link(TOUR.path, label="Start here: the Tour", icon=TOUR.icon)
        st.markdown(TOUR.summary + " Presenter mode: `?present=1`.")  # the nav entry's words, said once


def body(ctx: PageContext) -> None:
    st.title("Attention Lab")
    start_here()
    st.markdown(
        "See scaled dot-product attention at work, and where it breaks. The numbers on these pages are "
        f"computed live by **attncore**, a small torch package, on **{ctx.device_label}**, except what "
        "ships with the app: " + SHIPPED + " Every plot has its theory beside it, and every view lives in "
        "the URL, so a copied link reproduces it."
    )
    st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)V")
    st.markdown(
        "Queries $Q\\in\\mathbb{R}^{L\\times d_k}$ score keys $K\\in\\mathbb{R}^{S\\times d_k}$; "
        "the mask $M$ (0 or $-\\infty$) hides keys; each row of weights sums to 1 and mixes the "
        "values $V$. The division by $\\sqrt{d_k}$ keeps the scores' spread independent of the "
        "dimension, since $\\operatorname{Var}(q\\cdot k)=d_k$ for unit-variance entries."
    )
    st.subheader("Pages")
    pages = [e for e in PAGES if e is not TOUR]
    cols = st.columns(min(3, len(pages)))
    for i, entry in enumerate(pages):
        with cols[i % len(cols)].container(border=True):
            st.page_link(entry.path, label=entry.label, icon=entry.icon)
            st.caption(entry.summary)
    st.subheader("Real text")
    bundled = " or the ".join(f"{b.name} {'decoder' if b.causal else 'encoder'}"
                              for b in BUNDLED_MODELS.values())
    st.caption(f"A real transformer (the {bundled}, bundled, offline) or this app's own character model "
               "on the text you type: click a head to open it, click a row to pick a query token, and see "
               "that token's attention over the text, its q, k, v and its output.")
    left, right = st.columns(2)
    for col, link in zip((left, right), REAL_TEXT_LINKS, strict=True):
        with col.container(border=True):
            st.page_link(link.page.path, label=link.label, icon=link.page.icon, query_params=link.query,
                         help=link.help)


run_page(title="Home", icon=":material/visibility:", params=(), body=body)
