"""The report's ``serving`` section: validated (a report without it stays valid, a malformed one is refused naming
the field), stored in its key order, and rendered in report.md, report.html, the console and its plot."""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import InputError
from autotune.report import console_table, load_report, render_html, render_markdown, write_reports
from autotune.report.canonical import normalise_report, report_json
from autotune.report.plots import PLOT_NAMES, SERVING_PLOT, render_plots
from autotune.report.schema import SERVING_FIELDS, validate_report
from autotune.report.serving import serving_console_line, serving_sentence

BASE = Path(__file__).resolve().parent / "data" / "compare-base-report-v2.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SENTENCE = ("Serve with 2 instances x 1 thread, max batch 8, max delay 2 ms: 412 requests/s (CI 398-425) within "
            "p99 <= 40 ms; p50 6.1 ms, p99 31 ms at that rate")


def _point(rate: float, p99: float, *, passed: bool | None = True, **extra: Any) -> dict[str, Any]:
    return {"rate": rate, "p50_ms": p99 / 5, "p99_ms": p99, "p99_ci_ms": [p99 * 0.9, p99 * 1.1],
            "sent": int(rate * 10), "ok": int(rate * 10), "failed": 0, "timed_out": 0, "dropped": 0,
            "achieved_rate": rate * 0.99, "passed": passed, **extra}


def _config(role: str, instances: int, threads: int, max_batch: int, delay: float, max_rate: float | None,
            *, predicted: float | None = None, reason: str | None = None, points: list[Any] | None = None,
            ) -> dict[str, Any]:
    return {"variant": "eager+threads=1", "environment": "glibc", "instances": instances, "threads": threads,
            "max_batch": max_batch, "max_delay_ms": delay, "predicted_max_rate": predicted, "max_rate": max_rate,
            "max_rate_ci": None if max_rate is None else [max_rate * 0.95, max_rate * 1.05], "role": role,
            "pruned_reason": reason, "points": points or []}


def serving_section() -> dict[str, Any]:
    """A hand-written section of the spec's shape: a search over a few configurations, both baselines."""
    rec = _config("search", 2, 1, 8, 2.0, 412.0, predicted=430.0,
                  points=[_point(200, 12.0), _point(330, 19.0), _point(412, 31.0), _point(460, 55.0, passed=False)])
    naive = _config("naive", 1, 1, 1, 0.0, 120.0, predicted=125.0,
                    points=[_point(60, 9.0), _point(120, 35.0), _point(140, 90.0, passed=False)])
    naive["held"] = True
    loop = _config("batch-loop", 1, 2, 8, 10.0, 240.0, predicted=250.0,
                   points=[_point(120, 20.0), _point(240, 38.0), _point(280, 70.0, passed=False)])
    loop["held"] = False  # its hold at a higher rate failed, leaving 240
    pruned = _config("pruned", 4, 2, 32, 10.0, None, predicted=600.0,
                     reason="predicted p99 62 ms at its max rate, over the SLO")
    return {
        "status": "ok", "reason": None, "slo_ms": 40.0, "percentile": "p99", "model_name": "slowable",
        "arrivals": "poisson", "request_samples": 1, "rate_target": None, "cores": 16,
        "recommendation": {"variant": "eager+threads=1", "environment": "glibc", "instances": 2, "threads": 1,
                           "max_batch": 8, "max_delay_ms": 2.0, "max_rate": 412.0, "max_rate_ci": [398.0, 425.0],
                           "p50_ms": 6.1, "p99_ms": 31.0, "p99_ci_ms": [28.0, 34.5], "goodput": 405.0,
                           "held_s": 10.0},
        "at_fraction": [
            {"fraction": f, "rate": 412.0 * f, "p50_ms": 4.0 + f, "p90_ms": 10.0 * f, "p99_ms": 31.0 * f,
             "p99_ci_ms": [28.0 * f, 34.5 * f], "sent": 1000, "ok": 998, "failed": 1, "timed_out": 1, "dropped": 0,
             "achieved_rate": 411.0 * f} for f in (0.5, 0.8, 0.9, 1.0)],
        "configs": [rec, naive, loop, pruned],
        "baselines": {"naive": copy.deepcopy(naive), "batch_loop": copy.deepcopy(loop)},
        "knobs": [{"knob": "max_batch", "text": "batching up to 8 samples per call", "ratio": 2.1},
                  {"knob": "instances", "text": "a second instance", "ratio": 1.6},
                  {"knob": "threads", "text": "a second thread per instance was worth less than a second instance",
                   "ratio": None}],
        "seconds": 95.0, "share_of_run": 0.12, "calls": {"calibration_s": 20.0, "load_s": 70.0, "hold_s": 10.0,
                                                            "baseline_hold_s": 20.0, "curve_s": 12.0,
                                                            "warm_s": 8.0},
        "server": {"stack": "asyncio (autotune serve.py)", "command": "./run.sh serve --port 8000"},
        "files": ["serve.py", "serving.json", "triton/slowable/config.pbtxt", "torchserve/config.properties",
                  "ray/serve_deployment.py"],
        "interrupted": False,
    }


