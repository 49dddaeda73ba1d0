"""The property-based fuzz suite (Hypothesis) over autotune's four input surfaces.

The property, for every input: the CLI exits 0, 2 or 3 (1 where it is a verdict: ``report`` of a document without
a recommendation), prints no traceback, and finishes in bounded time (Hypothesis's ``deadline`` per example). The
library functions behind it raise nothing but :class:`~autotune.errors.InputError`.

Surfaces:

- **recipes**: TOML text (a valid recipe with values replaced by arbitrary TOML values, lines dropped or junk
  added, deep nesting, random text) through ``autotune run RECIPE --device <invalid>`` and ``load_recipe``; and
  structured tables through ``parse_recipe``. A parsed recipe must also encode as JSON (it travels in every
  worker request). ``--device`` is refused after the recipe is parsed, so no model is ever built;
- **report.json** for ``compare`` (two mutated reports) and for ``report DIR`` (no study.db: re-rendered as stored
  or refused) and the renderers behind it: the generated Python (Reproduce, ``load.py``) must always compile;
- **warmup trace files**: lines of arbitrary numbers, text, comments and CSV columns, and raw bytes, through
  ``autotune warmup [--json] [--online]``;
- **CLI flags**: every sub-command with arbitrary flags and values; the recipe they name has a model factory file
  that does not exist, so nothing past parsing runs.

Runs: the default profile ``fuzz`` is shorter (:data:`FAST_EXAMPLES` per test); the tests marked ``slow``
run the same properties under the profile ``fuzz-slow`` (:data:`SLOW_EXAMPLES` per surface):
``pytest tests/test_fuzz.py -m slow``. No Hypothesis database is written (``database=None``), so a run leaves
nothing in the tree. Set ``AUTOTUNE_FUZZ_EXAMPLES`` to change the slow count.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import datetime as dt
import io
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.cli import main
from autotune.core.recipe import load_recipe, parse_recipe
from autotune.errors import InputError
from autotune.report import load_report
from autotune.report.console import console_table
from autotune.report.loader import loader_script
from autotune.report.markdown import markdown_text
from autotune.report.reproduce import reproduce_script
from tests.support import MODELS, tiny_recipe
from tests.test_report import make_document

#: The default suite's count per surface (issue 32: "a few hundred"); ``make test-fast`` sets 25 through
#: ``AUTOTUNE_FUZZ_FAST_EXAMPLES`` for the edit-test loop.
FAST_EXAMPLES = int(os.environ.get("AUTOTUNE_FUZZ_FAST_EXAMPLES", "200"))
SLOW_EXAMPLES = int(os.environ.get("AUTOTUNE_FUZZ_EXAMPLES", "2000"))
#: Seconds one example may take (the "bounded time" of the property; generous: the machine may be shared).
DEADLINE_MS = 30_000

_COMMON = {"deadline": DEADLINE_MS, "database": None, "print_blob": True,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]}
settings.register_profile("fuzz", max_examples=FAST_EXAMPLES, **_COMMON)
settings.register_profile("fuzz-slow", max_examples=SLOW_EXAMPLES, **_COMMON)

DATA = Path(__file__).resolve().parent / "data"
BASE_REPORTS = [json.loads((DATA / name).read_text()) for name in ("compare-base-report.json",
                                                                   "compare-base-report-v2.json")]
BASE_REPORTS.append(make_document(trace_points=60))
BASE_REPORTS[-1]["budget"] = {"time_budget_s": 60.0, "promise_s": 75.0, "artifact_reserve_s": 18.0,
                              "phases": {"validation": 7.0, "search": 30.0, "showdown": 12.0, "artifact": 16.0},
                              "wall_seconds": 65.0, "within_promise": True}
#: The tiny test recipe with a factory that exists (parsing goes through every table).
RECIPE_TEXT = tiny_recipe().replace("@MODELS@", str(MODELS))
#: The same with a factory file that does not exist: any command stops at parsing, before a worker.
DEAD_RECIPE_TEXT = RECIPE_TEXT.replace(str(MODELS / "broken.py"), "/nonexistent/autotune-fuzz/model.py")


# ------------------------------------------------------------------------------------------------ helpers


def cli(*argv: str) -> tuple[int, str, str]:
    """``autotune ARGV`` in this process: (exit code, stdout, stderr); any other exception propagates (a failure)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()


