"""CUDA paths on a real GPU (marked ``cuda``: skipped cleanly without one).

Real out-of-memory boundaries under an allocator cap, confirmed in fresh processes and checked by a
plain torch-only process; event timing against wall time; CUDA-graph capture and replay; OOM
classification of real allocator failures; ``cuda:N`` acting on device N.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.worker, pytest.mark.cuda]

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024**2


def test_event_timing_agrees_with_wall_time_on_a_long_kernel() -> None:
    from autotune.worker.devices import backend_for

    backend = backend_for("cuda")
    a = torch.randn(8192, 8192, device="cuda")

    def call() -> None:
        a @ a

    timer = backend.block_timer()
    timer(call, 3)  # warm
    backend.synchronize()
    t0 = time.perf_counter()
    events = timer(call, 20)
    wall = time.perf_counter() - t0
    assert events > 0.005  # a long kernel: the host's loop overhead is noise against it
    assert events == pytest.approx(wall, rel=0.05)


def test_a_cuda_artifacts_plain_process_times_the_device_not_the_launches(tmp_path: Path) -> None:
    """The artifact check's plain process on a CUDA artifact (its child spec says ``sync``): the throughput and the
    per-call median agree with the device's own events on the same long kernel; unsynchronised, a window of
    launches that return at once would read many times faster."""
    from autotune.artifact_timing import ArtifactTarget, child_spec, plain_process
    from autotune.worker.devices import backend_for

    art = tmp_path / "artifact"
    art.mkdir()
    (art / "load.py").write_text(
        "import torch\n\ndef load():\n    w = torch.randn(4096, 4096, device='cuda')\n"
        "    def predict(x):\n        for _ in range(8):\n            x = x @ w\n        return x\n"
        "    return predict\n\n"
        "def make_inputs():\n    return (torch.randn(4096, 4096, device='cuda'),)\n")
    spec = child_spec(art, kind="torchscript", batch_size=4096, recipe={"device_resolved": "cuda:0"}, why="a test")
    assert spec["sync"] == "cuda"
    out = plain_process(ArtifactTarget(run_dir=tmp_path, label="x@4096", reported=1.0, child=spec), seconds=1.0,
                        warm_s=0.3)
    w = torch.randn(4096, 4096, device="cuda")
    x = torch.randn(4096, 4096, device="cuda")

    def call() -> None:
        y = x
        for _ in range(8):
            y = y @ w

    timer = backend_for("cuda").block_timer()
    timer(call, 3)
    per_call = timer(call, 20) / 20
    assert out["synchronised"] is True
    assert 4096 / out["throughput"] == pytest.approx(per_call, rel=0.15)
    assert out["p50_ms"] / 1e3 == pytest.approx(per_call, rel=0.15)


def test_cuda_graph_capture_and_replay() -> None:
    from autotune.worker.devices import backend_for

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda().eval()
    example = torch.randn(16, 64, device="cuda")
    with torch.inference_mode():
        graph = backend_for("cuda").graph_call(model, (example,))
        for seed in range(3):
            x = torch.randn(16, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
            out = graph(x).clone()
            torch.testing.assert_close(out, model(x))


def test_real_cuda_oom_is_classified_and_the_cache_released() -> None:
    from autotune.worker.devices import backend_for, oom_kind

    backend = backend_for("cuda")
    free = backend.free_memory_bytes()
    assert free is not None and free > 0
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(int(free * 4), dtype=torch.uint8, device="cuda")
    assert oom_kind(info.value) == "allocator_type"
    reserved = torch.cuda.memory_reserved()
    backend.limit_memory(reserved + 64 * MIB)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
    finally:
        backend.limit_memory(None)
    backend.release_memory()
    assert torch.cuda.memory_reserved() <= reserved  # nothing of the failed allocations is kept


def test_real_torchscript_reraise_on_cuda_is_classified() -> None:
    from autotune.worker.devices import oom_kind

    class Alloc(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            return torch.empty(n, device=x.device) + x.sum()

    scripted = torch.jit.script(Alloc())
    free, _ = torch.cuda.mem_get_info()
    with pytest.raises(Exception) as info:
        scripted(torch.ones(1, device="cuda"), int(free))
    assert oom_kind(info.value) is not None, f"{type(info.value).__name__}: {info.value}"


def test_cuda_index_n_acts_on_device_n() -> None:
    from autotune.worker.devices import backend_for

    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU on this machine: cuda:1 cannot be checked")
    backend = backend_for("cuda:1")
    backend.activate()
    try:
        assert torch.cuda.current_device() == 1
        x = torch.randn(1024, 1024, device="cuda:1")
        backend.reset_peak_memory()
        y = x @ x
        assert backend.peak_memory_bytes() > 0 and torch.cuda.max_memory_allocated(0) == 0
        timer = backend.block_timer()
        assert timer(lambda: x @ y, 5) > 0
    finally:
        torch.cuda.set_device(0)


# --------------------------------------------------------------------------------------------------
# A real CUDA out-of-memory boundary, confirmed in fresh processes, checked by a plain process
# --------------------------------------------------------------------------------------------------

CASES = {
    "mlp": ("recipes/mlp.toml", 256 * MIB),
    "resnet18": ("recipes/quickstart.toml", 512 * MIB),
}


def plain_fits(recipe, variant: str, batch: int, limit: int) -> dict[str, object]:
    factory = recipe.model.factory
    target, _, attr = factory.rpartition(":")
    if target.endswith(".py"):
        factory = f"{(Path(recipe.model.base_dir) / target).resolve()}:{attr}"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "plain_footprint.py"), factory,
           "--kwargs", json.dumps(dict(recipe.model.kwargs)), "--shape", *[str(d) for d in recipe.inputs[0].shape],
           "--batch", str(batch), "--variant", variant, "--device", "cuda", "--limit", str(limit)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode < 0:  # a crash (session 47: a frozen resnet18 near its cap died with SIGSEGV): it did not run
        return {"fits": False, "torch_only": None, "crashed": -out.returncode}
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("variant", ["eager", "frozen", "compile"])
@pytest.mark.parametrize("model", sorted(CASES))
def test_real_cuda_boundary_agrees_with_a_plain_process(model: str, variant: str) -> None:
    from autotune.core.recipe import load_recipe
    from autotune.runner import Runner
    from autotune.validation import validate
    from autotune.variant_boundaries import find_boundaries

    path, budget = CASES[model]
    base = load_recipe(ROOT / path)
    recipe = replace(base, device="cuda", search=replace(base.search, variants=(variant,), batch_sizes="auto"),
                     batch=replace(base.batch, memory_budget_bytes=budget, granularity=None, max_batch_size=65536))
    with Runner() as runner:
        workload = validate(runner, recipe)
        outcome = find_boundaries(runner, recipe, workload)
    assert variant in outcome.documents, outcome.failures
    doc = outcome.documents[variant]
    assert not doc["hit_upper_bound"]
    assert doc["memory_limit_bytes"] == budget and doc["limit_source"] == "budget"
    assert "fresh worker process" in doc["confirmed_by"]
    b, g = doc["max_batch_size"], doc["granularity"]
    probes = [(p["phase"], p["batch_size"], p["fits"], p["peak_memory_bytes"], (p["error"] or "")[:160])
              for p in doc["probes"]]  # in full: a failure here must say which probe and why (session 32)
    # the confirming failure is the allocator's out-of-memory error, or a crash once a smaller batch ran (the
    # document names it: runner.CRASH_SIGNALS, batch.crashed_past)
    assert any(p["phase"] == "confirm" and not p["fits"] and ("out of memory" in (p["error"] or "") or
               (p["error"] or "").startswith("crashed: ")) for p in doc["probes"]), "\n".join(map(str, probes))
    at_b, above = plain_fits(recipe, variant, b, budget), plain_fits(recipe, variant, b + g, budget)
    assert at_b["torch_only"] and at_b["fits"], at_b
    assert not above["fits"], above