@pytest.fixture
def base() -> dict[str, Any]:
    return json.loads(BASE.read_text(encoding="utf-8"))


@pytest.fixture
def served(base: dict[str, Any]) -> dict[str, Any]:
    return {**base, "serving": serving_section()}


def test_a_report_without_serving_is_valid_and_renders_no_serving(base: dict[str, Any]) -> None:
    assert "serving" not in base
    validate_report(base)
    assert "## Serving" not in render_markdown(base)
    assert ">Serving<" not in render_html(base, plots={})
    assert SERVING_PLOT not in render_plots(base)
    assert serving_console_line(base) is None


def test_the_section_validates_and_keeps_its_key_order(served: dict[str, Any]) -> None:
    text = report_json(normalise_report(served))
    stored = json.loads(text)
    keys = list(stored)
    assert keys.index("profile") < keys.index("serving") < keys.index("candidates")
    assert list(stored["serving"]) == [k for k in SERVING_FIELDS if k in stored["serving"]]
    assert list(stored["serving"]["recommendation"])[:3] == ["variant", "environment", "instances"]
    assert list(stored["serving"]["configs"][0]["points"][0])[:2] == ["rate", "p50_ms"]
    shuffled = copy.deepcopy(served)
    shuffled["serving"] = dict(reversed(list(shuffled["serving"].items())))
    shuffled["serving"]["recommendation"] = dict(reversed(list(shuffled["serving"]["recommendation"].items())))
    assert report_json(normalise_report(shuffled)) == text  # the same document, the same bytes


def test_the_section_round_trips_through_report_json(tmp_path: Path, served: dict[str, Any]) -> None:
    written = write_reports(served, tmp_path)
    assert load_report(written["json"])["serving"] == normalise_report(served)["serving"]


@pytest.mark.parametrize(("path", "value", "message"), [
    (("recommendation", "max_rate"), -1.0, r"report\.serving\.recommendation\.max_rate: expected a number >= 0"),
    (("recommendation", "max_rate_ci"), [425.0, 398.0],
     r"report\.serving\.recommendation\.max_rate_ci: expected \[low, high\] with low <= high, got \[425\.0, 398\.0\]"),
    (("recommendation", "max_rate_ci"), [1.0], r"recommendation\.max_rate_ci: expected a list of 2 items, got 1"),
    (("recommendation", "instances"), 0, r"report\.serving\.recommendation\.instances: expected a positive integer"),
    (("status",), "done", r"report\.serving\.status: expected one of ok\|failed\|skipped"),
    (("slo_ms",), 0, r"report\.serving\.slo_ms: expected a positive number"),
    (("percentile",), "p98", r"report\.serving\.percentile: expected one of p50\|p90\|p95\|p99\|p99\.9"),
    (("arrivals",), "uniform", r"report\.serving\.arrivals: expected one of poisson\|closed\|replay"),
    (("request_samples",), 0, r"report\.serving\.request_samples: expected a positive integer or 'batch'"),
    (("configs", 1, "role"), "best", r"report\.serving\.configs\[1\]\.role: expected one of search\|naive"),
    (("configs", 0, "points", 2, "p99_ci_ms"), [40.0, 30.0],
     r"report\.serving\.configs\[0\]\.points\[2\]\.p99_ci_ms: expected \[low, high\] with low <= high"),
    (("configs", 0, "points", 0, "dropped"), -3, r"points\[0\]\.dropped: expected an integer >= 0, got -3"),
    (("at_fraction", 0, "fraction"), 1.5, r"report\.serving\.at_fraction\[0\]\.fraction: expected a fraction"),
    (("baselines", "naive", "max_rate"), -5, r"report\.serving\.baselines\.naive\.max_rate: expected a number >= 0"),
    (("knobs", 0, "knob"), "workers", r"report\.serving\.knobs\[0\]\.knob: expected one of instances"),
    (("recommendation", "variant"), None, r"report\.serving\.recommendation\.variant: expected a string"),
])
def test_a_malformed_section_is_refused_naming_the_field(served: dict[str, Any], path: tuple[Any, ...],
                                                         value: Any, message: str) -> None:
    target: Any = served["serving"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InputError, match=message):
        validate_report(served)