def assert_clean(result: tuple[int, str, str], allowed: tuple[int, ...] = (0, 2, 3)) -> None:
    code, _, err = result
    assert code in allowed, (code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]


def both(strategies: dict[str, st.SearchStrategy[Any]], check: Callable[..., None]) -> tuple[Any, Any]:
    """The default (short) and the ``slow`` test of one property."""

    def make(profile: str) -> Any:
        @settings(settings.get_profile(profile))
        @given(**strategies)
        def test(**kwargs: Any) -> None:
            check(**kwargs)

        return test

    return make("fuzz"), pytest.mark.slow(make("fuzz-slow"))


# ------------------------------------------------------------------------------------------------ values

_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([1e308, -1e308, 1e-308, 5e-324, 0.0, -0.0, 1e9, 1e-9]))
_ints = st.one_of(st.integers(-10, 10), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 2**32, 2**63, -1]))
_text = st.text(st.characters(codec="utf-8"), max_size=30)
_dates = st.one_of(st.dates(), st.times(), st.datetimes())
_scalars = st.one_of(st.none(), st.booleans(), _ints, _floats, _text)
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(_text, inner, max_size=4)), max_leaves=12)


def _toml_value(value: Any) -> str:
    """``value`` as a TOML literal (for the text surface)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if value is None:
        return '""'
    return json.dumps(str(value))


_toml_values = st.recursive(st.one_of(st.booleans(), _ints, _floats, _text, _dates),
                            lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                    st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                            max_leaves=10)


# ------------------------------------------------------------------------------------------------ recipes


@st.composite
def recipe_texts(draw: st.DrawFn) -> str:
    """A recipe's TOML: the tiny recipe mutated (values replaced, lines dropped, junk lines), deeply nested, or
    arbitrary text."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "deep", "text"]))
    if kind == "text":
        return draw(st.text(max_size=400))
    if kind == "deep":
        depth = draw(st.integers(1, 3000))
        return RECIPE_TEXT + f"\n[extra]\nk = {'[' * depth}{']' * depth}\n"
    lines = RECIPE_TEXT.splitlines()
    out = []
    for line in lines:
        action = draw(st.sampled_from(["keep"] * 6 + ["value", "drop", "junk"]))
        if action == "drop":
            continue
        if action == "value" and " = " in line:
            key = line.split(" = ", 1)[0]
            line = f"{key} = {_toml_value(draw(_toml_values))}"
        elif action == "junk":
            out.append(draw(st.sampled_from([f"{draw(st.text(max_size=10))} = {_toml_value(draw(_toml_values))}",
                                             "[search]", "[[inputs]]", "[model]", draw(st.text(max_size=40))])))
        out.append(line)
    return "\n".join(out) + "\n"


