"""References and every figure the app quotes from a paper, each pinned to where it is printed.

:data:`REFERENCES` holds the papers the app's pages and Evidence rows cite, as full references (authors,
year, title, arXiv id and address). :data:`QUOTED` holds every number the app quotes from one of them: the
paper, the table or figure, the model, the data and the setting it was measured at, and the value as
printed. Pages and claims read the numbers from here (:func:`quoted`, :func:`table`) instead of restating
them, and ``tests/test_citations.py`` pins each entry to its table.

A number that could not be found in its source is not here, and so cannot be shown.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "QUOTED",
    "REFERENCES",
    "Quoted",
    "Reference",
    "quoted",
    "table",
    "table_text",
]


@dataclass(frozen=True)
class Reference:
    """A paper, as a full reference.

    Attributes:
        key: short id (``"xiao2023"``).
        authors: every author, in the paper's order.
        year: the year of its first arXiv version.
        title: the paper's title.
        arxiv: its arXiv id.
        venue: where it was published, when it was ("" for a preprint).
    """

    key: str
    authors: tuple[str, ...]
    year: int
    title: str
    arxiv: str
    venue: str = ""

    @property
    def url(self) -> str:
        """The arXiv abstract page."""
        return f"https://arxiv.org/abs/{self.arxiv}"

    @property
    def short(self) -> str:
        """``"Xiao et al. 2023"`` (the first author's family name)."""
        first = self.authors[0].split()[-1]
        return (
            f"{first} et al. {self.year}"
            if len(self.authors) > 2
            else (
                f"{first} and {self.authors[1].split()[-1]} {self.year}"
                if len(self.authors) == 2
                else f"{first} {self.year}"
            )
        )

    @property
    def full(self) -> str:
        """Authors (year). “Title”. Venue. arXiv:id, address."""
        venue = f" {self.venue}." if self.venue else ""
        return (
            f"{', '.join(self.authors)} ({self.year}). “{self.title}”.{venue} arXiv:{self.arxiv}, {self.url}"
        )


REFERENCES: dict[str, Reference] = {
    r.key: r
    for r in (
        Reference(
            "xiao2023",
            ("Guangxuan Xiao", "Yuandong Tian", "Beidi Chen", "Song Han", "Mike Lewis"),
            2023,
            "Efficient Streaming Language Models with Attention Sinks",
            "2309.17453",
            "ICLR 2024",
        ),
        Reference(
            "gu2024",
            (
                "Xiangming Gu",
                "Tianyu Pang",
                "Chao Du",
                "Qian Liu",
                "Fengzhuo Zhang",
                "Cunxiao Du",
                "Ye Wang",
                "Min Lin",
            ),
            2024,
            "When Attention Sink Emerges in Language Models: An Empirical View",
            "2410.10781",
            "ICLR 2025",
        ),
        Reference(
            "sun2024",
            ("Mingjie Sun", "Xinlei Chen", "J. Zico Kolter", "Zhuang Liu"),
            2024,
            "Massive Activations in Large Language Models",
            "2402.17762",
        ),
        Reference(
            "guo2024",
            ("Tianyu Guo", "Druv Pai", "Yu Bai", "Jiantao Jiao", "Michael I. Jordan", "Song Mei"),
            2024,
            "Active-Dormant Attention Heads: Mechanistically Demystifying Extreme-Token Phenomena in LLMs",
            "2410.13835",
        ),
        Reference(
            "olsson2022",
            ("Catherine Olsson", "Nelson Elhage", "Neel Nanda", "and others"),
            2022,
            "In-context Learning and Induction Heads",
            "2209.11895",
            "Transformer Circuits Thread",
        ),
        Reference(
            "clark2019",
            ("Kevin Clark", "Urvashi Khandelwal", "Omer Levy", "Christopher D. Manning"),
            2019,
            "What Does BERT Look At? An Analysis of BERT's Attention",
            "1906.04341",
            "BlackboxNLP 2019",
        ),
        Reference(
            "zuhri2025",
            ("Zayd M. K. Zuhri", "Erland Hilman Fuadi", "Alham Fikri Aji"),
            2025,
            "Softpick: No Attention Sink, No Massive Activations with Rectified Softmax",
            "2504.20966",
        ),
        Reference(
            "dao2022",
            ("Tri Dao", "Daniel Y. Fu", "Stefano Ermon", "Atri Rudra", "Christopher Ré"),
            2022,
            "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
            "2205.14135",
            "NeurIPS 2022",
        ),
    )
}


@dataclass(frozen=True)
class Quoted:
    """One number the app quotes from a paper, with where it is printed and what it measured.

    Attributes:
        key: a stable id (``"xiao2023.t1.4+1020"``).
        paper: key of :data:`REFERENCES`.
        where: the table or figure (``"Table 1"``), or the section for a number in the text.
        model: the model it was measured on.
        data: the data (text, tokens) it was measured on.
        setting: the rest of the setting (cache size, metric).
        label: the entry's row or column label as the paper writes it.
        value: the number.
        printed: the number as printed (its digits: how exactly it is known).
    """

    key: str
    paper: str
    where: str
    model: str
    data: str
    setting: str
    label: str
    value: float
    printed: str

    @property
    def reference(self) -> Reference:
        """The paper."""
        return REFERENCES[self.paper]

    @property
    def context(self) -> str:
        """``"Xiao et al. 2023, Table 1: Llama-2-13B, ..., cache ..."``: where and at what setting."""
        return f"{self.reference.short}, {self.where}: {self.model}, {self.data}, {self.setting}"


_XIAO_T1 = dict(
    paper="xiao2023",
    where="Table 1",
    model="Llama-2-13B",
    data="the first book of PG19's test set (65K tokens)",
    setting="perplexity, a KV cache of 1,024 entries (initial tokens kept + the most recent)",
)
_XIAO_T2 = dict(
    paper="xiao2023",
    where="Table 2",
    model="Llama-2-7B",
    data="400K tokens of PG19's test set, concatenated",
    setting="perplexity, a KV cache of 4,096 entries (initial tokens kept + the most recent)",
)
_GUO_FIG = dict(
    paper="guo2024",
    where="the Bigram-Backcopy training-dynamics figure (its data file in the "
    "authors' repository, not the paper's text)",
    model="1 layer, 1 head, width 256",
    data="Bigram-Backcopy sequences of 256 tokens, batch 512",
    setting="mean attention weight on BOS from non-trigger positions, learning rate 3e-4",
)

QUOTED: tuple[Quoted, ...] = (
    Quoted("xiao2023.t1.0+1024", label="0 + 1024 (window)", value=5158.07, printed="5158.07", **_XIAO_T1),
    Quoted("xiao2023.t1.4+1020", label="4 + 1020", value=5.40, printed="5.40", **_XIAO_T1),
    Quoted(
        "xiao2023.t1.4nl+1020",
        label="4 “\\n” + 1020 (four line breaks as the initial tokens)",
        value=5.60,
        printed="5.60",
        **_XIAO_T1,
    ),
    Quoted("xiao2023.t2.0+4096", label="0 + 4096 (window)", value=3359.95, printed="3359.95", **_XIAO_T2),
    Quoted("xiao2023.t2.1+4095", label="1 + 4095", value=11.88, printed="11.88", **_XIAO_T2),
    Quoted("xiao2023.t2.2+4094", label="2 + 4094", value=10.51, printed="10.51", **_XIAO_T2),
    Quoted("xiao2023.t2.4+4092", label="4 + 4092", value=9.59, printed="9.59", **_XIAO_T2),
    Quoted("xiao2023.t2.8+4088", label="8 + 4088", value=9.54, printed="9.54", **_XIAO_T2),
    Quoted(
        "clark2019.sep",
        paper="clark2019",
        where="Section 3.2 (Figure 2)",
        model="BERT-base",
        data="Wikipedia segments of up to 128 tokens",
        setting="the share of attention on [SEP], layers 6-10 (of 12)",
        label="over half of BERT's attention in layers 6-10 focuses on [SEP]",
        value=0.5,
        printed="half",
    ),
    Quoted(
        "gu2024.eps",
        paper="gu2024",
        where="Section 3 (the sink metric)",
        model="every model they probe",
        data="their probe sequences",
        setting="the threshold ε of the first-token score α_k > ε",
        label="ε",
        value=0.3,
        printed="0.3",
    ),
    Quoted(
        "zuhri2025.softpick0",
        paper="zuhri2025",
        where="Abstract",
        model="340M and 1.8B parameter models",
        data="their pre-training runs (the abstract names no data)",
        setting="the sink rate of softpick attention, “consistently” over their runs",
        label="softpick achieves 0% sink rate",
        value=0.0,
        printed="0",
    ),
    Quoted(
        "gu2024.tokens",
        paper="gu2024",
        where="Section 3 (their pre-training setup: “we sample 5B tokens from the Pile dataset”)",
        model="LLaMA-style language models",
        data="a sample of the Pile",
        setting="the pre-training data of their controlled runs, the weight-decay runs among them",
        label="tokens sampled from the Pile",
        value=5e9,
        printed="5B",
    ),
    Quoted(
        "gu2024.decay.model",
        paper="gu2024",
        where="the weight-decay runs' configs in the authors' repository "
        "(configs/decay/tinyllama_60m_decay*.yaml)",
        model="tinyllama_60M",
        data="a sample of the Pile",
        setting="learning rate 4e-4, 20,000 steps, global batch 512 sequences, weight decay 0 to 10",
        label="model size of the weight-decay runs",
        value=60e6,
        printed="60M",
    ),
    Quoted("guo2024.bos.100", label="step 100", value=0.03, printed="0.03", **_GUO_FIG),
    Quoted("guo2024.bos.300", label="step 300", value=0.56, printed="0.56", **_GUO_FIG),
    Quoted("guo2024.bos.1000", label="step 1,000", value=0.78, printed="0.78", **_GUO_FIG),
)

_BY_KEY = {q.key: q for q in QUOTED}


def quoted(key: str) -> Quoted:
    """The quoted figure ``key`` (a KeyError names the missing key)."""
    return _BY_KEY[key]


def table(paper: str, where: str) -> tuple[Quoted, ...]:
    """Every quoted entry of one table (or figure) of one paper, in the paper's column order."""
    return tuple(q for q in QUOTED if q.paper == paper and q.where == where)


def table_text(rows: tuple[Quoted, ...]) -> str:
    """``"Xiao et al. 2023, Table 1 (Llama-2-13B, ..., cache ...): 0 + 1024 (window) 5158.07; ..."``."""
    head = rows[0]
    return f"{head.reference.short}, {head.where} ({head.model}, {head.data}; {head.setting}): " + "; ".join(
        f"{q.label} {q.printed}" for q in rows
    )