def test_ok_needs_its_slo_and_failed_needs_only_its_reason(served: dict[str, Any]) -> None:
    del served["serving"]["slo_ms"]
    with pytest.raises(InputError, match=r"report\.serving\.slo_ms: a serving section with status ok needs its SLO"):
        validate_report(served)
    served["serving"] = {"status": "failed", "reason": "the server did not answer ready in 60 s"}
    validate_report(served)
    served["serving"] = {"status": "skipped"}
    validate_report(served)


def test_markdown_has_the_sentence_the_tables_and_the_plot(served: dict[str, Any], tmp_path: Path) -> None:
    written = write_reports(served, tmp_path)
    assert (tmp_path / "plots" / "serving.png").read_bytes().startswith(PNG_MAGIC)
    md = html.unescape(written["md"].read_text(encoding="utf-8"))  # "<" is written "&lt;" (the text is untrusted)
    section = md[md.index("## Serving"):md.index("## Candidates")]
    assert f"**{SENTENCE}. Goodput" in section
    assert "Goodput at that rate: 405 requests/s" in section
    assert "Load: open-loop Poisson arrivals, 1 sample per request, model name slowable, 16 cores available." in section
    # at 50/80/100% of the max rate
    assert "| 50% | 206 | 206 | 4.5 | 5 | 15.5 | 14-17.2 | 1000 | 1 | 1 | 0 |" in section
    assert "| 100% | 412 | 411 | 5 | 10 | 31 | 28-34.5 |" in section
    # what the interval is and is not (30-s windows read up to 3.2x a 6-s window's p99: bench_serving_windows.py)
    assert "Each row is one window of a few seconds; its p99 interval is for that window's requests (a block " \
           "bootstrap), not for a longer one" in section
    # the naive baselines side by side, with their max rates and the ratio
    # each rate as it held: the pick's and the naive's for 10 s, the batch loop's lowered below a failed hold
    assert "| recommended | 2 instances x 1 thread, max batch 8, max delay 2 ms | 412 (held 10 s) |" in section
    assert "| naive: one instance, no batching | 1 instance x 1 thread, max batch 1, max delay 0 ms | 120 (held " \
           "10 s) | 114-126 | 3.43x |" in section
    assert "| batch loop: the search's batch size in a loop | 1 instance x 2 threads, max batch 8, max delay 10 ms " \
           "| 240 (a hold failed above it) | 228-252 | 1.72x |" in section
    # every configuration tried: role, predicted and measured max rate, the pruned one's reason
    assert "| search ★ | eager+threads=1 | 2 x 1 | 8 | 2 | 430 | 412 | 391-433 | recommended |" in section
    assert "| pruned | eager+threads=1 | 4 x 2 | 32 | 10 | 600 | — | — | predicted p99 62 ms at its max rate, " \
           "over the SLO |" in section
    assert "- max_batch: batching up to 8 samples per call (2.10x)" in section
    assert "- threads: a second thread per instance was worth less than a second instance" in section
    assert "Server: asyncio (autotune serve.py). Start it with:\n\n```bash\n./run.sh serve --port 8000\n```" \
        in section
    assert "for other servers: triton/slowable/config.pbtxt, torchserve/config.properties, ray/serve_deployment.py" \
        in section
    assert ("The serving stage took 95.0 s, 12% of the run (calibration 20.0 s, load 70.0 s; fresh servers' warm-up "
            "8.00 s, the baselines' holds 20.0 s, the pick's hold 10.0 s and its curve 12.0 s of it).") in section
    assert "![serving](plots/serving.png)" in section
    plots = md[md.index("## Plots"):md.index("## Candidates")] if "## Plots" in md else ""
    assert "serving.png" not in plots  # shown with its section, not among the other plots