def _check_recipe_text(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "recipe.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            recipe = load_recipe(path)
        except InputError:
            pass
        else:
            json.dumps(recipe.to_dict())  # the recipe travels as JSON in every worker request
        assert_clean(cli("run", str(path), "--device", "no-such-device", "--out", str(Path(tmp) / "out")), (2,))
        assert not (Path(tmp) / "out").exists()


test_recipe_text, test_recipe_text_slow = both({"text": recipe_texts()}, _check_recipe_text)


def _recipe_paths(table: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    if isinstance(table, dict):
        for key, value in table.items():
            paths.append((*prefix, key))
            paths += _recipe_paths(value, (*prefix, key))
    return paths


BASE_TABLE = {
    "name": "tiny", "device": "cpu",
    "model": {"factory": f"{MODELS}/broken.py:tiny", "kwargs": {}},
    "inputs": [{"name": "x", "shape": [3, 8, 8]}],
    "search": {"variants": ["eager", "frozen"], "batch_sizes": [1, 4], "time_budget_s": 120, "seed": 0},
    "measure": {"max_seconds": 0.4, "ci_target": 0.05, "rounds": 2},
    "constraints": {}, "batch": {},
}
_KNOWN_KEYS = ["precisions", "memory_formats", "shapes", "threads", "objective", "max_trials", "strategy",
               "equivalence_margin", "mode", "timeout_s", "processes", "round_seconds", "max_latency_ms",
               "latency_percentile", "max_memory_bytes", "max_batch_size", "granularity", "memory_budget", "headroom",
               "dtype", "vocab_size", "keyword", "range", "buckets", "pad_values", "max_batches", "data"]


@st.composite
def recipe_tables(draw: st.DrawFn) -> dict[str, Any]:
    """The tiny recipe's table with fields replaced, removed or added (known keys, arbitrary values, TOML dates)."""
    table = copy.deepcopy(BASE_TABLE)
    for _ in range(draw(st.integers(1, 4))):
        paths = _recipe_paths(table)
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        path = draw(st.sampled_from(paths))
        parent: Any = table
        for key in path[:-1]:
            parent = parent[key]
        if action == "delete":
            parent.pop(path[-1], None)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(_KNOWN_KEYS))] = draw(_toml_values)
        else:
            parent[path[-1]] = draw(_toml_values)
    return table


def _check_recipe_table(table: dict[str, Any]) -> None:
    try:
        recipe = parse_recipe(table, path=Path(tempfile.gettempdir()) / "fuzz.toml")
    except InputError:
        return
    json.dumps(recipe.to_dict())


test_recipe_table, test_recipe_table_slow = both({"table": recipe_tables()}, _check_recipe_table)


# ------------------------------------------------------------------------------------------------ report.json


def _doc_paths(value: Any, prefix: tuple[Any, ...] = (), limit: int = 400) -> list[tuple[Any, ...]]:
    """Paths into a document (breadth first, at most ``limit``; long sample arrays are one path)."""
    found: list[tuple[Any, ...]] = []
    queue: list[tuple[Any, tuple[Any, ...]]] = [(value, prefix)]
    while queue and len(found) < limit:
        item, path = queue.pop(0)
        children: list[tuple[Any, Any]] = []
        if isinstance(item, dict):
            children = list(item.items())
        elif isinstance(item, list) and len(item) <= 16:
            children = list(enumerate(item))
        for key, child in children:
            found.append((*path, key))
            queue.append((child, (*path, key)))
    return found


@st.composite
def report_documents(draw: st.DrawFn) -> Any:
    """A report.json document: one of the real reports with fields replaced by arbitrary JSON values, removed, or
    scaled to extremes (throughputs, samples); now and then arbitrary JSON instead."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_json)
    doc = copy.deepcopy(draw(st.sampled_from(BASE_REPORTS)))
    paths = _doc_paths(doc)
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(["set", "set", "scale", "delete"]))
            if action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif action == "scale" and isinstance(parent[path[-1]], int | float | list):
                factor = draw(st.sampled_from([1e300, 1e-300, 1e308, 5e-324, -1.0, 0.0]))
                old = parent[path[-1]]
                parent[path[-1]] = ([v * factor if isinstance(v, int | float) else v for v in old]
                                    if isinstance(old, list) else old * factor)
            else:
                parent[path[-1]] = draw(_json)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


def _write_doc(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc), encoding="utf-8", errors="surrogatepass")


def _check_compare(a: Any, b: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pa, pb = Path(tmp) / "a.json", Path(tmp) / "b.json"
        _write_doc(pa, a)
        _write_doc(pb, b)
        assert_clean(cli("compare", str(pa), str(pb)))
        assert_clean(cli("compare", str(pa), str(pb), "--json", "--threshold", "1%"))


test_report_compare, test_report_compare_slow = both({"a": report_documents(), "b": report_documents()},
                                                     _check_compare)


def _check_render(doc: Any) -> None:
    """The renderers of ``autotune report`` without the plots (matplotlib costs a second a document): a document
    load_report accepts renders, and the Python generated from it compiles."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        _write_doc(path, doc)
        try:
            plain = load_report(path)
        except InputError:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            markdown_text(plain, None)
            console_table(plain)
            if plain.get("recommendation") is not None:
                for code in (reproduce_script(plain), reproduce_script(plain, timed=False)):
                    ast.parse(code)
            plain_with_artifact = {**plain, "artifact": {"status": "ok", "kind": "onnx", "variant": "x",
                                                         "batch_size": 2, "runtime": {}, "files": []}}
            for kind in ("onnx", "openvino", "torchscript", "code"):
                plain_with_artifact["artifact"]["kind"] = kind
                code = loader_script(plain_with_artifact) if plain.get("recommendation") is not None else None
                if code is not None:
                    ast.parse(code)


