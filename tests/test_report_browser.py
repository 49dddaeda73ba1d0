"""report.html in a real browser: headless Chromium opens the report of a real short run.

What a reader relies on: every plot decodes (naturalWidth > 0, and it is the PNG that was written
to plots/), the page logs no console error and throws nothing, it fetches nothing from outside,
and the recommendation, the candidates table and the plots are there and visible, with the values
of report.json. A screenshot of the whole page is saved next to the test output.

The browser is @sparticuz/chromium (a headless Chromium shipped inside an npm package, with the
libraries it needs) driven by puppeteer-core, installed by ``make install`` into
tests/browser/node_modules when ``node`` is present. The test skips, saying why, only when node or
npm is missing, or when the npm install cannot be done; any other failure (Chromium does not
start, the page is wrong) fails it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.report import PLOT_NAMES, load_report
from autotune.report.plots import PLOT_CAPTIONS
from autotune.report.sections import candidate_rows
from tests.support import ROOT, RealRun

pytestmark = pytest.mark.worker  # starts a run and headless Chromium: not in `make test-fast`

BROWSER_DIR = ROOT / "tests" / "browser"
DRIVER = BROWSER_DIR / "check_report.mjs"
NEEDED = ("@sparticuz/chromium", "puppeteer-core")


def _installed() -> bool:
    return all((BROWSER_DIR / "node_modules" / name / "package.json").is_file() for name in NEEDED)


@pytest.fixture(scope="module")
def node() -> str:
    """The node binary with the browser packages installed (installing them if make install did not)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the browser check of report.html needs node and npm "
                    "(install Node.js, then `make install` sets up headless Chromium)")
    if not _installed():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed, so headless Chromium cannot be installed "
                        "(tests/browser/package.json)")
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=BROWSER_DIR, capture_output=True,
                              text=True, timeout=600)
        if proc.returncode != 0 or not _installed():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            pytest.skip(f"headless Chromium could not be installed (npm ci in {BROWSER_DIR}): {' / '.join(tail)}")
    return node


@pytest.fixture(scope="module")
def run_dir(showdown_run: RealRun) -> Path:
    """The reports of a real short tuning of the tiny model (two variants and a showdown; conftest's shared run)."""
    assert showdown_run.code == 0, showdown_run.stdout + showdown_run.stderr
    return showdown_run.out


def _check(node: str, html: Path, screenshot: Path) -> dict[str, Any]:
    proc = subprocess.run([node, str(DRIVER), str(html), str(screenshot)], capture_output=True, text=True,
                          cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["stage"] == "done", f"Chromium could not open the report: {result}"
    return result


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_report_html_in_headless_chromium(node: str, run_dir: Path, tmp_path: Path) -> None:
    doc = load_report(run_dir)
    screenshot = tmp_path / "report.png"
    start = time.monotonic()
    result = _check(node, run_dir / "report.html", screenshot)
    print(f"\n{result['browserVersion']} checked report.html in {time.monotonic() - start:.1f} s; "
          f"screenshot: {screenshot}")

    # The page itself: nothing went wrong while it loaded, and it asked nothing of the network.
    assert [m for m in result["console"] if m["type"] in ("error", "assert")] == [], result["console"]
    assert result["pageErrors"] == [] and result["failedRequests"] == [] and result["externalRequests"] == []
    assert result["title"] == f"autotune report: {doc['recipe']['name']}"

    # Every plot that was written is shown, decoded at the size it was drawn, with its caption.
    written = [name for name in PLOT_NAMES if (run_dir / "plots" / f"{name}.png").is_file()]
    assert written, "the run wrote no plots"
    images = result["images"]
    assert [img["alt"] for img in images] == [f"{name} plot" for name in written]
    for name, img in zip(written, images, strict=True):
        assert img["decoded"] and img["complete"], img
        assert (img["naturalWidth"], img["naturalHeight"]) == _png_size(run_dir / "plots" / f"{name}.png")
        assert img["naturalWidth"] > 0 and img["box"]["width"] > 0 and img["box"]["height"] > 0, img
    assert [f["caption"] for f in result["figures"]] == [_clean(PLOT_CAPTIONS[name]) for name in written]

    # The recommendation card names what report.json recommends.
    rec = doc["recommendation"]
    assert rec is not None
    assert result["recommendation"]["recommended"] == f"{rec['variant']} @ batch {rec['batch_size']}"
    assert set(result["recommendation"]) == {"recommended", "throughput", "p50 / p99 latency", "peak memory"}

    # The candidates table shows every candidate, cell for cell as the report renders it, and is visible.
    headers, rows, _ = candidate_rows(doc)
    table = result["candidates"]
    assert table is not None and table["headers"] == headers
    assert [r["cells"] for r in table["rows"]] == [[_clean(str(v)) for v in row] for row in rows]
    assert len(table["rows"]) == len(doc["candidates"])
    starred = [r for r in table["rows"] if "★" in r["cells"][0]]
    assert len(starred) == 1 and "rec" in starred[0]["classes"].split()
    assert starred[0]["cells"][2:4] == [rec["variant"], str(rec["batch_size"])]
    assert all(r["box"]["height"] > 0 for r in table["rows"])

    headings = [h["text"] for h in result["headings"]]
    for section in ("Recommendation", "Plots", "Candidates", "Environment"):
        assert section in headings

    width, height = _png_size(screenshot)
    assert width == 1280 and height > 900  # the full page, longer than one screen


def test_the_browser_check_sees_a_broken_image_and_a_console_error(node: str, run_dir: Path,
                                                                    tmp_path: Path) -> None:
    """The checks above can fail: a damaged plot and a page script's error are reported as such."""
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    first = page.index("data:image/png;base64,") + len("data:image/png;base64,")
    damaged = page[:first] + "AAAA" + page[first + 4:]  # the PNG signature is gone
    damaged = damaged.replace("</body>", "<script>console.error('deliberate error')</script></body>")
    broken = tmp_path / "broken.html"
    broken.write_text(damaged, encoding="utf-8")
    result = _check(node, broken, tmp_path / "broken.png")
    first_image = result["images"][0]
    assert not first_image["decoded"] and first_image["naturalWidth"] == 0, first_image
    assert all(img["decoded"] for img in result["images"][1:])
    assert any(m["type"] == "error" and m["text"] == "deliberate error" for m in result["console"]), result["console"]
