"""AppTest: the real decoder's sections admit planned work, and work estimated above the default view's waits
for a Run button (issue 44, F6): the URL that ran 62-74 s of passes on page load now shows Run buttons and
computes nothing heavy until one is clicked."""

from __future__ import annotations

import pytest

from attncore.plan import Plan
from tests.chart_data import figure, no_errors, run_app
from ui import cached

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
SINKS = "pages/4_Attention_sinks.py"
F6 = dict(snk_view="decoder", dec_aw="8", dec_al="512", dec_L="1024", dec_T="256")


def test_the_heavy_url_waits_for_run_buttons_and_runs_only_what_is_clicked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    real = Plan.run

    def counted(self: Plan) -> object:
        ran.append(self.label)
        return real(self)

    monkeypatch.setattr(Plan, "run", counted)
    cached.result_cache().clear()
    at = run_app(SINKS, timeout=900, **F6)
    no_errors(at)
    buttons = {b.key: b.label for b in at.button}
    for key in ("dec_sinks_btn", "dec_abl_btn", "dec_ind_btn"):
        assert key in buttons and buttons[key].startswith("Run (≈ "), buttons
    infos = " ".join(i.value for i in at.info)
    assert "The sink heads at 1,024 tokens: about" in infos
    assert "The ablations (33 passes of 512 tokens): about" in infos
    # nothing heavy ran: only the three 64-token variants (the default view's own work)
    assert ran == ["the three variants"]
    for view in ("dec_sink_grid", "dec_ablation", "dec_induction"):
        with pytest.raises(AssertionError):
            figure(at, view)
    # the induction test runs on its click, and only it
    at.button(key="dec_ind_btn").click().run(timeout=900)
    no_errors(at)
    assert ran[1:] == ["the induction test"]
    assert figure(at, "dec_induction")["data"]
    assert {"dec_sinks_btn", "dec_abl_btn"} <= {b.key for b in at.button}
