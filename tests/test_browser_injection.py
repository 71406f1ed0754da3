"""Real browser: payloads in URL values and in an uploaded file's name are drawn as typed by Streamlit's
own renderer, which the AppTest injection test (tests/test_text_injection.py) only models: no link,
image, emphasis, code, LaTeX, colour, badge, emoji or icon inside the messages that quote them."""

from __future__ import annotations

import os
import tempfile
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page

from tests.browser_utils import assert_clean, open_page, screenshot, wait_idle
from tests.page_probe import page_params
from tests.test_text_injection import ALL, forms
from ui.text import JOINER

pytestmark = pytest.mark.browser
os.environ.setdefault("ATTNLAB_CACHE_DIR", tempfile.mkdtemp(prefix="attnlab-runs-"))

# what markup would have become in the DOM (Streamlit 1.67's markdown renderer)
MARKUP = ("a", "img", "strong", "em", "del", "code", "b", "i", ".katex", "span[role=img]",
          ".stMarkdownColoredText", ".stMarkdownColoredBackground", ".stMarkdownBadge")
MESSAGES = "[data-testid=stAlert] [data-testid=stMarkdownContainer]"


def shown(page: Page, selector: str) -> str:
    """The text of every element matching ``selector``, as a reader copies it (joiners dropped)."""
    texts = page.locator(selector).all_inner_texts()
    return "\n".join(texts).replace(JOINER, "")


def markup_in(page: Page, selector: str) -> list[str]:
    return [f"{m}: {page.locator(f'{selector} {m}').all_inner_texts()!r}"
            for m in MARKUP if page.locator(f"{selector} {m}").count()]


def test_url_values_with_payloads_are_quoted_as_typed(page: Page, app_url: str) -> None:
    script = "pages/1_Heatmaps.py"
    # the parameters whose notice quotes the value (numbers, options, switches)
    keys = [p.key for p in page_params(script)
            if p.key != "device" and not p.multi and not (p.options is None and p.kind is str)]
    url = {k: ALL[i % len(ALL)] for i, k in enumerate(keys)}

    open_page(page, f"{app_url}/Heatmaps?{urlencode(url)}", timeout_s=180)
    assert_clean(page)
    text = shown(page, MESSAGES)
    missing = [p for p in set(url.values()) if not any(f in text for f in forms(p))]
    assert not missing, (missing, text[:2000])
    assert not markup_in(page, MESSAGES), markup_in(page, MESSAGES)
    screenshot(page, "injection-url-notices", height=1400)


@pytest.mark.parametrize("payload", [ALL[0], ALL[2], ALL[7], ALL[10], ALL[12]])
def test_an_uploaded_files_name_is_shown_as_typed(page: Page, app_url: str, payload: str) -> None:
    open_page(page, f"{app_url}/Training_lab?tr_corpus=upload&tr_var=standard", charts=False, timeout_s=180)
    name = f"{payload}.txt"
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        files=[{"name": name, "mimeType": "text/plain", "buffer": b"To be, or not to be. " * 40}])
    page.get_by_text("training tokens on", exact=False).first.wait_for(timeout=60_000)
    wait_idle(page, 60)
    assert_clean(page)
    caption = "[data-testid=stCaptionContainer]:has-text('training tokens on')"
    assert name in shown(page, caption), shown(page, caption)
    assert not markup_in(page, caption), markup_in(page, caption)
    if payload == ALL[0]:
        page.locator(caption).first.scroll_into_view_if_needed()
        screenshot(page, "injection-upload-name", height=900)


def test_an_upload_of_another_type_is_refused_plainly(page: Page, app_url: str) -> None:
    """Past the browser's own filter (a drop, or a forged request) a file of another type got Streamlit's
    generic error box; the page names the accepted type instead."""
    open_page(page, f"{app_url}/Training_lab?tr_corpus=upload", charts=False, timeout_s=180)
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        files=[{"name": "x.exe", "mimeType": "text/plain", "buffer": b"MZ not text " * 40}])
    page.get_by_text("is not a .txt file", exact=False).first.wait_for(timeout=60_000)
    wait_idle(page, 60)
    assert_clean(page)
    assert "x.exe is not a .txt file; the uploader accepts plain-text .txt files" in shown(page, MESSAGES)
    page.get_by_text("is not a .txt file", exact=False).first.scroll_into_view_if_needed()
    screenshot(page, "injection-upload-type", height=900)
