"""The parent's worker client: the only builder of requests, every op through real workers, one measure settings.

``autotune.client.WorkerClient`` builds each op's request; the first tests read the package's source
(:mod:`ast`) to hold that: no other module writes a dict with an ``"op"`` key or calls a request
TypedDict, except the protocol's handshake constant. Then every op goes to real workers through the
client, and :class:`autotune.core.measure_settings.MeasureSettings` is checked as the one form of the
measure settings (derived from the recipe in one place, the same value on both sides of the pipe).
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import get_type_hints

import pytest

from autotune.client import WorkerClient
from autotune.core import protocol
from autotune.core.measure_settings import PER_CALL_SHARE, MeasureSettings
from autotune.core.protocol import OP_NAMES, MeasureSettingsData
from autotune.core.recipe import Recipe, load_recipe
from autotune.runner import Runner
from tests.support import tiny_recipe

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"
#: The request TypedDicts of the protocol (a call to one of them builds a request too).
REQUEST_TYPES = {name for name in dir(protocol) if name.endswith("Request") and name != "Request"}


def request_builds(source: str) -> list[str]:
    """Where ``source`` builds a request: a dict display with an ``"op"`` key, ``dict(op=...)``, or a call of
    a request TypedDict. Reading a request (``req["op"]``, ``req.get("op")``) is not building one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "op" for k in node.keys):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if (name == "dict" and any(k.arg == "op" for k in node.keywords)) or name in REQUEST_TYPES:
                found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_the_detector_sees_each_way_of_building_a_request() -> None:
    assert len(request_builds('a = {"op": "measure", "variant": v}')) == 1
    assert len(request_builds('a = {**base, "op": "slice"}')) == 1
    assert len(request_builds("a = dict(op='stage', seconds=1.0)")) == 1
    assert len(request_builds("a = MeasureRequest(op='measure')\nb = protocol.SliceRequest(op='slice')")) == 2
    assert request_builds('op = req["op"]\nname = req.get("op")\nok = {"id": 1, "ok": True}') == []


def test_only_the_client_builds_requests() -> None:
    builders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found = request_builds(path.read_text())
        if found:
            builders[path.relative_to(PACKAGE).as_posix()] = found
    client = builders.pop("client.py", [])
    assert len(client) >= len(OP_NAMES) - 1, client  # every op but hello (the protocol's constant) builds its own
    handshake = builders.pop("core/protocol.py", [])
    assert len(handshake) == 1 and handshake[0].endswith("{'op': 'hello'}"), handshake  # protocol.HELLO
    assert builders == {}, f"requests built outside autotune/client.py (use WorkerClient): {builders}"


def test_the_client_has_a_method_per_op() -> None:
    missing = [op for op in OP_NAMES if not callable(getattr(WorkerClient, op, None))]
    assert missing == []


def test_the_client_and_the_settings_import_no_torch() -> None:
    code = ("import sys, autotune.client, autotune.core.measure_settings, autotune.validation, autotune.deployment; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- measure settings ---------------------------------------------------------------------------


def _recipe(write_recipe, **kw: str) -> Recipe:
    return load_recipe(write_recipe(tiny_recipe(name="client", variants='["eager"]', **kw)))


def test_a_recipe_that_sets_nothing_gives_the_default_settings(write_recipe) -> None:
    plain = load_recipe(write_recipe('device = "cpu"\n[model]\nfactory = "@MODELS@/broken.py:tiny"\n'
                                     '[[inputs]]\nshape = [3, 8, 8]\n'))
    assert MeasureSettings.from_recipe(plain) == MeasureSettings()


def test_settings_follow_the_recipe(write_recipe) -> None:
    recipe = _recipe(write_recipe)
    s = MeasureSettings.from_recipe(recipe)
    assert (s.mode, s.ci_target, s.max_seconds, s.margin) == ("throughput", 0.05, 0.4, 0.02)
    assert s.per_call_seconds == 0.0  # throughput without an SLO: no latency number decides anything
    latency = replace(recipe, search=replace(recipe.search, objective="latency", equivalence_margin=0.05))
    assert MeasureSettings.from_recipe(latency).per_call_seconds == pytest.approx(PER_CALL_SHARE * 0.4)
    assert MeasureSettings.from_recipe(latency).margin == 0.05
    slo = replace(recipe, constraints=replace(recipe.constraints, max_latency_ms=5.0))
    assert MeasureSettings.from_recipe(slo).per_call_seconds == pytest.approx(PER_CALL_SHARE * 0.4)


def test_a_screen_at_lower_fidelity_scales_both_budgets() -> None:
    full = MeasureSettings(max_seconds=2.0, per_call_seconds=0.5)
    assert full.at_fidelity(1.0) is full
    quarter = full.at_fidelity(0.25)
    assert (quarter.max_seconds, quarter.per_call_seconds, quarter.ci_target) == (0.5, 0.125, full.ci_target)


def test_the_json_form_is_every_field_and_reads_back() -> None:
    s = MeasureSettings(mode="latency", ci_target=0.02, max_seconds=1.5, per_call_seconds=0.3, margin=0.03)
    data = s.to_dict()
    assert set(data) == {f.name for f in dataclasses.fields(MeasureSettings)} == set(
        get_type_hints(MeasureSettingsData))
    assert MeasureSettings.from_dict(data) == s


# ---- the real workers ------------------------------------------------------------------------------


@pytest.mark.worker
def test_every_op_goes_through_the_client_to_real_workers(write_recipe, tmp_path: Path) -> None:
    recipe = _recipe(write_recipe)
    settings = replace(MeasureSettings.from_recipe(recipe), mode="latency", max_seconds=0.3)
    with Runner() as runner:
        client = WorkerClient(runner)
        hello = client.hello(timeout=120)
        assert "status" not in hello and hello["pid"] > 0
        validated = client.validate(recipe, timeout=120)
        assert "status" not in validated and validated["variants"] == ["eager"]
        parsed = client.parse_variant(recipe.to_dict(), "frozen", timeout=120)  # the JSON form works as well
        assert parsed["status"] == "ok" and parsed["name"] == "frozen"
        measured = client.measure(recipe, "eager", 2, settings, timeout=120)
        assert measured["status"] == "ok", measured
        assert measured["measurement"]["batch_size"] == 2 and measured["measurement"]["mode"] == "latency"
        staged = client.stage(recipe, "eager", 2, warmup_iterations=0, warmup_seconds=0.05, timeout=120)
        assert staged["status"] == "ok", staged
        sliced = client.slice(0.05, per_call=True, percentile="p90", timeout=60)
        assert sliced["status"] == "ok" and sliced["calls"] > 0 and sliced["latency_seconds"] is not None
        memory = client.device_memory(recipe, timeout=120)
        assert "status" not in memory and memory["device"] == "cpu" and not memory["device_memory"]
        probed = client.probe(recipe, "eager", 1, memory_budget_bytes=None, timeout=120)
        assert probed["status"] == "ok" and probed["fits"], probed
        built = client.artifact(recipe, "eager", 2, directory=tmp_path / "artifact", profile=False, timeout=120)
        assert "status" not in built and built["artifact"] is not None and built["artifact"]["status"] == "ok"
        assert runner.stats.workers_started == 2  # a measure worker and a probe worker: the client routes by role
