"""User and URL text is never rendered as markup: markdown, HTML, LaTeX, directives and shortcodes
from a URL value, a typed text, a model path or a file name are seen exactly as typed.

How it is checked: :mod:`tests.streamlit_markdown` models what Streamlit's renderer (and Plotly's
text) shows for a string; every payload carries a sentinel (``QZX`` + a letter), and wherever a
sentinel reaches an element's text, that text must *show* the payload verbatim. The drivers:

* every URL value of every page (the shared sidebar's included), with one payload of each kind
  (markdown, HTML, LaTeX, shortcode) per parameter;
* every free-text parameter (found from the pages' declarations: a new one fails
  :func:`test_every_free_text_input_is_driven` until it is added to :data:`FREE_TEXT`), with every
  payload, in the view that reads it, through the URL and through its widget;
* the Training lab's corpus file names: uploads, and files and a folder in ``ATTNLAB_CORPUS_DIRS``.

Every string field of every element is read (bodies, captions, labels, help, tab titles, metric
texts, radio options, chart titles, names and hover texts); raw LaTeX, HTML and code blocks must
not carry a sentinel at all.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from attncore.models import MODEL_DIRS_ENV
from tests.chart_data import run_app
from tests.page_probe import ALL_PAGES, chart_strings, element_texts, page_params
from tests.streamlit_markdown import visible, visible_html, visible_plotly
from ui import corpus as corpora
from ui import jobs
from ui.text import JOINER, code, plain

# Each payload: at most 20 characters (parsers echo up to 20 of an entry), one token (no comma,
# semicolon or white space, which split score and length lists), a sentinel QZX + letter.
PAYLOADS: dict[str, dict[str, str]] = {
    "markdown": {"link": "[QZXa](http:e.x)", "image": "![QZXb](e.x.png)", "emphasis": "**QZXc**_i_~s~",
                 "code": "`QZXd`", "autolink": "www.e.xQZXe", "email": "QZXf@e.xy", "entity": "&amp;QZXg"},
    "html": {"tag": "<b>QZXh</b>", "italic tag": "<i>QZXi</i>", "comment": "<!--QZXj-->"},
    "latex": {"display": "$$\\frac{QZXk}{2}$$", "inline": "$QZXl^2$"},
    "shortcode": {"icon": ":material/home:QZXm", "emoji": ":smile:QZXn:+1:", "logo": ":streamlit:QZXo",
                  "directive": ":red[QZXp]", "badge": ":blue-badge[QZXq]"},
}
ALL = [p for group in PAYLOADS.values() for p in group.values()]
SENTINEL = re.compile(r"QZX[a-z]")
FOLDER = "[QZXr](e.x) $QZXs$ <b>"  # a corpus folder's name (no colon: it separates the folders)
BAD_FILE = "**QZXt**.txt"  # a corpus file that is not UTF-8
MODEL = "my`QZXu` [x](e.x)"  # a model folder (listed in a code span: the backtick must not end it)
BY_SENTINEL = {**{SENTINEL.search(p).group(): p for p in ALL},  # type: ignore[union-attr]
               "QZXr": FOLDER, "QZXs": FOLDER, "QZXt": BAD_FILE, "QZXu": MODEL}
ON_DISK = [p for p in ALL if "/" not in p]  # payloads that can be a file name
# A sample of every kind, for drivers whose code path the full set already crossed elsewhere: a link,
# the two autolinks a browser caught, a tag, LaTeX, an icon and a directive.
SAMPLE = [PAYLOADS["markdown"]["link"], PAYLOADS["markdown"]["autolink"], PAYLOADS["markdown"]["email"],
          PAYLOADS["html"]["tag"], PAYLOADS["latex"]["display"], PAYLOADS["shortcode"]["icon"],
          PAYLOADS["shortcode"]["directive"]]

# Fields shown as markdown (the rest are ids, option values of drop-downs, widget values, icons...).
MARKDOWN_FIELDS = {"body", "label", "help", "delta", "text", "caption"}
MARKDOWN_OPTIONS = {"radio"}  # widgets whose options are markdown too
NEVER = {"latex", "code"}  # raw LaTeX and code: no user text may reach them (st.html: escaped)

COUNTS: Counter[str] = Counter()


def forms(payload: str) -> tuple[str, ...]:
    """How a page may quote a payload: as typed, or as Python's repr quotes it."""
    return payload, repr(payload)[1:-1]


