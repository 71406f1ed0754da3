"""Real-browser test of the "Logit lens" expander on Heatmaps' real text (SmolLM2): opened, the lens table, the
rank line and the heads' attribution draw with no error, and the first token's lens carries its warning.
Screenshots: test-artifacts/lens-table.png, lens-dla.png, lens-first-token.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser_utils import assert_clean, open_expander, open_page, screenshot
from tests.browser_utils import chart_views as views
from tests.browser_utils import show_chart as show
from ui.lens import LENS_TITLE

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}


@pytest.mark.parametrize(("tok", "shot"), [(4, "lens"), (0, "lens-first-token")])
def test_the_lens_expander_draws(page: Page, app_url: str, tok: int, shot: str) -> None:
    page.set_viewport_size(VIEWPORT)
    url = f"{app_url}/Heatmaps?rt_src=real&rt_model=smollm2&rt_text=The%20capital%20of%20France%20is&rt_tok={tok}"
    open_page(page, url, timeout_s=600)
    assert_clean(page)
    assert "lens" not in views(page)
    open_expander(page, LENS_TITLE, timeout_s=600)
    assert_clean(page)
    for v in ("lens", "lens-rank", "lens-dla"):
        assert v in views(page), views(page)
    show(page, "lens")
    if tok == 0:
        expect(page.get_by_text("Position 0's lens is not a prediction", exact=False)).to_be_visible()
        screenshot(page, shot)
        return
    screenshot(page, f"{shot}-table")
    show(page, "lens-dla")
    screenshot(page, f"{shot}-dla")
