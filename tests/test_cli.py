"""The CLI end to end, in real subprocesses: exit codes, clear errors, a run with a crashing variant."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.candidate import pessimistic_score
from tests.support import ROOT, SHARED_TRACES, TINY, run_cli, tiny

pytestmark = pytest.mark.worker  # starts worker or CLI processes: not in `make test-fast`

def assert_input_error(code: int, err: str, *patterns: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    for p in patterns:
        assert p in err, err


def test_missing_recipe_file(tmp_path: Path) -> None:
    code, _, err = run_cli("run", str(tmp_path / "missing.toml"))
    assert_input_error(code, err, "missing.toml: recipe file not found")


def test_unknown_key_suggests(write_recipe) -> None:
    path = write_recipe(TINY.format(kwargs="", variants='["eager"]').replace("batch_sizes", "batchsizes"))
    code, _, err = run_cli("run", str(path))
    assert_input_error(code, err, "recipe.toml", "search.batchsizes", "did you mean 'search.batch_sizes'")


def test_bad_flag_value_is_exit_2(write_recipe) -> None:
    code, _, err = run_cli("measure", str(tiny(write_recipe)), "--variant", "eager", "--batch-size", "0")
    assert_input_error(code, err, "--batch-size", "positive integer")


@pytest.mark.parametrize(
    ("factory", "patterns"),
    [
        ("@MODELS@/broken.py:factory_raises", ["raised", "RuntimeError: this factory always fails"]),
        ("@MODELS@/broken.py:not_a_module", ["returned int, expected a torch.nn.Module"]),
    ],
)
def test_factory_errors(write_recipe, tmp_path: Path, factory: str, patterns: list[str]) -> None:
    """A factory that fails once called, through the CLI: the worker's error reaches the user as exit 2."""
    text = TINY.format(kwargs="", variants='["eager"]').replace("@MODELS@/broken.py:tiny", factory)
    out = tmp_path / "out"
    code, _, err = run_cli("run", str(write_recipe(text)), "--out", str(out))
    assert_input_error(code, err, *patterns)
    assert not out.exists()  # bad input leaves no output directory or study behind


@pytest.mark.parametrize(
    ("factory", "pattern"),
    [
        ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
        ("@MODELS@/broken.py:missing", "has no attribute 'missing'"),
        ("@MODELS@/nothere.py:make", "nothere.py' not found"),
    ],
)
def test_a_factory_that_cannot_be_resolved_names_the_field(write_recipe, factory: str, pattern: str) -> None:
    """The factory's resolution, in this process (the two CLI cases above carry a worker's error to exit 2 the
    same way; a process each for these three cost 10 s of ``make test``)."""
    from autotune.core.recipe.parse import load_recipe
    from autotune.errors import InputError
    from autotune.worker.factory import resolve_factory

    path = write_recipe(TINY.format(kwargs="", variants='["eager"]').replace("@MODELS@/broken.py:tiny", factory))
    recipe = load_recipe(path)
    with pytest.raises(InputError, match=re.escape(pattern)) as caught:
        resolve_factory(recipe.model, recipe_path=recipe.path)
    assert str(caught.value).startswith(f"{recipe.path}: field 'model.factory'")


def test_input_shape_rejected_names_the_input(write_recipe) -> None:
    path = tiny(write_recipe).read_text().replace("shape = [3, 8, 8]", "shape = [5, 8, 8]")
    code, _, err = run_cli("run", str(write_recipe(path, "bad_shape.toml")))
    assert_input_error(code, err, "field 'inputs'", "'x' (2, 5, 8, 8)", "The model said: RuntimeError")


def test_a_model_that_cannot_batch_is_told_to_search_batch_one_and_is_checked_there(write_recipe) -> None:
    """Validation runs the model at batch 2; a model that only takes one sample (a transformers GPT-2 classifier
    without a pad token) gets the model's words and, since it runs at batch 1, how to tune it; a recipe that
    searches batch 1 only is checked at batch 1, so that advice works."""
    import torch

    from autotune.core.recipe import load_recipe
    from autotune.worker.model import build_model, check_forward

    text = TINY.format(kwargs='kwargs = { crash = "single" }', variants='["eager"]')
    code, _, err = run_cli("run", str(write_recipe(text, "single.toml")))
    assert_input_error(code, err, "field 'inputs'", "Cannot handle batch sizes > 1",
                       "At batch 1 the model runs", "batch_sizes = [1]")
    recipe = load_recipe(write_recipe(text.replace("batch_sizes = [1, 4]", "batch_sizes = [1]"), "one.toml"))
    info = check_forward(recipe, build_model(recipe, device=torch.device("cpu")), device=torch.device("cpu"))
    assert info.input_ndims == (4,)