test_report_render, test_report_render_slow = both({"doc": report_documents()}, _check_render)


@pytest.mark.parametrize("workload", [1, "x", [1], {"weights": 3, "batch_rows": "y"},
                                      {"weights": {"native": False}, "batch_rows": [0]}])
def test_a_workload_of_any_shape_renders(workload: Any) -> None:
    """Found by the fuzzer (session 43's CI, an AttributeError in the console's recommendation sentence): a
    report.json whose ``workload`` (or its ``weights`` / ``batch_rows``) is not an object."""
    doc = copy.deepcopy(BASE_REPORTS[0])
    doc["workload"] = workload
    _check_render(doc)


def _check_report_dir(doc: Any) -> None:
    """``autotune report DIR`` end to end (plots included), DIR without a study.db."""
    with tempfile.TemporaryDirectory() as tmp:
        _write_doc(Path(tmp) / "report.json", doc)
        assert_clean(cli("report", tmp), (0, 1, 2))
        assert not (Path(tmp) / "study.db").exists()


def test_report_dir_without_a_study_name_renders_the_report_as_stored() -> None:
    """Found by the fuzzer (a KeyError): ``search.study_name`` is optional in the schema, so a report.json without
    it names no study to read back; ``autotune report DIR`` re-renders it as stored and says so."""
    doc = copy.deepcopy(BASE_REPORTS[0])
    del doc["search"]["study_name"]
    with tempfile.TemporaryDirectory() as tmp:
        _write_doc(Path(tmp) / "report.json", doc)
        assert_clean(cli("report", tmp), (0,))
        assert "names no study" in (Path(tmp) / "report.md").read_text()


test_report_dir = settings(settings.get_profile("fuzz"), max_examples=8)(given(doc=report_documents())(
    _check_report_dir))
