"""The serving phase end to end, small: a run with ``[serving]`` on the tiny model recommends a configuration
measured with real open-loop load on the artifact's own server, and that artifact, started by its one
command, serves it to tritonclient. (The quickstart and BERT-sized checks are in benchmarks/bench_serving.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.serving.search import WARMUP_SECONDS
from tests.support import run_cli, tiny_recipe

SERVING = """
[serving]
slo_ms = 200
instances = [1]
threads = [1]
max_batch = [1, 4]
max_delay_ms = [0, 2]
confirm = 1
time_budget_s = 45
"""


def _start(artifact: Path, ready: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sh", str(artifact / "run.sh"), "serve", "--port", "0", "--ready-file", str(ready)],
                            env=dict(os.environ, PYTHON=sys.executable), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the artifact's server was not ready in 120 s"
        time.sleep(0.1)
    time.sleep(0.1)
    return proc


@pytest.mark.worker
def test_a_run_with_serving_recommends_a_measured_configuration_that_its_artifact_serves(
        write_recipe, tmp_path: Path) -> None:
    http = pytest.importorskip("tritonclient.http")
    from tritonclient.utils import InferenceServerException

    # the offline pick at batch 4, so the serving grid has batches beyond the naive server's (a pick at batch 1
    # leaves one configuration on one server core: the naive one, and the search none of its own)
    recipe = write_recipe(tiny_recipe(variants='["eager"]', batch_sizes="[4]", time_budget_s=15) + SERVING)
    out = tmp_path / "out"
    code, _, err = run_cli("run", str(recipe), "--out", str(out), "--no-progress")
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    serving = doc["serving"]
    if serving["status"] == "failed" and any("did not hold" in n for n in serving["notes"]):
        # a busy machine (the suite's other process, a neighbour): a rate that passed its point could not be held
        # for 10 s, and the budget ran out before a lower one was; the stage says so instead of recommending. The
        # server did serve within the SLO at some point; the artifact part is then not checked in this run.
        points = [p for c in serving["configs"] for p in c.get("points", [])]
        assert any(p["p99_ms"] is not None and p["p99_ms"] <= 200 for p in points), points
        assert serving["reason"].startswith("no configuration met p99 <= 200 ms"), serving["reason"]
        pytest.skip(f"serving could not hold a rate on this busy machine: {serving['notes'][0]}")
    assert serving["status"] == "ok", serving.get("reason")
    rec = serving["recommendation"]
    assert rec["max_rate"] > 0 and rec["max_rate_ci"][0] <= rec["max_rate"] <= rec["max_rate_ci"][1]
    # the grid's (1 x 1 thread) or a baseline's (1 x all cores): the best measured wins, whichever it is
    assert rec["instances"] == 1 and rec["threads"] * rec["instances"] <= serving["cores"]
    assert rec["max_batch"] in (1, 4)
    roles = {c["role"] for c in serving["configs"]}
    assert {"naive", "search"} <= roles
    measured = [c for c in serving["configs"] if c["role"] != "pruned"]
    for c in measured:  # every confirmed configuration was loaded for real, open loop, with its points
        assert c["points"] and all(p["sent"] > 0 for p in c["points"])
        # and the server's own account of each point: its calls, as many rows as answered at most
        assert all(0 < p["calls"] <= p["ok"] + p["failed"] + p["timed_out"] and p["rows_per_call"] >= 1
                   for p in c["points"] if p["ok"]), c["points"]
        assert all(p["rows_per_call"] <= c["max_batch"] for p in c["points"] if p["ok"])
        # held or not after a 10-s point at least (the pick's holds; a baseline's where its share had room)
        assert c["held"] is None or any(p["seconds"] >= 10.0 for p in c["points"])
        assert c["bisected_max_rate"] is not None
    # the pick's curve, after its 10-s hold; on a busy machine a 45 s budget may not fit the hold, and then the
    # report says its max rate was not held
    assert serving["at_fraction"] or any("not held" in n or "did not hold" in n for n in serving["notes"])
    assert serving["seconds"] <= 45 * 1.25 + 15  # its budget, plus the last point and the server stops
    # every fresh server (the naive one and one per confirmed configuration at least) had its untimed warm-up
    assert serving["calls"]["warm_s"] >= 2 * WARMUP_SECONDS and serving["calls"]["load_s"] > serving["calls"]["warm_s"]
    assert 0 < serving["share_of_run"] < 1
    assert "Serving" in (out / "report.md").read_text()

    artifact = out / "artifact"
    settings = json.loads((artifact / "serving.json").read_text())
    assert (settings["instances"], settings["max_batch"]) == (rec["instances"], rec["max_batch"])
    assert (artifact / "torchserve" / "config.properties").exists()

    proc = _start(artifact, tmp_path / "ready.json")
    try:
        port = json.loads((tmp_path / "ready.json").read_text())["port"]
        client = http.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_server_ready()
        name = serving["model_name"]
        meta = client.get_model_metadata(name)
        assert meta["inputs"][0]["name"] == "x" and meta["inputs"][0]["shape"][0] == -1
        def request(rows: int) -> list[Any]:
            x = np.random.default_rng(0).standard_normal((rows, 3, 8, 8)).astype(np.float32)
            inp = http.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=True)
            return [inp]

        # a request of up to the pick's max batch is served (the search may pick 1: the naive server wins on a
        # busy machine); one row more is refused, naming the maximum
        rows = min(2, rec["max_batch"])
        got = client.infer(name, request(rows))
        out0 = got.as_numpy(meta["outputs"][0]["name"])
        assert out0.shape[0] == rows and np.all(np.isfinite(out0))
        with pytest.raises(InferenceServerException, match=f"maximum batch {rec['max_batch']}"):
            client.infer(name, request(rec["max_batch"] + 1))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the server left after SIGTERM: {left}"


@pytest.mark.slow
@pytest.mark.worker
def test_an_interrupted_serving_stage_keeps_its_points_and_leaves_no_server(write_recipe, tmp_path: Path) -> None:
    """Ctrl-C while the serving search loads a server: exit 130, report.json says so and keeps the points
    measured so far, and no serve.py or instance process of the run is left."""
    recipe = write_recipe(tiny_recipe(variants='["eager"]', batch_sizes="[1, 4]", time_budget_s=15) + SERVING)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(recipe), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 300
        while b"req/s: p99" not in seen:  # the first load point of the naive baseline is done
            assert proc.poll() is None and time.monotonic() < deadline, seen.decode(errors="replace")[-2000:]
            seen += proc.stderr.readline()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    doc = json.loads((out / "report.json").read_text())
    assert doc["complete"] is False and doc["phase"] == "serving" and doc["interrupted"] is True
    assert doc["serving"]["interrupted"] is True
    kept = [p for c in doc["serving"]["configs"] for p in c["points"]]
    assert kept, "the points measured before the interrupt"
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", str(out / "artifact")], capture_output=True, text=True).stdout.split()
    assert not left, f"server processes left: {left}"
