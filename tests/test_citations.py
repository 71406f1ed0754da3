"""attncore.citations: every number the app quotes from a paper, pinned here to the table or figure it is
printed in (read from the paper, not from the code), and no page, view or README quoting one outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attncore.citations import QUOTED, REFERENCES, quoted, table, table_text

ROOT = Path(__file__).resolve().parents[1]

# (paper, where, model, label, printed): read from the papers themselves.
PINNED = {
    # Xiao et al. 2023, Table 1: Llama-2-13B, the first book (65K tokens) of PG19's test set, cache 1,024
    "xiao2023.t1.0+1024": ("xiao2023", "Table 1", "Llama-2-13B", "0 + 1024 (window)", "5158.07"),
    "xiao2023.t1.4+1020": ("xiao2023", "Table 1", "Llama-2-13B", "4 + 1020", "5.40"),
    "xiao2023.t1.4nl+1020": (
        "xiao2023",
        "Table 1",
        "Llama-2-13B",
        "4 “\\n” + 1020 (four line breaks as the initial tokens)",
        "5.60",
    ),
    # Table 2, the Llama-2-7B row: 400K tokens of PG19's test set concatenated, cache 4,096
    "xiao2023.t2.0+4096": ("xiao2023", "Table 2", "Llama-2-7B", "0 + 4096 (window)", "3359.95"),
    "xiao2023.t2.1+4095": ("xiao2023", "Table 2", "Llama-2-7B", "1 + 4095", "11.88"),
    "xiao2023.t2.2+4094": ("xiao2023", "Table 2", "Llama-2-7B", "2 + 4094", "10.51"),
    "xiao2023.t2.4+4092": ("xiao2023", "Table 2", "Llama-2-7B", "4 + 4092", "9.59"),
    "xiao2023.t2.8+4088": ("xiao2023", "Table 2", "Llama-2-7B", "8 + 4088", "9.54"),
    # Clark et al. 2019, Section 3.2 / Figure 2: "over half of BERT's attention in layers 6-10 focuses on [SEP]"
    "clark2019.sep": (
        "clark2019",
        "Section 3.2 (Figure 2)",
        "BERT-base",
        "over half of BERT's attention in layers 6-10 focuses on [SEP]",
        "half",
    ),
    # Gu et al. 2024: a sink head for key k when its score exceeds ε = 0.3
    "gu2024.eps": ("gu2024", "Section 3 (the sink metric)", "every model they probe", "ε", "0.3"),
    # Zuhri et al. 2025, abstract: "Our experiments with 340M and 1.8B parameter models demonstrate that softpick
    # achieves 0% sink rate consistently." (Table 3's numbers could not be read here and are not quoted.)
    "zuhri2025.softpick0": ("zuhri2025", "Abstract", "340M and 1.8B parameter models",
                            "softpick achieves 0% sink rate", "0"),
    # Gu et al. 2024: "we sample 5B tokens from the Pile dataset"; the weight-decay configs in their repository
    # (configs/decay/tinyllama_60m_decay*.yaml) train tinyllama_60M at lr 4e-4 for 20,000 steps, batch 512
    "gu2024.tokens": ("gu2024", None, "LLaMA-style language models", "tokens sampled from the Pile", "5B"),
    "gu2024.decay.model": ("gu2024", None, "tinyllama_60M", "model size of the weight-decay runs", "60M"),
    # Guo et al. 2024: BOS weight from non-trigger positions, from the figure's data file in their repository
    "guo2024.bos.100": ("guo2024", None, "1 layer, 1 head, width 256", "step 100", "0.03"),
    "guo2024.bos.300": ("guo2024", None, "1 layer, 1 head, width 256", "step 300", "0.56"),
    "guo2024.bos.1000": ("guo2024", None, "1 layer, 1 head, width 256", "step 1,000", "0.78"),
}


def test_every_quoted_number_is_pinned_to_its_table() -> None:
    assert {q.key for q in QUOTED} == set(PINNED)
    for q in QUOTED:
        paper, where, model, label, printed = PINNED[q.key]
        assert (q.paper, q.model, q.label, q.printed) == (paper, model, label, printed), q.key
        assert where is None or q.where == where, q.key
        assert q.paper in REFERENCES and q.data and q.setting
        if re.fullmatch(r"\d+(\.\d+)?", printed):
            assert q.value == float(printed), q.key
        elif re.fullmatch(r"\d+[BM]", printed):
            assert q.value == float(printed[:-1]) * {"B": 1e9, "M": 1e6}[printed[-1]], q.key
    setting = quoted("gu2024.decay.model").setting
    assert all(s in setting for s in ("4e-4", "20,000 steps", "batch 512"))


def test_streaming_llm_tables_as_printed() -> None:
    """Issue 44 item 1: Table 1 has three rows; 11.88 and 10.51 are Table 2's Llama-2-7B figures (another
    model, text and cache), and no "8 + 1016" row exists in either table."""
    t1, t2 = table("xiao2023", "Table 1"), table("xiao2023", "Table 2")
    assert [(q.label.split(" (")[0], q.value) for q in t1] == [
        ("0 + 1024", 5158.07),
        ("4 + 1020", 5.40),
        ("4 “\\n” + 1020", 5.60),
    ]
    assert [(q.label.split(" (")[0], q.value) for q in t2] == [
        ("0 + 4096", 3359.95),
        ("1 + 4095", 11.88),
        ("2 + 4094", 10.51),
        ("4 + 4092", 9.59),
        ("8 + 4088", 9.54),
    ]
    assert {q.model for q in t1} == {"Llama-2-13B"} and {q.model for q in t2} == {"Llama-2-7B"}
    assert (
        "65K" in t1[0].data and "1,024" in t1[0].setting and "400K" in t2[0].data and "4,096" in t2[0].setting
    )
    text = table_text(t1)
    assert text.startswith("Xiao et al. 2023, Table 1 (Llama-2-13B, the first book of PG19's test set")
    assert "5.33" not in text and "1 + 1023" not in text


def test_references_are_full() -> None:
    for r in REFERENCES.values():
        assert r.authors and r.title and 1990 < r.year < 2030
        assert re.fullmatch(r"\d{4}\.\d{5}", r.arxiv), r.key
        assert r.full.endswith(f"arXiv:{r.arxiv}, https://arxiv.org/abs/{r.arxiv}")
    assert REFERENCES["xiao2023"].short == "Xiao et al. 2023"
    assert quoted("xiao2023.t1.4+1020").context.startswith("Xiao et al. 2023, Table 1: Llama-2-13B")


# Numbers quoted from papers: each may appear in code and docs only through attncore.citations.
_LITERALS = ("5158.07", "5,158.07", "3359.95", "11.88", "10.51", "5.33", "9.59", "9.54")


@pytest.mark.parametrize("folder", ["attncore", "ui", "pages", "docs", "bench", "README.md", "CONTRIBUTING.md", "app.py"])
def test_no_paper_number_is_restated_outside_the_registry(folder: str) -> None:
    root = ROOT / folder
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.suffix in (".py", ".md")]
    for path in files:
        if path.name == "citations.py":
            continue
        text = path.read_text(encoding="utf-8")
        for lit in _LITERALS:
            assert lit not in text, f"{path.relative_to(ROOT)} quotes {lit} outside attncore.citations"


def test_guo_steps_are_the_registry() -> None:
    from attncore.training.null_verdicts import GUO_STEPS

    assert {
        100: quoted("guo2024.bos.100").value,
        300: quoted("guo2024.bos.300").value,
        1000: quoted("guo2024.bos.1000").value,
    } == GUO_STEPS


def test_streaming_llm_model_range() -> None:
    """StreamingLLM's 4M-token runs (Figure 5) span Pythia-2.8B to Llama-2-70B, not "7B to 70B"."""
    from attncore.training.experiments import SOURCE_SETUP

    assert "2.8B to 70B" in SOURCE_SETUP["sinks"] and "7B to 70B" not in SOURCE_SETUP["sinks"].replace(
        "2.8B to 70B", ""
    )


