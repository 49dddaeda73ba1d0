"""The artifact check on a shared machine: a round another process disturbed is found by the plain process itself,
named, replaced when time allows and left out of the headline (session 40: a demo's check read 260, 407, 410 and
320 samples/s, its median 363 where a plain process a minute later ran 430)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.artifact_check import check_artifact, compared_rounds, extra_rounds
from autotune.report.schema import ARTIFACT_CHECK_FIELDS, _record
from autotune.report.shipped import shipped_sentence

#: A loader whose first load() starts a spinning process that lives as long as that plain process does (it exits
#: when its parent is gone): the first round has a busy neighbour, the later ones have none of this test's making.
SPINNING_LOADER = '''
import os, pathlib, subprocess, sys

SPIN = ("import os, time\\nparent = os.getppid()\\nend = time.time() + 60\\n"
        "while os.getppid() == parent and time.time() < end:\\n    pass\\n")

def load():
    marker = pathlib.Path(__file__).with_name("spun")
    if not marker.exists():
        marker.write_text("1")
        subprocess.Popen([sys.executable, "-c", SPIN])
    import torch
    lin = torch.nn.Linear(64, 64)
    return lambda x: lin(x)

def make_inputs():
    import torch
    return (torch.randn(8, 64),)
'''


def test_the_headline_is_the_median_of_the_undisturbed_rounds() -> None:
    assert compared_rounds([True, False, False, True]) == [1, 2]
    assert compared_rounds([True, False, True]) == [0, 1, 2]  # one quiet round gives no interval: all are kept
    assert compared_rounds([]) == []
    assert extra_rounds(1) == 1 and extra_rounds(2) == 1 and extra_rounds(5) == 2 and extra_rounds(10) == 5


def test_the_sentence_says_which_rounds_were_disturbed_by_whom_and_whether_they_count() -> None:
    base = {"status": "ok", "rounds": 6, "throughputs": [260.0, 407.0, 410.0, 320.0, 405.0, 409.0],
            "throughput": 408.0, "ci": [401.0, 412.0], "p50_ms": 39.0, "p99_ms": 45.0, "tolerance": 0.05,
            "disturbed": [True, False, False, True, False, False], "compared": 4,
            "foreign_cores": [0.9, 0.01, 0.0, 0.6, 0.02, 0.01],
            "consumers": [{"name": "kcompactd0", "pid": 41, "round": 0, "side": "plain", "cores": 0.85}]}
    text = shipped_sentence({"artifact_check": base})
    assert text is not None
    assert "median of the 4 undisturbed of 6 fresh plain processes" in text
    assert "2 of 6 rounds disturbed, up to 0.90 cores used by other processes; kcompactd0 (pid 41) used 0.85 " \
           "cores, left out" in text
    busy = shipped_sentence({"artifact_check": {**base, "compared": 6, "disturbed": [True] * 5 + [False]}})
    assert busy is not None and "median of 6 fresh" in busy and "5 of 6 rounds disturbed" in busy
    assert "too few quiet rounds to leave them out, so the figure is a busy machine's" in busy
    quiet = shipped_sentence({"artifact_check": {**base, "disturbed": [False] * 6, "compared": 6}})
    assert quiet is not None and "disturbed" not in quiet and "median of 6 fresh" in quiet


@pytest.mark.worker
def test_a_plain_process_beside_a_spinning_neighbour_marks_its_round_and_names_it(tmp_path: Path) -> None:
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here: the kernel cannot say what else ran")
    (tmp_path / "artifact").mkdir()
    (tmp_path / "artifact" / "load.py").write_text(SPINNING_LOADER)
    doc = {"recipe": {"device": "cpu"}, "artifact": {"status": "ok", "kind": "torchscript"},
           "recommendation": {"variant": "eager", "batch_size": 8, "throughput": 1000.0}}
    section = check_artifact(doc, tmp_path, rounds=1, seconds=0.5)
    assert section is not None and section["status"] == "ok", section
    # the first round had the spinner beside it: at least a tenth of a core (a whole one on a quiet machine, about
    # half beside the suite's other process); the kernel names it by its command, python
    assert section["disturbed"][0] and section["foreign_cores"][0] > 0.1
    assert any(c["round"] == 0 and c["side"] == "plain" and c["name"].startswith("python")
               for c in section["consumers"]), section["consumers"]
    # a disturbed round is replaced, by as many more as allowed (one here)
    assert section["rounds"] == 1 + extra_rounds(1)
    assert len(section["throughputs"]) == len(section["disturbed"]) == len(section["foreign_cores"])
    assert section["compared"] == len(compared_rounds(section["disturbed"]))
    check_fields = _record(ARTIFACT_CHECK_FIELDS)
    check_fields(section, "report.artifact_check")  # the fields the report's schema knows, with their kinds
