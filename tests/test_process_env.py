"""Process environments (allocator, OpenMP): names, the recipe field, crossing, the scripts, and real workers.

The pure parts (names, ``apply``, availability, crossing, the generated scripts) are tested on values; the
tests marked ``worker`` start real workers and read their ``/proc/PID/maps`` and ``/proc/PID/environ``: a
jemalloc worker has jemalloc mapped, a glibc-tuned one sees its ``GLIBC_TUNABLES``, and a worker refuses a
candidate that names another environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.client import WorkerClient
from autotune.core.measure_settings import MeasureSettings
from autotune.core.process_env import (
    ENV_MARKER,
    TUNED_TUNABLES,
    ProcessEnvironment,
    environment_of_variant,
    python_prelude,
    resolve_environments,
    run_script,
)
from autotune.core.recipe import Recipe, load_recipe
from autotune.core.variant_names import VariantSpec
from autotune.errors import InputError, RecipeError
from autotune.runner import Runner, WorkerProcess
from autotune.validation import cross_environments
from tests.support import tiny_recipe

SETTINGS = MeasureSettings(mode="throughput", ci_target=0.05, max_seconds=0.3)


def _available(allocator: str) -> bool:
    return ProcessEnvironment(allocator=allocator).unavailable_reason() is None


def test_names_parse_and_print_canonically() -> None:
    assert ProcessEnvironment.parse("glibc").is_default
    assert ProcessEnvironment.parse("OMP-PASSIVE+jemalloc").name == "jemalloc+omp-passive"
    assert ProcessEnvironment.parse("omp-active").name == "glibc+omp-active"
    with pytest.raises(InputError, match=r"unknown environment 'jemallc'.*allowed: glibc, glibc-tuned"):
        ProcessEnvironment.parse("jemallc")
    with pytest.raises(InputError, match="two allocators"):
        ProcessEnvironment.parse("jemalloc+tcmalloc")


def test_variant_names_carry_the_environment_as_modifiers() -> None:
    spec = VariantSpec.parse("frozen+jemalloc+threads=2+omp-passive")
    assert spec.name == "frozen+threads=2+jemalloc+omp-passive"
    assert spec.environment == "jemalloc+omp-passive" and spec.base_name == "frozen+threads=2"
    assert spec.to_dict()["environment"] == "jemalloc+omp-passive"
    plain = VariantSpec.parse("frozen+glibc")  # the default is left out of names and spec dicts
    assert plain.name == "frozen" and "environment" not in plain.to_dict()
    assert environment_of_variant("openvino:throughput+tcmalloc").allocator == "tcmalloc"
    assert environment_of_variant("eager").is_default
    with pytest.raises(InputError, match="two allocators"):
        VariantSpec.parse("eager+jemalloc+tcmalloc")


def test_apply_strips_the_parents_allocator_settings_and_adds_its_own(tmp_path: Path) -> None:
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")
    base = {"LD_PRELOAD": "/opt/libtcmalloc.so.4 /opt/libkeep.so", "PATH": "/bin",
            "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1:glibc.cpu.hwcaps=-AVX2"}
    glibc = ProcessEnvironment().apply(base, dirs=[str(tmp_path)])
    assert glibc["LD_PRELOAD"] == "/opt/libkeep.so" and glibc["GLIBC_TUNABLES"] == "glibc.cpu.hwcaps=-AVX2"
    assert glibc[ENV_MARKER] == "glibc" and glibc["PATH"] == "/bin"
    jem = ProcessEnvironment("jemalloc", "omp-passive").apply(base, dirs=[str(tmp_path)])
    assert jem["LD_PRELOAD"] == f"{tmp_path}/libjemalloc.so.2 /opt/libkeep.so"
    assert jem["OMP_WAIT_POLICY"] == "PASSIVE" and jem[ENV_MARKER] == "jemalloc+omp-passive"
    tuned = ProcessEnvironment("glibc-tuned").apply({}, dirs=[str(tmp_path)])
    assert tuned["GLIBC_TUNABLES"] == TUNED_TUNABLES and "LD_PRELOAD" not in tuned


def test_a_missing_library_is_unavailable_with_the_install_command(tmp_path: Path) -> None:
    ok, missing = resolve_environments("auto", dirs=[str(tmp_path)])
    assert [e.name for e in ok] == ["glibc", "glibc-tuned"]
    assert [name for name, _ in missing] == ["jemalloc", "tcmalloc"]
    assert "apt-get install libjemalloc2" in missing[0][1] and "apt-get install libtcmalloc-minimal4" in missing[1][1]
    with pytest.raises(InputError, match="apt-get install libjemalloc2"):
        ProcessEnvironment("jemalloc").apply({}, dirs=[str(tmp_path)])


def test_recipe_field_round_trips_and_is_absent_when_unused(write_recipe) -> None:
    plain = load_recipe(write_recipe(tiny_recipe()))
    assert plain.search.environments == () and "environments" not in plain.to_dict()["search"]
    listed = load_recipe(write_recipe(tiny_recipe().replace("[search]", '[search]\nenvironments = ["jemalloc", '
                                                            '"glibc", "JEMALLOC", "tcmalloc+omp-passive"]')))
    assert listed.search.environments == ("jemalloc", "glibc", "tcmalloc+omp-passive")
    assert Recipe.from_dict(json.loads(json.dumps(listed.to_dict()))) == listed
    auto = load_recipe(write_recipe(tiny_recipe().replace("[search]", '[search]\nenvironments = "auto"')))
    assert auto.to_dict()["search"]["environments"] == "auto"
    for bad, message in (('"all"', "'all' is not allowed"), ("[]", "must not be empty"),
                         ('["jemallc"]', r"field 'search.environments\[0\]': unknown environment 'jemallc'")):
        path = write_recipe(tiny_recipe().replace("[search]", f"[search]\nenvironments = {bad}"))
        with pytest.raises(RecipeError, match=message):
            load_recipe(path)


def test_crossing_keeps_named_environments_and_reports_missing_ones() -> None:
    specs = {"eager": VariantSpec.parse("eager").to_dict(), "frozen+tcmalloc": VariantSpec.parse(
        "frozen+tcmalloc").to_dict()}
    variants, out_specs, unavailable, base_of = cross_environments(("eager", "frozen+tcmalloc"), specs,
                                                                   ("glibc", "glibc-tuned"))
    assert variants[:2] == ("eager", "eager+glibc-tuned")
    assert base_of["eager+glibc-tuned"] == "eager" and out_specs["eager+glibc-tuned"]["environment"] == "glibc-tuned"
    if _available("tcmalloc"):
        assert variants[2:] == ("frozen+tcmalloc",) and not unavailable
    else:
        assert unavailable[0]["variant"] == "frozen+tcmalloc"
    unchanged = cross_environments(("eager",), specs, ())
    assert unchanged[0] == ("eager",) and unchanged[3] == {}


def test_generated_scripts_are_valid(tmp_path: Path) -> None:
    for name in ("glibc", "glibc-tuned+omp-passive", "jemalloc", "tcmalloc+omp-active"):
        env = ProcessEnvironment.parse(name)
        script = tmp_path / "run.sh"
        script.write_text(run_script(env, default_command="true"))
        assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0
        compile("\n".join(python_prelude(env)), "prelude", "exec")
    assert python_prelude(ProcessEnvironment()) == []


@pytest.mark.worker
@pytest.mark.skipif(not _available("jemalloc"), reason="libjemalloc2 not installed")
def test_run_sh_starts_a_process_with_jemalloc_mapped(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text(run_script(ProcessEnvironment("jemalloc"), default_command="true"))
    probe = "import os; print(os.environ['AUTOTUNE_ENVIRONMENT'], 'jemalloc' in open('/proc/self/maps').read())"
    out = subprocess.run(["sh", str(script), sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["jemalloc", "True"]


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.worker
@pytest.mark.skipif(not _available("jemalloc"), reason="libjemalloc2 not installed")
def test_a_jemalloc_worker_has_jemalloc_mapped() -> None:
    worker = WorkerProcess(environment=ProcessEnvironment("jemalloc"))
    try:
        pid = worker.hello["pid"]
        assert "libjemalloc.so.2" in _maps(pid)
        assert _environ(pid)[ENV_MARKER] == "jemalloc"
    finally:
        worker.close()
    plain = WorkerProcess()
    try:
        assert "jemalloc" not in _maps(plain.hello["pid"])
    finally:
        plain.close()


@pytest.mark.worker
def test_a_glibc_tuned_worker_sees_its_tunables() -> None:
    worker = WorkerProcess(environment=ProcessEnvironment("glibc-tuned", "omp-passive"))
    try:
        env = _environ(worker.hello["pid"])
        # glibc parses the variable in place at start-up (its first ':' becomes the end of the string)
        assert env["GLIBC_TUNABLES"].startswith(TUNED_TUNABLES.split(":")[0])
        assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env[ENV_MARKER] == "glibc-tuned+omp-passive"
    finally:
        worker.close()


@pytest.mark.worker
def test_glibcs_dynamic_threshold_follows_history_and_the_tuned_one_does_not() -> None:
    """The mechanism ARCHITECTURE.md describes, on the real glibc (benchmarks/mmap_threshold_demo.py)."""
    import os

    demo = Path(__file__).resolve().parents[1] / "benchmarks" / "mmap_threshold_demo.py"

    def where(env: ProcessEnvironment) -> list[str]:
        out = subprocess.run([sys.executable, str(demo)], env=env.apply(os.environ), capture_output=True,
                             text=True, check=True)
        return [line.rsplit("-> ", 1)[1] for line in out.stdout.splitlines()]

    assert where(ProcessEnvironment()) == ["mmap", "heap", "mmap", "heap", "mmap"]
    assert where(ProcessEnvironment("glibc-tuned")) == ["heap"] * 5


@pytest.mark.worker
def test_candidates_run_in_their_environment_and_never_in_another(write_recipe) -> None:
    recipe = load_recipe(write_recipe(tiny_recipe(variants='["eager"]')))
    with Runner(fresh_measure=True) as runner:
        client = WorkerClient(runner)
        first = client.measure(recipe, "eager+glibc-tuned", 2, SETTINGS, timeout=120)
        assert first["status"] == "ok"
        tuned_pid = runner._workers["measure"].hello["pid"]
        assert _environ(tuned_pid)[ENV_MARKER] == "glibc-tuned"
        second = client.measure(recipe, "eager", 2, SETTINGS, timeout=120)
        assert second["status"] == "ok"
        assert runner._workers["measure"].hello["pid"] != tuned_pid  # a fresh worker, in glibc's default
        assert runner.stats.workers_started == 2
    # a worker asked directly for a candidate of another environment refuses it
    worker = WorkerProcess()
    try:
        reply = worker.request({"op": "measure", "recipe": recipe.to_dict(), "variant": "eager+glibc-tuned",
                                "batch_size": 2, "settings": SETTINGS.to_dict()}, timeout=120)
        assert not reply["ok"] and "started in 'glibc'" in reply["error"]["message"]
    finally:
        worker.close()


@pytest.mark.worker
def test_showdown_workers_and_the_artifact_run_in_the_finalists_environment(write_recipe, tmp_path: Path) -> None:
    """stage (the showdown's fresh workers) and artifact go to a worker in the variant's environment; the
    artifact's run.sh and load.py (run as a script) start their process in it."""
    import os

    from autotune.deployment import ARTIFACT_DIR, RUN_SCRIPT_NAME, write_deployment

    recipe = load_recipe(write_recipe(tiny_recipe(variants='["frozen"]')))
    with Runner() as runner:
        staged = WorkerClient(runner).stage(recipe.to_dict(), "frozen+glibc-tuned", 2, warmup_iterations=0,
                                            warmup_seconds=0.1, timeout=120)
        assert staged.get("status") == "ok", staged
        assert _environ(runner._workers["measure"].hello["pid"])[ENV_MARKER] == "glibc-tuned"
    spec = VariantSpec.parse("frozen+glibc-tuned")
    doc = {"recipe": dict(recipe.to_dict(), device_resolved="cpu"),
           "recommendation": {"variant": spec.name, "batch_size": 2, **spec.to_dict()}}
    write_deployment(recipe.to_dict(), doc, tmp_path, make_runner=Runner, timeout=300, profile=False)
    section = doc["artifact"]
    assert section["status"] == "ok", section
    assert section["environment"]["name"] == "glibc-tuned"
    assert section["environment"]["variables"] == {"GLIBC_TUNABLES": TUNED_TUNABLES}
    art = tmp_path / ARTIFACT_DIR
    assert os.access(art / RUN_SCRIPT_NAME, os.X_OK)
    assert "ENVIRONMENT = 'glibc-tuned'" in (art / "load.py").read_text()
    probe = "import os; print(os.environ.get('GLIBC_TUNABLES', '').split(':')[0])"
    env = {k: v for k, v in os.environ.items() if k not in (ENV_MARKER, "GLIBC_TUNABLES")}
    out = subprocess.run(["sh", str(art / RUN_SCRIPT_NAME), sys.executable, "-c", probe], capture_output=True,
                         text=True, env=env, check=True)
    assert out.stdout.strip() == TUNED_TUNABLES.split(":")[0]
    ran = subprocess.run(["sh", str(art / RUN_SCRIPT_NAME)], capture_output=True, text=True, timeout=300,
                         env=dict(env, PYTHON=sys.executable), check=False)
    assert ran.returncode == 0 and "outputs:" in ran.stdout, ran.stderr[-2000:]
    direct = subprocess.run([sys.executable, str(art / "load.py")], capture_output=True, text=True, timeout=300,
                            env=env, check=False)  # started again by its prelude, in the environment
    assert direct.returncode == 0 and "outputs:" in direct.stdout, direct.stderr[-2000:]


def test_the_leaders_environment_twin_competes_second_in_the_showdown() -> None:
    from autotune.tuner import _with_default_environment

    def row(variant: str, batch: int = 8, throughput: float = 100.0, **kw: object) -> dict[str, object]:
        return {"variant": variant, "batch_size": batch, "status": "ok", "feasible": True,
                "throughput": throughput, **kw}

    rows = [row("frozen+jemalloc"), row("eager+jemalloc"), row("frozen"), row("frozen", 16)]
    # a leader in another environment: its glibc-default twin second
    assert _with_default_environment([rows[0], rows[1]], rows) == [rows[0], rows[2], rows[1]]
    assert _with_default_environment([rows[2], rows[0]], rows) == [rows[2], rows[0]]  # already a finalist
    infeasible = [rows[0], row("frozen", feasible=False)]
    assert _with_default_environment([rows[0]], infeasible) == [rows[0]]
    # a leader in the default: the best of its twins in the other environments, at the same batch
    leader = row("frozen", throughput=120.0)
    others = [leader, row("frozen+tcmalloc", throughput=90.0), row("frozen+glibc-tuned", throughput=110.0),
              row("frozen+jemalloc", 16, throughput=200.0), row("eager", throughput=80.0)]
    assert _with_default_environment([leader, others[4]], others) == [leader, others[2], others[4]]
    assert _with_default_environment([leader], [leader, row("eager+jemalloc")]) == [leader]  # no twin


def test_the_reproduction_script_starts_itself_in_the_environment(write_recipe) -> None:
    from autotune.report.reproduce import reproduce_script

    recipe = load_recipe(write_recipe(tiny_recipe(variants='["frozen"]')))

    def script(variant: str) -> str:
        spec = VariantSpec.parse(variant)
        doc = {"recipe": dict(recipe.to_dict(), device_resolved="cpu"),
               "recommendation": {"variant": spec.name, "batch_size": 4, "throughput": 10.0, **spec.to_dict()}}
        text = reproduce_script(doc)
        compile(text, variant, "exec")
        return text

    tuned = script("frozen+tcmalloc")
    assert "ENVIRONMENT = 'tcmalloc'" in tuned and "os.execve(" in tuned
    assert tuned.index("os.execve(") < tuned.index("import torch")  # before torch is loaded
    assert "ENVIRONMENT" not in script("frozen")  # the default environment's script is as before


def test_a_base_variants_boundary_answer_is_every_environments_of_it() -> None:
    """Sizes and failures found for ``frozen`` are those of ``frozen+jemalloc`` too (a failure used to vanish:
    the environment's variant had neither sizes nor a row)."""
    from autotune.validation import ValidatedWorkload

    workload = ValidatedWorkload(device="cpu", variants=("eager", "frozen", "frozen+jemalloc", "eager+jemalloc"),
                                 unavailable=(), specs={}, info={}, memory_method="rss", host_memory_available=None,
                                 device_memory_capacity=None,
                                 base_of={"frozen+jemalloc": "frozen", "eager+jemalloc": "eager"})
    assert workload.bases().variants == ("eager", "frozen")
    failure = ("failed", "frozen: the build failed")
    assert workload.spread({"frozen": failure}) == {"frozen": failure, "frozen+jemalloc": failure}
    assert workload.spread({"eager": (1, 8)}) == {"eager": (1, 8), "eager+jemalloc": (1, 8)}


def test_a_tie_goes_to_the_default_environment_and_the_verdict_says_so() -> None:
    """resnet18's frozen@16 with glibc, tuned glibc and tcmalloc is one speed to plain processes: the tie-break
    picks glibc (nothing to preload), whichever allocator led the rounds."""
    from autotune.showdown import simplicity

    frozen = {"compiler": "frozen", "precision": "fp32", "memory_format": "contiguous"}
    plain, tuned = simplicity({**frozen, "variant": "frozen"}), simplicity({**frozen, "variant": "frozen+glibc-tuned"})
    assert plain < tuned == simplicity({**frozen, "variant": "frozen+tcmalloc"})
    assert simplicity({"compiler": "eager", "variant": "eager+jemalloc"}) < plain  # the compiler comes first