def test_the_fractions_intro_gives_the_windows_length(served: dict[str, Any]) -> None:
    from autotune.report.serving import serving_at_intro

    for point, seconds in zip(served["serving"]["at_fraction"], (6.0, 6.0, 5.7, 10.0), strict=True):
        point["seconds"] = seconds
    assert "Each row is one window of 6-10 s;" in serving_at_intro(served)
    for point in served["serving"]["at_fraction"]:
        point["seconds"] = 6.0
    assert "Each row is one window of 6 s;" in serving_at_intro(served)


def test_html_has_the_same_figures_and_embeds_the_plot(served: dict[str, Any], tmp_path: Path) -> None:
    page = write_reports(served, tmp_path)["html"].read_text(encoding="utf-8")
    text = html.unescape(page)
    section = text[text.index(">Serving</h2>"):text.index(">Candidates</h2>")]
    assert f"<strong>{SENTENCE}. Goodput" in section
    for figure in ("3.43x", "1.72x", "114-126", "28-34.5", "predicted p99 62 ms at its max rate", "recommended",
                   "./run.sh serve --port 8000", "12% of the run", "batching up to 8 samples per call (2.10x)"):
        assert figure in section, figure
    assert re.search(r'<img alt="serving plot" src="data:image/png;base64,', section)
    images = re.findall(r'src="data:image/png;base64,', page)
    assert len(images) == len(list((tmp_path / "plots").glob("*.png")))


def test_console_has_one_serving_line(served: dict[str, Any]) -> None:
    text = console_table(served)
    lines = [line for line in text.splitlines() if line.startswith("Serving:")]
    assert len(lines) == 1
    joined = " ".join(text[text.index("Serving:"):].split())
    assert joined.startswith(f"Serving: {SENTENCE}.")
    assert "3.43x the naive server (120 requests/s, held 10 s)." in joined
    assert all(len(line) <= 100 for line in text[text.index("Serving:"):].splitlines())


@pytest.mark.parametrize(("section", "expected"), [
    ({"status": "failed", "reason": "the server did not answer ready in 60 s"},
     "Serving failed: the server did not answer ready in 60 s."),
    ({"status": "skipped", "reason": "the artifact failed: no model to serve"},
     "Serving skipped: the artifact failed: no model to serve."),
    ({"status": "ok", "reason": "no configuration kept p99 within 1 ms at any rate", "slo_ms": 1.0,
      "percentile": "p99", "recommendation": None},
     "Serving undecided: no configuration kept p99 within 1 ms at any rate (SLO p99 <= 1 ms)."),
])
def test_failed_skipped_and_undecided_say_why(base: dict[str, Any], section: dict[str, Any], expected: str) -> None:
    doc = {**base, "serving": section}
    validate_report(doc)
    md = html.unescape(render_markdown(doc))
    assert f"## Serving\n\n{expected}\n" in md
    assert expected in html.unescape(render_html(doc, plots={}))
    assert " ".join(console_table(doc)[console_table(doc).index("Serving"):].split()).startswith(expected)
    assert serving_sentence(doc) is None


def test_a_rate_target_is_served_by_the_fewest_cores(served: dict[str, Any]) -> None:
    served["serving"]["rate_target"] = 300.0
    assert serving_sentence(served) == (
        "Serve 300 requests/s with 2 instances x 1 thread, max batch 8, max delay 2 ms (2 cores of 16), the fewest "
        "cores within p99 <= 40 ms: it sustains up to 412 requests/s (CI 398-425); p50 6.1 ms, p99 31 ms at that "
        "rate. Goodput at that rate: 405 requests/s answered within the SLO.")