test_report_dir_slow = pytest.mark.slow(settings(settings.get_profile("fuzz-slow"), max_examples=max(
    SLOW_EXAMPLES // 10, 10))(given(doc=report_documents())(_check_report_dir)))


# ------------------------------------------------------------------------------------------------ warmup traces

_trace_lines = st.one_of(
    _floats.map(repr), _ints.map(str), st.floats(1e-6, 1.0).map(repr), st.floats(1e-6, 1.0).map(repr),
    st.just(""), st.just("# comment"), st.just("seconds"), _text,
    st.tuples(st.floats(1e-6, 1.0), _text).map(lambda t: f"{t[0]!r},{t[1]}"),
)


@st.composite
def trace_files(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["lines", "lines", "lines", "level", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "level":  # a plausible trace: a warmup then a level, with extremes mixed in
        n = draw(st.integers(1, 400))
        level = draw(st.sampled_from([1e-3, 1e-9, 1e9, 5e-324, 1.0]))
        values = [level * (3.0 if i < n // 10 else 1.0) for i in range(n)]
        for _ in range(draw(st.integers(0, 3))):
            values[draw(st.integers(0, n - 1))] = draw(_floats)
        return "\n".join(repr(v) for v in values).encode()
    return "\n".join(draw(st.lists(_trace_lines, max_size=300))).encode("utf-8", "surrogatepass")


def _check_trace(data: bytes, flags: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.txt"
        path.write_bytes(data)
        assert_clean(cli("warmup", str(path), *flags))


test_trace, test_trace_slow = both({"data": trace_files(),
                                    "flags": st.lists(st.sampled_from(["--json", "--online"]), unique=True)},
                                   _check_trace)


# ------------------------------------------------------------------------------------------------ CLI flags

_FLAGS = {
    "run": ["--out", "--device", "--time-budget", "--storage", "--study", "--seed", "--no-progress"],
    "warmup": ["--json", "--online"],
    "batch": ["--variant", "--memory-budget", "--device", "--json"],
    "measure": ["--variant", "--batch-size", "--device", "--json"],
    "report": ["--storage"],
    "compare": ["--threshold", "--json"],
    "worker": ["--storage", "--study", "--device", "--time-budget", "--no-progress"],
}
_flag_values = st.one_of(
    _text, _floats.map(repr), _ints.map(str),
    st.sampled_from(["nan", "inf", "-inf", "0", "-1", "1e400", "5%", "150%", "4GiB", "-4GiB", "1e30TiB", "cpu",
                     "cuda:99", "xpu:-1", "eager", "eager+threads=0", "compile:max-autotune", "", " ", "\x00",
                     "sqlite:///", "postgresql://u:p@ss:w0rd@h:5432/d", "redis://x", "sqlite:////nonexistent/x.db"]),
)


@st.composite
def argvs(draw: st.DrawFn) -> tuple[str, list[str]]:
    """(sub-command, its arguments with placeholders for the files: {recipe}, {dir}, {trace}, {tmp})."""
    command = draw(st.sampled_from([*_FLAGS, "bogus"]))
    positional = {"run": ["{recipe}"], "batch": ["{recipe}"], "measure": ["{recipe}"], "worker": ["{recipe}"],
                  "warmup": ["{trace}"], "report": ["{dir}"], "compare": ["{dir}", "{dir}"]}.get(command, [])
    args = [draw(st.sampled_from([p, "{tmp}/" + draw(st.text(max_size=12)), draw(_text)])) for p in positional]
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from([*_FLAGS.get(command, ["--x"]), "-h", "--version", "--bogus"]))
        if flag in ("-h", "--version") and draw(st.integers(0, 3)) > 0:
            continue
        args.append(flag)
        if flag not in ("--json", "--online", "--no-progress", "-h", "--version") or draw(st.booleans()):
            args.append(draw(_flag_values))
    if draw(st.booleans()):
        args = draw(st.permutations(args))
    return command, list(args)


def _check_argv(case: tuple[str, list[str]]) -> None:
    command, args = case
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "recipe.toml"
        recipe.write_text(DEAD_RECIPE_TEXT)
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        _write_doc(run_dir / "report.json", BASE_REPORTS[1])
        trace = Path(tmp) / "trace.txt"
        trace.write_text("\n".join(["0.002"] * 5 + ["0.001"] * 40))
        values = {"{recipe}": str(recipe), "{dir}": str(run_dir), "{trace}": str(trace)}
        argv = [command, *(values.get(a, a.replace("{tmp}", tmp)) for a in args)]
        before = set(os.listdir(tmp))
        assert_clean(cli(*argv), (0, 1, 2, 3) if command == "report" else (0, 2, 3))
        # nothing past parsing ran: no output directory, no study database appeared
        assert not any(name.endswith(".db") for name in set(os.listdir(tmp)) - before), argv


test_cli_flags, test_cli_flags_slow = both({"case": argvs()}, _check_argv)
