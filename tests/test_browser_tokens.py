"""Real-browser test of readable tokens (issue 41 item 1): Heatmaps with SmolLM2 on a text with spaces, a
newline, a tab and a split character shows no raw byte-level BPE mark anywhere on the drawn page (its text,
every chart's SVG text), the token strips' hover titles keep the raw token after "raw:", and the head map's
axis reads "␣café". Screenshot: test-artifacts/tokens-heatmaps.png."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from playwright.sync_api import Page

from tests.browser_utils import assert_clean, open_page, screenshot, show_chart

pytestmark = pytest.mark.browser

TEXT = "The café opened.\n\tIts tea was unbelievably good."
RAW = re.compile(r"raw: [^,)<\"\n]*")


def test_smollm2_heatmaps_show_readable_tokens(page: Page, app_url: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    open_page(page, f"{app_url}/Heatmaps?rt_src=real&rt_model=smollm2&rt_text={quote(TEXT)}&rt_tok=3&rt_gen=1"
                    "&rt_gn=3", timeout_s=600)
    assert_clean(page)
    show_chart(page, "rt-weights")
    screenshot(page, "tokens-heatmaps")
    shown = page.evaluate("() => document.body.innerText + ' ' + Array.from(document.querySelectorAll("
                          "'svg text')).map(t => t.textContent).join(' ')")
    titles = page.evaluate("() => Array.from(document.querySelectorAll('span.attn-tok')).map(s => s.title)")
    assert "␣café" in shown and "↵" in shown, shown[:400]
    for mark in ("Ġ", "Ċ", "ĉ"):
        assert mark not in shown
        assert mark not in RAW.sub("", " ".join(titles))
    assert any("raw: ĠcafÃ©" in t for t in titles), titles[:4]