def test_a_max_rate_bounded_by_too_few_requests_is_called_a_floor(served: dict[str, Any]) -> None:
    served["serving"]["recommendation"].update(floor=True, bound_requests=45)
    validate_report(served)
    sentence = serving_sentence(served) or ""
    assert "at least 412 requests/s (the failure above it came from points of 45 requests, too few to resolve the " \
           "percentile: see the notes)" in sentence
    served["serving"]["recommendation"]["floor"] = False
    assert "412 requests/s (CI 398-425)" in (serving_sentence(served) or "")


def test_a_rate_never_held_says_so_where_the_rate_is(served: dict[str, Any]) -> None:
    """LayoutLM's pick (session 45) was never held, and its sentence read like a held one's, the "not held" only in
    the notes; tritonclient then saw p99 57 ms at 90% of its rate on a 40-ms SLO. A report without the field
    (written before holds) says nothing of it."""
    assert "not held" not in (serving_sentence(served) or "")
    served["serving"]["recommendation"]["held_s"] = None
    assert "412 requests/s (CI 398-425; not held on a fresh server: see the notes) within p99 <= 40 ms" in (
        serving_sentence(served) or "")
    served["serving"]["rate_target"] = 300.0  # the rate-target sentence, the same words
    assert "it sustains up to 412 requests/s (CI 398-425; not held on a fresh server: see the notes); p50" in (
        serving_sentence(served) or "")
    served["serving"]["recommendation"]["max_rate_ci"] = None
    assert "up to 412 requests/s (not held on a fresh server: see the notes); p50" in (serving_sentence(served) or "")
    del served["serving"]["recommendation"]["held_s"]
    assert "not held" not in (serving_sentence(served) or "")


def test_an_interrupted_stage_and_another_variant_are_said(served: dict[str, Any]) -> None:
    served["serving"]["interrupted"] = True
    served["serving"]["recommendation"].update(variant="frozen", environment="jemalloc")
    sentence = serving_sentence(served) or ""
    assert "(process environment jemalloc; variant frozen, not the search's pick eager+threads=1)" in sentence
    assert sentence.endswith("this is the best configuration measured before it stopped.")


def test_the_plot_needs_loaded_points(served: dict[str, Any]) -> None:
    assert render_plots(served)[SERVING_PLOT].startswith(PNG_MAGIC)
    for config in served["serving"]["configs"]:
        config["points"] = []
    served["serving"]["baselines"] = {"naive": None, "batch_loop": None}
    assert SERVING_PLOT not in render_plots(served)
    assert SERVING_PLOT not in PLOT_NAMES  # the Plots section's list stays as it was


def test_the_batches_the_server_formed_at_the_rate_are_said(served: dict[str, Any]) -> None:
    """The server's own account of the pick's point at its max rate (its /stats: calls, mean rows, median call): a
    max batch of 8 means little unless the report says what the batcher formed at the rate it gives."""
    full = next(p for p in served["serving"]["at_fraction"] if p["fraction"] == 1.0)
    assert "calls at that rate" not in (serving_sentence(served) or "")  # a report before session 47: nothing said
    full.update(calls=180, rows_per_call=2.6, call_p50_ms=3.14)
    validate_report(served)
    assert ("The server's calls at that rate held 2.6 requests on average (up to 8), each 3.14 ms at the median."
            in (serving_sentence(served) or ""))
    served["serving"]["recommendation"]["max_batch"] = 1  # no batching: nothing to say
    assert "calls at that rate" not in (serving_sentence(served) or "")


def test_a_points_calls_come_from_the_servers_account() -> None:
    from autotune.serving.rate_search import LoadPoint
    from autotune.serving.search import with_calls

    point = LoadPoint(rate=100.0, seconds=10.0, sent=1000, ok=1000, failed=0, timed_out=0, dropped=0,
                      achieved_rate=100.0, p50_ms=3.0, p90_ms=4.0, p99_ms=6.0, pct_ms=6.0, pct_ci_ms=(5.5, 6.5),
                      p99_ci_ms=(5.5, 6.5), good=1000, send_lag_p99_ms=1.0, passed=True, clear=True)
    assert with_calls(point, []) is point
    got = with_calls(point, [(1, 0.002), (3, 0.004), (2, 0.003)])
    assert (got.calls, got.rows_per_call, got.call_p50_ms) == (3, 2.0, 3.0)
    assert {"calls", "rows_per_call", "call_p50_ms"} <= set(got.to_dict())