def test_guo_claim_quotes_the_registry() -> None:
    from attncore.training.null_attention import CLAIM

    for key, step in (("guo2024.bos.100", "step 100"), ("guo2024.bos.300", "step 300"),
                      ("guo2024.bos.1000", "step 1,000")):
        assert f"{quoted(key).printed} at {step}" in CLAIM


def test_clark_is_quoted_from_the_registry() -> None:
    """The Attention sinks page quoted Clark et al. as 'some middle layers'; the paper says layers 6-10."""
    page = (ROOT / "ui" / "views" / "sinks_text.py").read_text(encoding="utf-8")
    assert 'quoted("clark2019.sep")' in page and "some middle layers" not in page
    assert "layers 6-10" in quoted("clark2019.sep").label


def test_every_evidence_source_is_a_full_reference_linked_from_its_rows() -> None:
    """Issue 44 item 10: each source text and each paper a row's test follows, in full, and linked from the
    row: to its address, or to the page's reference list where the text has none."""
    from attncore.evidence import CLAIMS, SOURCES, Measurement, Row
    from attncore.evidence.records import Judgement
    from ui.text import plain
    from ui.views import evidence as view

    for s in SOURCES.values():
        assert s.title in s.full
        assert s.url in s.full if s.url else "gives no author, date or address" in s.full
    assert SOURCES["d2l"].url.startswith("https://d2l.ai/") and "arXiv:2106.11342" in SOURCES["d2l"].full
    assert SOURCES["graphcore"].url.startswith("https://graphcore-research.github.io/")
    cites = {c.key: c.cites for c in CLAIMS}
    assert cites["llm_sinks"] == ("gu2024",) and cites["llm_window"] == cites["llm_window_2048"] == ("xiao2023",)
    assert {cites[k] for k in ("flash_default", "flash_speed", "flash_memory")} == {("dao2022",)}
    assert all(p in REFERENCES for c in CLAIMS for p in c.cites)
    rows = [Row(c, Measurement(missing="not run"), "—", Judgement("not testable here", "x"), 0.0) for c in CLAIMS]
    df = view.frame(rows)
    shown = view.display_frame(df)
    for c, ref, cell in zip(CLAIMS, df["references"], shown["claim and verdict"], strict=True):
        for s in c.sources:
            assert SOURCES[s].full in ref
            assert f"]({SOURCES[s].url or '#' + view.REFERENCES_ANCHOR})" in cell
        for p in c.cites:
            assert REFERENCES[p].full in ref and f"]({REFERENCES[p].url})" in cell
    listing = view.references_markdown()
    for s in SOURCES.values():
        assert plain(s.title) in listing
    for p in {p for c in CLAIMS for p in c.cites}:
        assert f"[{REFERENCES[p].url}]({REFERENCES[p].url})" in listing and REFERENCES[p].arxiv in listing