def seen_as_typed(shown: str, sentinel: str) -> bool:
    """The payload is seen verbatim, or a label shortens it: its start up to the sentinel or beyond, then …"""
    payload = BY_SENTINEL[sentinel]
    if any(f in shown for f in forms(payload)):
        return True
    start = payload.index(sentinel) + len(sentinel)
    return any(f"{payload[:k]}…" in shown for k in range(start, len(payload)))


def check_texts(at: Any) -> list[str]:
    """Every string of every element: where a sentinel is, its payload is seen verbatim. Returns the
    failures (empty when all is plain) and counts what was read."""
    assert not at.exception, [e.value for e in at.exception]
    bad: list[str] = []
    COUNTS["runs"] += 1
    for ft in element_texts(at):
        COUNTS["fields"] += 1
        hits = set(SENTINEL.findall(ft.text))
        if ft.element == "plotly_chart" and ft.field == "spec":
            for path, s in chart_strings(ft.text):
                COUNTS["chart strings"] += 1
                for sentinel in set(SENTINEL.findall(s)):
                    COUNTS["payloads checked"] += 1
                    if not seen_as_typed(visible_plotly(s), sentinel):
                        bad.append(f"chart {path}: {s[:160]!r} shows {visible_plotly(s)[:160]!r}")
            continue
        if not hits:
            continue
        if ft.element in NEVER:
            bad.append(f"{ft!r}: user text inside raw {ft.element}")
            continue
        if ft.element == "html":
            shown = visible_html(ft.text)
            for sentinel in hits:
                COUNTS["payloads checked"] += 1
                if not seen_as_typed(shown, sentinel):
                    bad.append(f"{ft!r} shows {shown[:160]!r}")
            continue
        last = ft.field.rsplit(".", 1)[-1]
        if last in MARKDOWN_FIELDS or (last == "options" and ft.element in MARKDOWN_OPTIONS):
            shown = visible(ft.text)
            for sentinel in hits:
                COUNTS["payloads checked"] += 1
                if not seen_as_typed(shown, sentinel):
                    bad.append(f"{ft!r} shows {shown[:160]!r}")
        else:
            COUNTS["plain fields"] += 1
    return bad


def assert_plain(at: Any, what: str) -> None:
    bad = check_texts(at)
    assert not bad, f"{what}:\n" + "\n".join(bad[:12])


# ---------------------------------------------------------------------------- the model itself


@pytest.mark.parametrize("payload", ALL)
def test_the_check_can_fail_and_plain_passes_it(payload: str) -> None:
    """Unescaped, every payload is *not* seen as typed (the renderer model catches it); through
    ui.text.plain it is, and nothing but the invisible joiner is added to what is seen."""
    assert not any(f in visible(payload) for f in forms(payload)), visible(payload)
    assert visible(plain(payload)) == payload
    assert visible(f"Some **page** text: {plain(payload)}, and more.") == \
        f"Some ⟦strong⟧page⟦/strong⟧ text: {payload}, and more."
    assert visible(code(payload)) == f"⟦code⟧{payload}⟦/code⟧"


@pytest.mark.parametrize("text", ["[Session expired - click to log in again](http://example/phish)",
                                  "![x](http://example/x.png)", "**bold** _it_ `code` $x^2$ :smile: <b>x</b> # h",
                                  "http://example/phish www.example.com <http://example/a>",
                                  "a\\[b\\](c) \\ end", "line\nbreak", "12:30 a:b :material/home: ::x",
                                  ":red[x] :blue y :small[z]", "&amp; &#65; R&D", "    four spaces",
                                  "1. one", "- item", "> quote", "x_y_z _a_ __b__", "~x~ ~~y~~",
                                  "a -> b <- c <-> d -- e >= f <= g ~= h", "mail me@e.xy or https://e.x",
                                  "--flag a->b x--y"])
def test_plain_renders_exactly_the_characters(text: str) -> None:
    body = plain(text)
    assert visible(body) == text.replace("\n", " ").lstrip()
    assert "http:" not in body  # no bare address left for GFM's autolinker
    assert "$" not in body.replace("\\$", "")  # no unescaped dollar starts LaTeX
    assert not re.search(r"(?<!\\):[A-Za-z]", body)  # no directive can start
    assert not re.search(r":[\w+/-]+:", body)  # no shortcode pattern survives (the joiner breaks it)


