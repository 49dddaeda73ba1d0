"""Issue 20, "Trust" and "Inputs that still crash": each case of the issue, through the CLI's ``main`` in this process
(fast: nothing here starts a worker; the cases stop at argument validation, parsing or the stored study).

- report reads ``DIR/study.db`` or ``--storage``, never the storage report.json names;
- no value of the document becomes code in the generated scripts, and report.md holds no raw HTML from it;
- a password in ``--storage`` never reaches a message or report.json;
- the crashes: non-finite budgets, an ``--out`` that is a file, deep nesting, long or unreadable file names,
  non-UTF-8 files, extreme throughputs, extreme trace values, TOML dates in kwargs, seeds out of range, a
  ``compare`` with nothing in common.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.cli import main
from autotune.core.limits import MAX_DEPTH
from autotune.core.recipe import load_recipe, parse_recipe
from autotune.errors import InputError, RecipeError
from autotune.report.codegen import py_comment, py_doc, py_literal
from autotune.report.loader import loader_script
from autotune.report.markdown import render_markdown
from autotune.report.reproduce import reproduce_code, reproduce_script
from autotune.study.rows import row_attrs, state_for
from tests.support import MODELS, tiny_recipe
from tests.test_report import make_document

DATA = Path(__file__).resolve().parent / "data"
EXPLOIT = "eager\nimport os; os.system('touch /tmp/pwned')\n#"


def cli(*argv: str) -> tuple[int, str, str]:
    """``autotune ARGV`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()


def assert_exit_2(result: tuple[int, str, str], *patterns: str) -> str:
    code, _, err = result
    assert code == 2, err
    assert "Traceback" not in err
    for pattern in patterns:
        assert pattern in err, err
    return err


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(tiny_recipe().replace("@MODELS@", str(MODELS)))
    return path


# ------------------------------------------------------------------------------ 5. report reads its own study


def _run_dir(tmp_path: Path, name: str = "run") -> Path:
    """A run directory as ``autotune run`` leaves it: report.json and the study in DIR/study.db (the rows of
    test_report's document stored as the trials' rows), report.json naming that study by its absolute URL."""
    doc = make_document()
    out = tmp_path / name
    out.mkdir()
    url = f"sqlite:///{(out / 'study.db').resolve()}"
    doc["search"]["storage"] = url
    study = optuna.create_study(storage=url, study_name=doc["search"]["study_name"], direction="maximize")
    for row in doc["candidates"]:
        _add(study, row)
    (out / "report.json").write_text(json.dumps(doc))
    return out


def _add(study: optuna.Study, row: dict[str, Any]) -> None:
    state = state_for(row)
    values = [row["throughput"]] if state == optuna.trial.TrialState.COMPLETE else None
    study.add_trial(optuna.trial.create_trial(state=state, values=values, user_attrs=row_attrs(row),
                                              params={}, distributions={}))


def test_a_copied_run_directory_renders_its_own_study(tmp_path: Path) -> None:
    original = _run_dir(tmp_path)
    copied = tmp_path / "copy"
    shutil.copytree(original, copied)
    doc = json.loads((copied / "report.json").read_text())
    name = doc["search"]["study_name"]
    # one more trial in the copy's study only: the copy's report must show it
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{copied / 'study.db'}")
    extra = {**copy.deepcopy(doc["candidates"][0]), "trial": len(study.trials), "batch_size": 777}
    _add(study, extra)
    shutil.rmtree(original)  # report.json still names the original's study.db: it must not be created again

    code, _, err = cli("report", str(copied))
    assert code in (0, 1), err
    rendered = json.loads((copied / "report.json").read_text())
    assert 777 in {r["batch_size"] for r in rendered["candidates"]}
    assert rendered["search"]["trials"] == len(study.trials)
    assert not original.exists()


@pytest.mark.parametrize("storage", ["postgresql://someone@their-host.invalid:5432/db", "sqlite:///{elsewhere}"])
def test_a_report_naming_another_storage_is_refused_unless_storage_is_given(tmp_path: Path, storage: str) -> None:
    out = _run_dir(tmp_path)
    (out / "study.db").rename(tmp_path / "moved.db")
    elsewhere = tmp_path / "elsewhere" / "other.db"
    doc = json.loads((out / "report.json").read_text())
    doc["search"]["storage"] = storage.format(elsewhere=elsewhere)
    (out / "report.json").write_text(json.dumps(doc))
    before = (out / "report.json").read_text()

    assert_exit_2(cli("report", str(out)), "report.json: its study is stored in", "pass --storage URL")
    assert (out / "report.json").read_text() == before  # refused: nothing rewritten
    assert not elsewhere.parent.exists() and not (out / "study.db").exists()

    code, _, err = cli("report", str(out), "--storage", f"sqlite:///{tmp_path / 'moved.db'}")
    assert code in (0, 1), err
    assert json.loads((out / "report.json").read_text())["search"]["trials"] == len(make_document()["candidates"])


def test_a_dead_sqlite_path_never_gets_a_new_database(tmp_path: Path) -> None:
    out = _run_dir(tmp_path)
    dead = tmp_path / "gone" / "study.db"
    (tmp_path / "gone").mkdir()
    assert_exit_2(cli("report", str(out), "--storage", f"sqlite:///{dead}"), "no such database file")
    assert not dead.exists()

    # the directory's own study.db gone (report.json names it): re-rendered as stored, nothing created, noted once
    (out / "study.db").unlink()
    for _ in range(2):
        code, _, err = cli("report", str(out))
        assert code in (0, 1), err
    assert not (out / "study.db").exists()
    notes = json.loads((out / "report.json").read_text())["notes"]
    assert sum("not found" in n for n in notes) == 1


def test_worker_refuses_a_missing_sqlite_file(tmp_path: Path, recipe: Path) -> None:
    dead = tmp_path / "nothere.db"
    assert_exit_2(cli("worker", str(recipe), "--storage", f"sqlite:///{dead}"), "no such database file")
    assert not dead.exists()


# ------------------------------------------------------------------------------ 6. values never become code


def _calls(code: str) -> set[str]:
    """Dotted names of every call in ``code`` (it must compile)."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            found.add(ast.unparse(node.func))
    return found


def _hostile_document() -> dict[str, Any]:
    doc = make_document()
    doc["recipe"]["name"] = "quick\nimport os; os.system('name')"
    doc["recipe"]["description"] = "<script>alert(1)</script>\n<img src=x onerror=alert(2)>"
    doc["recipe"]["path"] = "recipes/x.toml\nimport os; os.system('path')"
    doc["recipe"]["inputs"][0]["name"] = "x\nimport os; os.system('input')"
    doc["environment"]["cpu_model"] = "cpu\nimport os; os.system('env')"
    doc["recommendation"]["variant"] = EXPLOIT
    doc["recommendation"]["reason"] = "<b>bold</b>"
    return doc


def test_a_hostile_variant_recipe_and_input_name_never_become_code() -> None:
    doc = _hostile_document()
    code = reproduce_code(doc)
    assert "os.system" not in _calls(code)
    assert not any(line.lstrip().startswith("import os") for line in code.splitlines())
    model = reproduce_script(doc, timed=False, section={"status": "ok", "kind": "code", "batch_size": 1,
                                                         "variant": EXPLOIT})
    assert "os.system" not in _calls(model)


def test_the_loader_of_a_hostile_artifact_section_compiles_to_no_foreign_call() -> None:
    doc = _hostile_document()
    for kind in ("onnx", "openvino", "torchscript", "aoti", "code"):
        doc["artifact"] = {"status": "ok", "kind": kind, "variant": EXPLOIT, "format": "x\"\"\"\nimport os\n",
                           "batch_size": 4, "threads": 2,
                           "files": [{"name": "m\nimport os.onnx", "bytes": 1}],
                           "runtime": {"intra_op_num_threads": "1\nimport os; os.system('t')",
                                       "config": {"K\n": "v\nimport os"}}}
        code = loader_script(doc)
        assert code is not None
        assert "os.system" not in _calls(code), kind
        assert not any(line.lstrip().startswith("import os") for line in code.splitlines()), kind


def test_report_md_has_no_raw_html_from_the_document() -> None:
    md = render_markdown(_hostile_document())
    assert "<script" not in md and "<img" not in md and "<b>" not in md
    assert "&lt;script>alert(1)&lt;/script>" in md


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "\x00", "\u2028x", '"""', "\\", 'end"', "ünï"])
def test_codegen_renders_any_text_safely(value: str) -> None:
    source = (f"# {py_comment(value)}\nX = {py_literal(value)}\n"
              f'def f():\n    """{py_doc(value)}"""\n')
    namespace: dict[str, Any] = {}
    exec(compile(source, "<generated>", "exec"), namespace)  # the point: it compiles to constants only
    assert namespace["X"] == value
    assert namespace["f"].__doc__ == value
    assert len(source.splitlines()) == 4


# ------------------------------------------------------------------------------ 7. passwords


def test_a_password_fragment_never_leaks(tmp_path: Path, recipe: Path) -> None:
    url = "postgresql://user:p@ss:w0rd@host:5432/db"
    err = assert_exit_2(cli("run", str(recipe), "--out", str(tmp_path / "out"), "--storage", url), "--storage")
    for secret in ("w0rd", "p@ss", "ss:w0rd"):
        assert secret not in err
    out = _run_dir(tmp_path)
    err = assert_exit_2(cli("report", str(out), "--storage", url))
    for secret in ("w0rd", "p@ss"):
        assert secret not in err
        assert secret not in (out / "report.json").read_text()


# ------------------------------------------------------------------------------ 8. inputs that crashed


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "0", "-1"])
@pytest.mark.parametrize("command", ["run", "worker"])
def test_a_non_finite_time_budget_is_refused(recipe: Path, command: str, value: str) -> None:
    extra = ["--storage", "sqlite:///unused.db"] if command == "worker" else []
    assert_exit_2(cli(command, str(recipe), *extra, f"--time-budget={value}"), "--time-budget", "positive finite")
    assert not Path("unused.db").exists()


def test_an_out_that_is_a_file_is_refused_before_the_model(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(tiny_recipe().replace("@MODELS@/broken.py", str(tmp_path / "no_model.py")))
    target = tmp_path / "afile"
    target.write_text("x")
    assert_exit_2(cli("run", str(recipe), "--out", str(target)), "--out", "is a file")
    assert_exit_2(cli("run", str(recipe), "--out", str(target / "sub")), "--out", "is a file")
    assert_exit_2(cli("run", str(recipe), "--out", str(tmp_path / ("y" * 300) / "x")), "--out", "too long")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deep_nesting_is_refused_at_every_parser(tmp_path: Path, depth: int) -> None:
    toml = tmp_path / "deep.toml"
    toml.write_text("a = " + "[" * depth + "]" * depth + "\n")
    assert_exit_2(cli("run", str(toml)), "deep.toml", "nested more than")
    nested = tmp_path / "deep.json"
    nested.write_text("[" * depth + "]" * depth)
    assert_exit_2(cli("compare", str(nested), str(nested)), "deep.json", "nested more than")
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text('{"a": ' + "[" * depth + "]" * depth + "}")
    assert_exit_2(cli("report", str(run)), "report.json", "nested more than")
    kwargs = {"model": {"factory": "torchvision.models:resnet18", "kwargs": {"k": []}}}
    inner: list[Any] = kwargs["model"]["kwargs"]["k"]  # type: ignore[index]
    for _ in range(min(depth, 5000)):
        inner.append([])
        inner = inner[0]
    with pytest.raises(RecipeError, match="nested more than"):
        parse_recipe(kwargs, path=tmp_path / "dict.toml")


def test_a_long_recipe_file_name_is_an_input_error(tmp_path: Path) -> None:
    assert_exit_2(cli("run", str(tmp_path / ("x" * 300 + ".toml"))), "cannot read recipe", "too long")


def test_an_unreadable_recipe_directory_is_an_input_error(tmp_path: Path) -> None:
    """EACCES on stat: the recipe's directory without permissions. Root reads it anyway, so as root the check runs
    in a forked child that drops to the unprivileged user ``nobody`` (the modules are already imported)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "r.toml").write_text("name = 'x'\n")
    locked.chmod(0)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            try:
                load_recipe(locked / "r.toml")
                message = "no error"
            except Exception as exc:  # reported to the parent, which checks its type
                message = f"{type(exc).__name__} {exc}"
            os.write(write, message.encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    locked.chmod(0o755)
    assert message.startswith("RecipeError"), message
    assert "r.toml" in message and "Permission denied" in message


def test_non_utf8_files_are_input_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{}")
    assert_exit_2(cli("compare", str(bad), str(bad)), "bad.json", "not UTF-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_bytes(b'{"schema": 2, "x": "\xe9"}')
    assert_exit_2(cli("report", str(run)), "report.json", "not UTF-8")
    (tmp_path / "r.toml").write_bytes(b"name = '\xff'\n")
    assert_exit_2(cli("run", str(tmp_path / "r.toml")), "r.toml", "not UTF-8")
    (tmp_path / "t.txt").write_bytes(b"0.1\n\xff\n")
    assert_exit_2(cli("warmup", str(tmp_path / "t.txt")), "t.txt", "not UTF-8")


@pytest.mark.parametrize("factor", [1e300, 1e-300, 1e-320, 1e308])
def test_extreme_throughputs_in_compare(tmp_path: Path, factor: float) -> None:
    base = json.loads((DATA / "compare-base-report.json").read_text())
    other = copy.deepcopy(base)
    for row in other["candidates"]:
        if row.get("throughput"):
            row["throughput"] *= factor
            row["throughput_ci"] = [v * factor for v in row["throughput_ci"]]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(base))
    b.write_text(json.dumps(other))
    for first, second in ((a, b), (b, a)):
        code, _, err = cli("compare", str(first), str(second))
        assert code in (0, 2, 3) and "Traceback" not in err, err


def test_extreme_values_in_a_warmup_trace(tmp_path: Path) -> None:
    trace = tmp_path / "w.txt"
    trace.write_text("\n".join(["1e308", "1e-308"] * 50))
    assert_exit_2(cli("warmup", str(trace)), "w.txt, line 1", "at most")
    trace.write_text("\n".join(["1e9", "1e-308"] * 50))
    subnormal = tmp_path / "s.txt"  # found by the fuzz suite: a sketch's scale of subnormals overflowed
    subnormal.write_text("1.0\n" + "1.5e-323\n" * 9 + "5e-324\n" * 90)
    for flags in ([], ["--online"], ["--json"], [str(subnormal)]):
        code, _, err = cli("warmup", str(trace), *flags)
        assert code == 0, err


def test_a_toml_date_in_model_kwargs_is_refused_at_parse(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(tiny_recipe(kwargs="kwargs = { when = 1979-05-27, nested = { t = 07:32:00 } }")
                    .replace("@MODELS@", str(MODELS)))
    err = assert_exit_2(cli("run", str(path), "--out", str(tmp_path / "out")), "r.toml", "model.kwargs.")
    assert "date" in err or "time" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(2**70), "1.5"])
def test_a_seed_out_of_range_is_refused_at_parse(tmp_path: Path, recipe: Path, seed: str) -> None:
    assert_exit_2(cli("run", str(recipe), f"--seed={seed}", "--out", str(tmp_path / "out")), "--seed", "2**32")
    if seed.lstrip("-").isdigit():
        path = tmp_path / "seed.toml"
        path.write_text(recipe.read_text().replace("[search]", f"[search]\nseed = {seed}"))
        with pytest.raises(RecipeError, match=r"search\.seed.*2\*\*32"):
            load_recipe(path)
    assert not (tmp_path / "out").exists()


def test_compare_with_no_configuration_in_common_exits_2(tmp_path: Path) -> None:
    base = json.loads((DATA / "compare-base-report.json").read_text())
    other = copy.deepcopy(base)
    for row in other["candidates"]:
        row["batch_size"] += 1000
    other["recommendation"]["batch_size"] += 1000
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(base))
    b.write_text(json.dumps(other))
    code, out, err = cli("compare", str(a), str(b))
    assert code in (2, 3), err
    if code == 2:
        assert "nothing was compared" in err and "No configuration was measured in both" in out


def test_the_limits_name_the_file(tmp_path: Path) -> None:
    from autotune.core import limits

    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * limits.MAX_RECIPE_BYTES)
    with pytest.raises(InputError, match=r"big\.toml: larger than"):
        load_recipe(big)


@pytest.mark.parametrize(("budget", "seed"), [(math.nan, None), (math.inf, None), (0.0, None), (None, -1),
                                              (None, 2**32)])
def test_the_api_refuses_what_the_flags_refuse(recipe: Path, budget: float | None, seed: int | None) -> None:
    """``autotune.tune`` takes the same overrides as the flags: refused before anything runs."""
    from autotune.tuner import with_cli_overrides

    with pytest.raises(InputError, match=r"^(time_budget|seed):"):
        with_cli_overrides(load_recipe(recipe), device=None, time_budget=budget, seed=seed)


@pytest.mark.parametrize("argv", [["run", "r\x00.toml"], ["report", "d\x00"], ["compare", "a\x00", "b"],
                                  ["warmup", "t\x00.txt"], ["run", "r.toml", "--out", "o\x00"]])
def test_a_nul_character_in_an_argument_is_an_input_error(argv: list[str]) -> None:
    """A process's arguments cannot hold one, but ``main`` called from Python can be given one."""
    assert_exit_2(cli(*argv), "NUL character")


def test_the_loaders_refuse_a_nul_character_in_a_path() -> None:
    from autotune.report import load_report
    from autotune.traces import load_trace

    for load in (load_recipe, load_report, load_trace):
        with pytest.raises(InputError, match="null byte"):
            load("a\x00b")
