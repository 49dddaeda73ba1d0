"""Flag values that used to give a traceback or a misleading message (issue 32): each is exit 2 with what is
wrong, said by the CLI's ``main`` before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main


@pytest.mark.parametrize(("argv", "said"), [
    (["measure", "r.toml", "--variant", "eager", "--batch-size", str(10**23)], "up to 2,147,483,647"),
    (["compare", "a", "b", "--threshold", "-5%"], "--threshold: must be between 0 and 1"),
])
def test_a_bad_flag_value_is_exit_2_naming_the_flag(argv: list[str], said: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and said in capsys.readouterr().err


def test_an_in_memory_sqlite_storage_is_refused_by_name() -> None:
    from autotune.errors import InputError
    from autotune.study.storage import make_storage

    for url in ("sqlite:///", "sqlite://", "sqlite:///:memory:"):
        with pytest.raises(InputError, match=r"names no file \(SQLite in memory"):
            make_storage(url)


def test_a_file_sqlite_storage_still_opens(tmp_path: Path) -> None:
    from autotune.study.storage import make_storage

    make_storage(f"sqlite:///{tmp_path / 'study.db'}")
    assert (tmp_path / "study.db").exists()


def test_compare_and_report_print_no_terminal_control_from_a_report(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A report.json is untrusted: an escape sequence or a carriage return in a stored name must not reach the
    terminal (it could clear the screen or rewrite a CI log's line)."""
    import json

    from tests.support import ROOT

    doc = json.loads((ROOT / "tests" / "data" / "compare-base-report-v2.json").read_text())
    evil = "\x1b[2J\x1b]0;title\x07\r\x9b"
    for c in doc["candidates"]:
        c["variant"] += evil
    doc["recommendation"]["variant"] += evil
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps(doc))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr()
    assert "eager+threads=1?" in out.out
    for text in (out.out, out.err):
        assert not any(ch in text for ch in "\x1b\r\x07\x9b")


@pytest.mark.parametrize(("field", "value", "said"), [
    ("processes", "three", "report.showdown.processes: expected a positive integer"),
    ("processes_used", [2], "report.showdown.processes_used"),
    ("round_process", [[0], 1], "report.showdown.round_process[0]"),
    ("seconds_per_call", {"eager@1": ["slow"]}, "report.showdown.seconds_per_call"),
    ("seconds_per_call", ["x"], "report.showdown.seconds_per_call"),
])
def test_a_showdown_field_of_the_wrong_kind_is_exit_2_naming_it(tmp_path: Path, field: str, value: object, said: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 32: these gave tracebacks in `compare` (int() of a list, float() of a string)."""
    import json

    from tests.support import ROOT

    doc = json.loads((ROOT / "tests" / "data" / "compare-base-report-v2.json").read_text())
    doc["showdown"][field] = value
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "report.json").write_text(json.dumps(doc))
    good = ROOT / "tests" / "data" / "compare-base-report-v2.json"
    assert main(["compare", str(good), str(tmp_path / "a")]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("edit", "said"), [
    (lambda c: c.update(throughput=0), "candidates[0].throughput: a candidate with status ok needs a positive number"),
    (lambda c: c.update(throughput=-5), "needs a positive number, got -5"),
    (lambda c: c.update(throughput_ci=[50000.0, 40000.0]), "throughput_ci: expected [low, high] with 0 <= low <= high"),
    (lambda c: c.update(throughput_ci=[-1.0, 40000.0]), "throughput_ci: expected [low, high]"),
    (lambda c: c["measurement"]["analysis"].update(steady_start=-5), "steady_start: expected an integer >= 0"),
])
def test_a_corrupt_candidate_fails_the_gate_with_exit_2(tmp_path: Path, edit: Any, said: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 32: these passed `compare` (exit 0): a row with throughput 0 dropped out as "measured in A only", a
    negative steady start moved the ratio, an inverted CI was taken as it was."""
    import json

    from tests.support import ROOT

    good = ROOT / "tests" / "data" / "compare-base-report-v2.json"
    doc = json.loads(good.read_text())
    edit(doc["candidates"][0])
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "report.json").write_text(json.dumps(doc))
    assert main(["compare", str(good), str(tmp_path / "b")]) == 2
    assert said in capsys.readouterr().err


def test_a_trace_of_too_many_values_is_refused_at_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.traces
    from autotune.errors import InputError

    monkeypatch.setattr(autotune.traces, "MAX_TRACE_VALUES", 10)
    path = tmp_path / "t.txt"
    path.write_text("seconds\n" + "0.001\n" * 10)
    assert len(autotune.traces.load_trace(path)) == 10
    path.write_text("seconds\n" + "0.001\n" * 11)
    with pytest.raises(InputError, match=r"t\.txt, line 12: more than 10 values"):
        autotune.traces.load_trace(path)


def test_an_input_shape_too_large_for_any_machine_names_the_field(tmp_path: Path) -> None:
    """It was blamed on model.factory after a worker start (torch: "Storage size calculation overflowed")."""
    from autotune.core.recipe import load_recipe
    from autotune.errors import RecipeError

    path = tmp_path / "r.toml"
    path.write_text('name = "x"\ndevice = "cpu"\n[model]\nfactory = "torchvision.models:resnet18"\n'
                    f'[[inputs]]\nname = "x"\nshape = [3, {2**63 - 1}, 8]\n')
    with pytest.raises(RecipeError, match=r"field 'inputs\[0\]\.shape': \[3, 9223372036854775807, 8\] is "):
        load_recipe(path)