def test_plain_leaves_ordinary_messages_readable() -> None:
    """Escapes only where markup could start: a sentence with a number and a colon is unchanged."""
    msg = "The sweep's work would be 3.92G; the limit is 1G. Lower the largest T: 1024 (or the heads)."
    assert plain(msg) == msg
    assert JOINER not in plain("ratio 3:1, time 12:30")


def test_code_spans_hold_backticks_and_shortcodes() -> None:
    for name in ("my`model", "``x", "a:material/home:b", "`"):
        assert visible(code(name)) == f"⟦code⟧{name}⟦/code⟧", code(name)


# ---------------------------------------------------------------------------- every URL value of every page


def url_state(script: str, kind: str) -> dict[str, str]:
    """Every URL parameter of the page set to a payload of ``kind`` (rotating through the kind)."""
    group = list(PAYLOADS[kind].values())
    return {p.key: group[i % len(group)] for i, p in enumerate(page_params(script))}


@pytest.mark.parametrize("kind", list(PAYLOADS))
@pytest.mark.parametrize("script", ALL_PAGES)
def test_every_url_value_is_shown_as_typed(script: str, kind: str, cache: Path) -> None:
    at = run_app(script, **url_state(script, kind))
    assert_plain(at, f"{script} with {kind} payloads in every URL value")
    notices = " ".join(w.value for w in at.warning)
    assert SENTINEL.search(notices), "the notices quote the bad URL values"


# ---------------------------------------------------------------------------- free-text inputs

# Every free-text parameter (a str Param without options), with the URL state that shows the view
# reading it, and the widget kind that edits it there.
FREE_TEXT: dict[tuple[str, str], tuple[dict[str, str], str]] = {
    ("pages/1_Heatmaps.py", "vlens"): ({"mask": "padding2d"}, "text_input"),
    ("pages/1_Heatmaps.py", "rt_path"): ({"rt_src": "real", "rt_model": "local"}, "text_input"),
    ("pages/1_Heatmaps.py", "rt_text"): ({"rt_src": "real"}, "text_area"),
    ("pages/3_Saturation_and_gradients.py", "sat_scores"): ({"sat_tab": "Saturation"}, "text_input"),
    ("pages/4_Attention_sinks.py", "snk_path"): ({"snk_view": "model", "snk_model": "local"}, "text_input"),
    ("pages/4_Attention_sinks.py", "snk_text"): ({"snk_view": "model"}, "text_area"),
    ("pages/4_Attention_sinks.py", "snk_ltext"): ({"snk_view": "learned", "snk_lsrc": "text"}, "text_area"),
    ("pages/4_Attention_sinks.py", "dec_text"): ({"snk_view": "decoder", "dec_src": "own", "dec_L": "16",
                                                  "dec_aw": "4", "dec_al": "32", "dec_T": "4"}, "text_area"),
    ("pages/6_Training_lab.py", "tr_file"): ({"tr_corpus": "folder"}, "selectbox"),
}
# Texts a model reads are not echoed (they are tokenised): one run with every payload in it.
WHOLE_TEXT = {"rt_text", "snk_text", "dec_text"}
# Of those, the texts read by one model only (SmolLM2: the real decoder part), with no model picker; its
# run with every payload on SmolLM2 is tests/test_apptest_decoder_text.py's.
ONE_MODEL = {"dec_text"}
# Which payloads each echoing parameter gets: every one where a parser of its own quotes it; the sample
# where the same code quotes it for another page (snk_path: ui.realtext, as rt_path); one for a file
# name that is not there (replaced by the first file, or none: nothing quoted).
DRIVEN = {"vlens": ALL, "sat_scores": ALL, "rt_path": ALL, "snk_path": SAMPLE, "tr_file": SAMPLE[:1],
          "snk_ltext": ALL}
# Texts drawn character by character as the learned model's token labels, quoted in no message.
CHARTED = {"snk_ltext"}


