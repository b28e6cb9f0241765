"""The HTML card rendered by a real headless browser (Chromium from Debian's packages:
``apt-get install chromium``): the DOM after layout holds the run's header, the findings with
severity, a link to each rule's page, evidence and fix, the timeline with its legend, the card as a
table, and the page is not wider than a 1280 px window. Skipped where no Chromium is installed."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from runtime_guard.discover import run_script  # noqa: E402
from runtime_guard.html import render_html  # noqa: E402
from tests.shared_data import REPO  # noqa: E402

EXAMPLES = REPO / "examples"
BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
VOID = {"meta", "br", "col", "img", "input", "link", "hr", "wbr", "source"}

#: appended to a copy of the page: the layout's widths end up in the dumped DOM
MEASURE = ("<script>const d = document.documentElement; document.body.dataset.scrollWidth = d.scrollWidth; "
           "document.body.dataset.clientWidth = d.clientWidth;</script>")


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None]) -> None:
        self.tag, self.attrs, self.children, self.parts = tag, attrs, [], []

    @property
    def text(self) -> str:
        return " ".join("".join(self.parts + [c.text for c in self.children]).split())

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        found = [self] if (tag in (None, self.tag) and all(self.attrs.get(k) == v for k, v in attrs.items())) else []
        for child in self.children:
            found += child.find_all(tag, **attrs)
        return found

    def find(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert found, (tag, attrs)
        return found[0]


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].parts.append(data)


def _chromium_dom(page: Path, width: int = 1280) -> Node:
    done = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={width},900",
         "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    builder = TreeBuilder()
    builder.feed(done.stdout)
    return builder.root


@pytest.fixture(scope="module")
def buggy_report() -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        report = run_script(EXAMPLES / "train_buggy.py", accumulation_steps=4).report()
    assert report is not None
    return report.to_dict()


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (Debian: apt-get install chromium)")
def test_card_page_in_a_headless_browser(tmp_path: Path, buggy_report: dict) -> None:
    """Issue 17 item 11."""
    page = tmp_path / "card.html"
    page.write_text(render_html(buggy_report).replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = _chromium_dom(page)
    body = dom.find("body")
    assert int(body.attrs["data-scroll-width"]) <= int(body.attrs["data-client-width"]) <= 1280  # no sideways scroll

    run = {td.attrs["data-field"]: td.text for td in dom.find("table", id="run").find_all("td")}
    assert run["script"].endswith("train_buggy.py") and run["model"] == "Sequential"
    assert run["parameters"] == f"{buggy_report['card']['parameters']:,} trainable"
    assert run["versions"].startswith(f"torch {torch.__version__}")

    rows = dom.find("table", id="findings").find_all("tr", **{"class": "finding"})
    assert [r.attrs["data-code"] for r in rows] == ["ACC001", "ACC201", "ACC304"]
    by_code = {f["code"]: f for f in buggy_report["findings"]}
    for row in rows:
        finding = by_code[row.attrs["data-code"]]
        cells = row.find_all("td")
        assert cells[1].text == "error" and "error" in cells[1].attrs["class"].split()
        link = cells[2].find("a")
        assert link.text == finding["name"] and link.attrs["href"] == finding["url"]
        assert link.attrs["href"].endswith(f"rules/{finding['code']}-{finding['name']}/README.md")
        assert cells[4].text.startswith(" ".join(finding["observed"].split()))
        assert cells[5].text == " ".join(finding["evidence"].split()) and cells[6].text == finding["fix"]
    assert dom.find("p", id="evidence-legend").text.startswith("evidence letters: F = forward of the probed model")

    timeline = dom.find("table", id="timeline").find_all("tr")
    assert [r.find("th").text for r in timeline] == ["group 0", "group 1", "group 2*"]
    assert timeline[0].find("td").text == buggy_report["card"]["groups"][0]["timeline"]
    legend = dom.find("p", id="timeline-legend").text
    assert "sched = LR scheduler step" in legend and "‖ after the group's last backward" in legend

    card = {r.find("th").text: r.find("td").text for r in dom.find("table", id="card").find_all("tr")}
    assert card["A (accumulation steps)"] == "4 (given to the probe)"
    assert card["scheduler steps / update"] == "4.0"
    assert "None" not in " ".join(card.values())
    assert dom.find("table", id="checks").find_all("tr")


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (Debian: apt-get install chromium)")
def test_long_values_wrap_instead_of_scrolling(tmp_path: Path, buggy_report: dict) -> None:
    """An unbroken 400-character path and evidence still fit a 1280 px window."""
    report = {**buggy_report, "card": {**buggy_report["card"], "script": "/" + "x" * 400 + ".py"}}
    report["findings"] = [{**f, "evidence": "F" * 300} for f in report["findings"]]
    page = tmp_path / "card.html"
    page.write_text(render_html(report).replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    body = _chromium_dom(page).find("body")
    assert int(body.attrs["data-scroll-width"]) <= int(body.attrs["data-client-width"])