def test_unknown_variant_and_precision(write_recipe) -> None:
    code, _, err = run_cli("run", str(tiny(write_recipe, variants='["eager", "scirpt"]')))
    assert_input_error(code, err, "scirpt", "script")
    path = write_recipe(TINY.format(kwargs="", variants='["eager"]').replace(
        "batch_sizes = [1, 4]", 'batch_sizes = [1, 4]\nprecisions = ["fp8"]'), "prec.toml")
    code, _, err = run_cli("run", str(path))
    assert_input_error(code, err, "fp8")


def test_cuda_on_a_machine_without_one(write_recipe) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run_cli("run", str(tiny(write_recipe)), "--device", "cuda")
    assert_input_error(code, err, "'cuda' requested but this machine has no usable CUDA device")


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_run_with_a_crashing_variant_recommends_the_best_other(write_recipe, tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = tiny(write_recipe, kwargs='kwargs = { crash = "trace" }', variants='["eager", "trace", "frozen"]')
    code, stdout, err = run_cli("run", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    assert doc["schema"] == 2
    statuses = {(c["variant"], c["batch_size"]): c["status"] for c in doc["candidates"]}
    assert statuses[("trace", 1)] == "failed" or statuses[("trace", 4)] == "failed"
    trace_rows = [c for c in doc["candidates"] if c["variant"] == "trace"]
    assert any("exited with code 7" in (c["reason"] or "") for c in trace_rows), trace_rows
    rec = doc["recommendation"]
    assert rec["variant"] in ("eager", "frozen") and rec["status"] == "ok"
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    if rec["decided_by"] == "showdown":  # the finalists' interleaved rounds decide
        assert f"{rec['variant']}@{rec['batch_size']}" == doc["showdown"]["verdict"]["pick"]
        assert all(not k.startswith("trace@") for k in doc["showdown"]["finalists"])
    else:
        assert rec["trial"] == min(ok, key=lambda c: pessimistic_score(c, objective="throughput"))["trial"]
    for name in ("report.json", "report.md", "report.html", "study.db"):
        assert (out / name).exists()
    assert "Recommend" in stdout


@pytest.mark.slow  # its kind stays in make test (issue 31): test_interrupt's killed-at-measurement run, then its resume
def test_resume_does_not_remeasure(write_recipe, tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = tiny(write_recipe, variants='["eager"]')
    assert run_cli("run", str(path), "--out", str(out), "--no-progress")[0] == 0
    first = json.loads((out / "report.json").read_text())
    assert run_cli("run", str(path), "--out", str(out), "--no-progress")[0] == 0
    second = json.loads((out / "report.json").read_text())
    assert second["search"]["measured_this_run"] == 0
    assert [c["throughput"] for c in second["candidates"]] == [c["throughput"] for c in first["candidates"]]
    # nor is the finished showdown run again (issue 32): the same rounds, marked reused, and a note says so
    assert first["showdown"]["verdict"] and second["showdown"]["reused"] is True
    assert second["showdown"]["seconds_per_call"] == first["showdown"]["seconds_per_call"]
    assert any("nothing is measured twice" in n for n in second["notes"])
    # nor is its artifact built and profiled again: the same configuration, recipe, autotune and machine
    assert second["artifact"]["reused"] is True and second["profile"] == first["profile"]
    assert second["artifact"]["files"] == first["artifact"]["files"]
    assert any("are the last run's on this --out" in n for n in second["notes"])
    code, stdout, _ = run_cli("report", str(out))
    assert code == 0 and "eager" in stdout


def test_interrupt_keeps_what_was_measured(write_recipe, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # every candidate runs its whole 3 s budget (a CI target it cannot reach), so the run is surely still
    # searching when the interrupt comes: the detector now stops a tiny model on precision in well under 1 s
    text = TINY.format(kwargs="", variants='["eager", "frozen"]').replace("max_seconds = 0.4", "max_seconds = 3")
    text = re.sub(r"ci_target = [0-9.]+", "ci_target = 0.00001", text)
    path = write_recipe(text.replace("batch_sizes = [1, 4]", "batch_sizes = [1, 2, 4, 8]"))
    # a shell that started us in the background (`make test &`, nohup) leaves SIGINT ignored, and Python keeps
    # an ignored SIGINT ignored: give the child the default disposition, as a terminal's Ctrl-C would find it
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(path), "--out", str(out),
                             "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    db = out / "study.db"
    while time.monotonic() < deadline:  # wait until at least one candidate is stored
        time.sleep(1.0)
        if db.exists() and _complete_trials(db) >= 1:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert _complete_trials(db) >= 1
    doc = json.loads((out / "report.json").read_text())
    assert doc["search"]["stopped_by"] == "interrupted"
    assert any(c["status"] == "ok" for c in doc["candidates"])


def _complete_trials(db: Path) -> int:
    import sqlite3

    try:
        with sqlite3.connect(db) as con:
            return con.execute("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_warmup_json_contract() -> None:
    files = sorted(SHARED_TRACES.glob("*.csv"))[:3]
    if not files:
        pytest.skip("shared warmup traces not present")
    code, stdout, err = run_cli("warmup", *map(str, files), "--json", "--online")
    assert code == 0, err
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert [line["file"] for line in lines] == [str(f) for f in files]
    for obj in lines:
        assert obj["classification"] in ("flat", "warmup", "slowdown", "no_steady_state")
        for key in ("steady_start", "steady_mean", "steady_median", "ci", "changepoints", "consumed"):
            assert key in obj


def test_warmup_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("0.1\nabc\n0.2\n")
    code, _, err = run_cli("warmup", str(bad))
    assert_input_error(code, err, "bad.csv")


@pytest.mark.slow  # two runs with fresh-process confirmations (~50 s); tests/test_boundary_progress.py runs "auto"
def test_run_with_auto_batch_sizes_stays_within_the_boundary(write_recipe, tmp_path: Path) -> None:
    out = tmp_path / "out"
    text = TINY.format(kwargs="", variants='["eager"]').replace("batch_sizes = [1, 4]", 'batch_sizes = "auto"')
    # caps far out of the way: a busy machine must not end the search before the upper bound this test is about
    path = write_recipe(text + "[batch]\nmax_batch_size = 40\nheadroom = 0.25\nmax_seconds = 900\n"
                        "max_probe_seconds = 120\n")
    code, _, err = run_cli("run", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err
    assert "  eager: search probe b=1 fits (" in err  # one line per probe, without a progress bar too
    doc = json.loads((out / "report.json").read_text())
    boundary = doc["batch_boundary"]["eager"]
    assert boundary["max_batch_size"] == 40 and boundary["hit_upper_bound"]
    assert boundary["usable_max_batch_size"] <= 40
    measured = {c["batch_size"] for c in doc["candidates"] if c["status"] == "ok"}
    assert measured and max(measured) <= boundary["usable_max_batch_size"]
    assert boundary["probes"] and all("peak_memory_bytes" in p for p in boundary["probes"])
    assert "reused_from_study" not in boundary
    # resumed: the study already knows the boundary, so nothing is probed or measured again
    code, _, err = run_cli("run", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err
    again = json.loads((out / "report.json").read_text())
    assert again["batch_boundary"]["eager"]["reused_from_study"] is True
    assert again["batch_boundary"]["eager"]["probes"] == boundary["probes"]
    assert again["search"]["measured_this_run"] == 0
    code, stdout, err = run_cli("batch", str(path), "--variant", "eager")
    assert code == 0, err
    assert "max batch size 40" in stdout and "confirmed by probes at b and b + granularity" in stdout


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
def test_run_rejects_the_trace_trap_and_never_recommends_it(write_recipe, tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = write_recipe("""
device = "cpu"
[model]
factory = "@MODELS@/broken.py:data_dependent"
[[inputs]]
name = "x"
shape = [16]
[search]
variants = ["eager", "trace", "script"]
batch_sizes = [4, 16]
time_budget_s = 60
[measure]
max_seconds = 0.3
rounds = 2
round_seconds = 0.1
processes = 1
""")  # a short showdown in one process a finalist: the test is about the gate, not the verdict (54 s -> ~20 s)
    code, _, err = run_cli("run", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    trace = [c for c in doc["candidates"] if c["variant"] == "trace"]
    assert trace and all(c["status"] in ("rejected", "pruned") for c in trace), trace
    rejected = [c for c in trace if c["status"] == "rejected"]
    assert rejected and rejected[0]["correctness"]["passed"] is False
    assert rejected[0]["correctness"]["min_cosine"] < 0  # the frozen branch flips the sign
    assert doc["recommendation"]["variant"] in ("eager", "script")


def test_measure_one_configuration(write_recipe) -> None:
    path = tiny(write_recipe)
    code, stdout, err = run_cli("measure", str(path), "--variant", "frozen", "--batch-size", "4", "--json")
    assert code == 0, err
    row = json.loads(stdout)
    assert row["status"] == "ok" and row["batch_size"] == 4 and row["variant"] == "frozen"
    assert row["throughput"] > 0 and row["classification"] in ("flat", "warmup", "slowdown", "no_steady_state")
    assert row["correctness"]["passed"] is True
    code, _, err = run_cli("measure", str(path), "--variant", "frozn", "--batch-size", "4")
    assert_input_error(code, err, "frozn")