def test_every_free_text_input_is_driven() -> None:
    found = {(s, p.key) for s in ALL_PAGES for p in page_params(s)
             if p.options is None and not p.multi and p.kind is str and p.pattern is None}
    assert found == set(FREE_TEXT), "add the new free-text parameter to FREE_TEXT"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh run cache, no corpus folders, and one (empty) allowed model folder, so that a typed
    model path is checked against it and quoted."""
    monkeypatch.setenv(jobs.CACHE_DIR_ENV, str(tmp_path / "runs"))
    monkeypatch.delenv(corpora.CORPUS_DIRS_ENV, raising=False)
    (tmp_path / "models").mkdir()
    monkeypatch.setenv(MODEL_DIRS_ENV, str(tmp_path / "models"))
    return tmp_path / "runs"


FREE_CASES = [(script, key, payload) for (script, key) in FREE_TEXT if key not in WHOLE_TEXT
              for payload in DRIVEN[key]]


@pytest.mark.parametrize(("script", "key", "payload"), FREE_CASES,
                         ids=[f"{k}-{SENTINEL.search(p).group()}" for _, k, p in FREE_CASES])  # type: ignore[union-attr]
def test_free_text_is_shown_as_typed(script: str, key: str, payload: str, cache: Path) -> None:
    state, _ = FREE_TEXT[(script, key)]
    at = run_app(script, **state, **{key: payload})
    assert_plain(at, f"{key}={payload!r}")
    # the parsers quote the entry that is wrong (split at commas, semicolons, spaces); a file that is not
    # there is replaced by the first one (or none), with no echo
    if key != "tr_file" and key not in CHARTED and ";" not in payload:
        shown = " ".join(visible(e.value) for e in (*at.error, *at.warning, *at.info))
        assert any(f in shown for f in forms(payload)), (key, shown[:400])


@pytest.mark.parametrize("key", sorted(WHOLE_TEXT - ONE_MODEL))
@pytest.mark.parametrize("model", ["minilm", "causal"])
def test_model_text_with_every_payload_is_shown_as_typed(key: str, model: str, cache: Path) -> None:
    script = next(s for (s, k) in FREE_TEXT if k == key)
    state, _ = FREE_TEXT[(script, key)]
    prefix = key.removesuffix("text")
    at = run_app(script, **state, **{f"{prefix}model": model, key: " ".join(ALL)})
    assert_plain(at, f"{key} on {model}")
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize(("script", "key"), [k for k, (_, w) in FREE_TEXT.items() if w != "selectbox"])
def test_typing_every_payload_into_the_widget_is_shown_as_typed(script: str, key: str, cache: Path) -> None:
    """The same through the widget (typing, then the rerun it causes), all payloads in one text."""
    state, widget = FREE_TEXT[(script, key)]
    at = run_app(script, **state)
    for typed in ([" ".join(ALL)] if key in WHOLE_TEXT else ALL[::4]):
        getattr(at, widget)(key=key).set_value(typed).run()
        assert_plain(at, f"{key} typed as {typed!r}")


def test_model_folder_names_are_shown_as_typed(tmp_path: Path, cache: Path) -> None:
    """The local-model picker lists the allowed folders and the models found in them as code."""
    model = tmp_path / "models" / MODEL
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    for script, state in (("pages/1_Heatmaps.py", {"rt_src": "real", "rt_model": "local"}),
                          ("pages/4_Attention_sinks.py", {"snk_view": "model", "snk_model": "local"})):
        at = run_app(script, **state)
        assert_plain(at, f"{script}: model folder {MODEL!r}")
        assert any(f"⟦code⟧{model}⟦/code⟧" in visible(c.value) for c in at.sidebar.caption)


def tokenizing_model(dest: Path, tokens: list[str]) -> Path:
    """A tiny seeded GPT-2 folder whose tokenizer splits at white space and knows each of ``tokens`` as
    one token (a real BPE vocabulary holds tokens such as ``</`` or ``<b>``), with no special token in
    front: every token label, the first one included, is a payload."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2Model, PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{t: i + 1 for i, t in enumerate(tokens)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=len(vocab), n_positions=64, bos_token_id=None,
                     eos_token_id=None)
    GPT2Model(cfg).save_pretrained(dest)
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(dest)
    return dest


