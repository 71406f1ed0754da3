"""docs/teachers.md stays true: every Tour link names its step's title in the same row, every page link opens
a registered page with URL parameters the app declares, the readiness file it names is the manifests', and
the README links it."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import yaml

from ui.tour import STEPS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "teachers.md").read_text()
LINK = re.compile(r"`(/[A-Za-z_]+\?[^`]*)`")


def _page_paths() -> set[str]:
    out = set()
    for p in (ROOT / "pages").glob("*.py"):
        head, _, rest = p.stem.partition("_")
        out.add(rest if head.isdigit() and rest else p.stem)
    return out


def _param_names() -> set[str]:
    names = set()
    for p in [*(ROOT / "ui").rglob("*.py"), *(ROOT / "pages").glob("*.py")]:
        names |= set(re.findall(r'Param\(\s*f?"([a-z_]+)"', p.read_text()))
        names |= set(re.findall(r'Param\(\s*f"\{prefix\}([a-z_]+)"', p.read_text()))
    return names


def test_tour_links_name_their_steps() -> None:
    rows = [ln for ln in DOC.splitlines() if "/Tour?tour=" in ln]
    assert len(rows) >= 5
    for row in rows:
        for n in re.findall(r"/Tour\?tour=(\d+)", row):
            assert 1 <= int(n) <= len(STEPS), row
            assert STEPS[int(n) - 1].title in row, (n, STEPS[int(n) - 1].title, row)


def test_page_links_open_pages_with_declared_parameters() -> None:
    pages, names = _page_paths(), _param_names()
    prefixed = {"rt_" + n for n in names} | {"snk_" + n for n in names}
    links = LINK.findall(DOC)
    assert len(links) >= 8
    for link in links:
        u = urlsplit(link)
        assert u.path.strip("/") in pages, link
        for key, _ in parse_qsl(u.query):
            assert key in names or key in prefixed or key == "present", (link, key)


def test_the_ready_file_is_the_manifests_and_the_readme_links_the_guide() -> None:
    dep = yaml.safe_load((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text())
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    ready = {e["name"]: e.get("value") for e in c["env"]}["ATTNLAB_READY_FILE"]
    assert f"`{ready}`" in DOC
    assert "(docs/teachers.md)" in (ROOT / "README.md").read_text()


def test_the_quoted_waiting_message_is_the_apps() -> None:
    from ui.model_queue import WINDOW, Place, waiting_message

    assert f"moving median of the last {WINDOW} of each kind" in " ".join(DOC.split())

    msg = waiting_message(Place(place=4, ahead=3, wait_s=3.0, own_s=1.0, waited_s=2.0, measured=True),
                          "the sink heads")
    assert f"*\"{msg}\"*" in " ".join(DOC.split())
