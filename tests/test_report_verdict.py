"""The report says what the showdown decided, and nothing more: a replayed undecided showdown, and a busy one.

Pure: the showdown is replayed from stored rounds (:func:`autotune.showdown.paired_verdict` on them), the
report is rendered from the document; the real runs are in tests/test_showdown.py and tests/test_report.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from autotune.report import console_table, normalise_report, render_html, render_markdown
from autotune.report.analysis import rank
from autotune.showdown import Contender, contender_from, paired_verdict, recommendation, verdict_text
from tests.test_report import make_document

#: Phrases that claim a decision.
CLAIMS = ("wins", "do not overlap", "Tie within", "shows it more than", "Its CI lies below")


def _with_showdown(*, busy: bool = False) -> dict[str, Any]:
    """The sample report with a showdown over its two best feasible rows whose CI straddles the margin."""
    doc = make_document()
    ok = [c for c in rank(doc) if c["status"] == "ok" and c["feasible"]][:2]
    rng = np.random.default_rng(3)
    rounds = 6
    procs = tuple(r % 3 for r in range(rounds))
    base = [1.0 / float(c["throughput"]) * float(c["batch_size"]) for c in ok]
    # the second: 2% slower on the median, its three processes 4% apart: the CI straddles 0.98
    secs = [base[0] * (1.0 + 0.002 * rng.standard_normal(rounds)),
            base[0] * 1.02 * np.array([1.0, 1.04, 0.97] * 2) * (1.0 + 0.002 * rng.standard_normal(rounds))]
    contenders: list[Contender] = [contender_from(c, s, processes=procs) for c, s in zip(ok, secs, strict=True)]
    verdict = paired_verdict(contenders, margin=0.02)
    showdown: dict[str, Any] = {
        "rounds": rounds, "round_seconds": 0.5, "margin": 0.02, "objective": "throughput", "processes": 3,
        "processes_used": 3, "round_process": list(procs), "finalists": [x.key for x in contenders],
        "seconds_per_call": {x.key: list(x.seconds_per_call) for x in contenders},
        "disturbed_rounds": list(range(8)) if busy else [], "rounds_run": 12 if busy else rounds,
        "burn_in_rounds": 0, "rounds_compared": list(range(rounds)), "dropped": {}, "verdict": verdict.to_dict()}
    showdown["verdict"]["text"] = verdict_text(showdown)
    doc["showdown"] = showdown
    doc["recommendation"] = recommendation(doc["candidates"], showdown, doc["recommendation"])
    return doc


def _texts(doc: dict[str, Any]) -> dict[str, str]:
    return {"console": console_table(doc), "md": render_markdown(doc),
            "html": re.sub(r"<[^>]+>", " ", render_html(doc)),
            "json": str(json.loads(json.dumps(normalise_report(doc)))["showdown"]["verdict"]["text"])}


def test_an_undecided_showdown_is_reported_undecided_everywhere() -> None:
    doc = _with_showdown()
    verdict = doc["showdown"]["verdict"]
    other = next(s for s in verdict["standings"] if s["key"] != verdict["leader"])
    assert other["ratio_ci"][0] < 0.98 <= other["ratio_ci"][1] and verdict["undecided"] == [other["key"]]
    for where, text in _texts(doc).items():
        flat = " ".join(text.split())
        assert "Undecided" in flat or "undecided" in flat, where
        assert other["key"] in flat, where
        for claim in CLAIMS:
            assert claim not in flat, (where, claim)
    # how the pick was made is said
    assert "picked by" in verdict["text"]


def test_the_candidates_table_puts_the_showdown_first_and_agrees_with_the_recommendation() -> None:
    doc = _with_showdown()
    rec = doc["recommendation"]
    first = rank(doc)[0]
    assert (first["variant"], first["batch_size"]) == (rec["variant"], rec["batch_size"])
    console = console_table(doc)
    table = console.splitlines()
    header = next(i for i, line in enumerate(table) if line.lstrip().startswith("#"))
    assert "showdown x leader" in table[header] and "screen" in table[header]
    assert table[header + 2].split()[0] == "1*"  # the first row is the recommendation
    md = render_markdown(doc)
    assert "showdown vs leader (95% CI)" in md and "| showdown |" in md and "| screen |" in md


def test_a_busy_showdown_says_so_first() -> None:
    doc = _with_showdown(busy=True)
    console = " ".join(console_table(doc).split())
    assert console.startswith("Busy machine: 8 of 12 showdown rounds")
    assert doc["showdown"]["verdict"]["text"].startswith("Busy machine:")
    md = " ".join(render_markdown(doc).split())
    showdown_section = md[md.index("## Showdown"):]
    assert showdown_section.removeprefix("## Showdown ").startswith("Busy machine:")