def test_a_models_tokens_are_shown_as_typed(tmp_path: Path, cache: Path) -> None:
    """Token labels reach captions, metric labels, the token picker, strips and chart labels: a local
    model whose tokens are payloads (one token each) shows each as typed on both real-model views."""
    tokens = sorted((p for p in ALL if " " not in p), key=lambda p: not p.startswith("<"))  # a tag first
    folder = tokenizing_model(tmp_path / "models" / "payload-gpt2", tokens)
    text = " ".join(tokens)
    for script, state in (("pages/1_Heatmaps.py", {"rt_src": "real", "rt_model": "local", "rt_path": str(folder),
                                                    "rt_text": text, "rt_tok": "3"}),
                          ("pages/4_Attention_sinks.py", {"snk_view": "model", "snk_model": "local",
                                                          "snk_path": str(folder), "snk_text": text, "snk_tok": "3"})):
        at = run_app(script, **state)
        assert not at.error, [e.value for e in at.error]
        before = COUNTS["payloads checked"]
        assert_plain(at, f"{script} with payload tokens")
        assert COUNTS["payloads checked"] - before >= len(tokens), "the tokens were shown somewhere"


# ---------------------------------------------------------------------------- corpus file names

TRAINING = "pages/6_Training_lab.py"


def plan(at: Any) -> str:
    (line,) = [c.value for c in at.caption if "training tokens on" in c.value]
    return line


@pytest.mark.parametrize("payload", ALL, ids=[SENTINEL.search(p).group() for p in ALL])  # type: ignore[union-attr]
def test_uploaded_file_names_are_shown_as_typed(payload: str, cache: Path) -> None:
    """Issue 26: the plan caption rendered an uploaded file's name as markdown (a link, an image,
    bold, LaTeX). Names that are refused are quoted plainly too."""
    name = f"{payload}.txt"
    text = "Shall I compare thee to a summer's day?\n" * 20
    at = run_app(TRAINING, tr_corpus="upload", tr_var="standard")
    at.get("file_uploader")[0].set_value((name, text.encode(), "text/plain")).run()
    assert_plain(at, f"upload {name!r}")
    assert name in visible(plan(at))
    if payload in SAMPLE:
        at.get("file_uploader")[0].set_value((name, b"", "text/plain")).run()  # empty: refused, quoted
        assert_plain(at, f"empty upload {name!r}")
        assert any(name in visible(w.value) for w in at.warning)


def test_corpus_folder_file_names_are_shown_as_typed(tmp_path: Path, cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Files (and a folder) in ATTNLAB_CORPUS_DIRS named with every payload that can be a file name:
    each chosen in turn, its name in the plan, the options and every message is seen as typed."""
    folder = tmp_path / FOLDER
    folder.mkdir()
    text = "To be, or not to be, that is the question.\n" * 20
    for payload in ON_DISK:
        (folder / f"{payload}.txt").write_text(text, encoding="utf-8")
    (folder / BAD_FILE).write_bytes(b"\xff\xfe not utf-8")  # a bad file: its warning quotes it
    monkeypatch.setenv(corpora.CORPUS_DIRS_ENV, str(folder))
    files = corpora.folder_files()
    # a name with a backslash (a path separator elsewhere) is not offered: reading it is refused
    offered = [p for p in ON_DISK if "\\" not in p]
    assert sorted(files) == sorted(f"0/{n}.txt" for n in [*offered, BAD_FILE.removesuffix(".txt")])
    chosen = [f"0/{n}.txt" for n in SAMPLE if n in offered] + [f"0/{BAD_FILE}"]  # every name is an option
    for key in chosen:
        at = run_app(TRAINING, tr_corpus="folder", tr_var="standard", tr_file=key)
        assert_plain(at, f"folder file {key!r}")
        assert at.selectbox(key="tr_file").value == key
        shown = " ".join(visible(x) for x in [*(c.value for c in at.caption), *(w.value for w in at.warning)])
        assert f"{folder.name}/{key.partition('/')[2]}" in shown or key.partition("/")[2] in shown, shown[:300]


@pytest.mark.skipif(bool(os.environ.get("PYTEST_XDIST_WORKER")),
                    reason="counts this module's runs in one process: pytest-xdist spreads them over workers")
def test_injection_counts() -> None:
    """Runs last in this module: how much was read (the numbers the issue's closing note gives)."""
    assert COUNTS["runs"] >= 100 and COUNTS["payloads checked"] >= 300, COUNTS
    print(f"injection: {dict(COUNTS)}; payloads {len(ALL)} ({', '.join(f'{k} {len(v)}' for k, v in PAYLOADS.items())})")

