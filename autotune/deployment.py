"""The deployment step of a run, in the parent: a fresh worker saves the artifact, the parent puts it in place.

``autotune run`` ends with one more worker request (op ``artifact``, served by
:func:`autotune.worker.artifact.deploy`: the recommendation built once more, saved and profiled next to eager;
what is saved per compiler is described there). This side imports no torch: it asks a fresh worker through
:class:`autotune.client.WorkerClient`, swaps ``OUT/artifact/`` in whole once the worker is done, and writes
``load.py`` from the document (:mod:`autotune.report.loader`, so ``autotune report`` shows the same text), and
``run.sh``, which starts a process in the environment (allocator, OpenMP) the recommendation was measured in.

A failure here (an export that does not serialise, a full disk, a crash) is reported in the document's
``artifact`` and ``profile`` sections with the reason; the run and everything it measured stand.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotune.core.process_env import describe, environment_of_variant
from autotune.core.protocol import directory_files

if TYPE_CHECKING:
    from autotune.report.types import ArtifactSection, ProfileSection, ReportDocument
    from autotune.runner import Runner

#: The artifact's directory inside ``--out``, and the loader's file name in it.
ARTIFACT_DIR = "artifact"
LOADER_NAME = "load.py"
#: Starts load.py, or the service given as its arguments, in the process environment the recommendation was
#: measured in (allocator, OpenMP: :mod:`autotune.core.process_env`).
RUN_SCRIPT_NAME = "run.sh"


def write_deployment(recipe_data: Mapping[str, Any], doc: ReportDocument, out_dir: Path, *,
                     make_runner: Callable[[], Runner], timeout: float, profile: bool = True) -> None:
    """Build the recommendation's artifact into ``out_dir/artifact`` and its profile; set ``doc["artifact"]`` and
    ``doc["profile"]``. Never raises for a failure of the build, the profile or the worker (the sections then
    say why): the run and its measurements stand.

    The worker writes into a fresh temporary directory next to ``artifact/``; it replaces ``artifact/`` only
    once complete, so a failed build never leaves half an artifact, nor an old run's artifact beside a
    report that recommends something else.
    """
    from autotune.client import WorkerClient
    from autotune.errors import AutotuneError
    from autotune.report.loader import loader_script, run_script

    rec = doc.get("recommendation")
    if not isinstance(rec, Mapping):
        return
    variant, batch = str(rec["variant"]), int(rec["batch_size"])
    final = out_dir / ARTIFACT_DIR
    staging = out_dir / f".{ARTIFACT_DIR}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    t0 = time.monotonic()
    try:
        with make_runner() as runner:
            res = WorkerClient(runner).artifact(recipe_data, variant, batch, directory=staging, profile=profile,
                                                timeout=timeout)
    except AutotuneError as exc:
        res = {"status": "failed", "reason": str(exc)}
    wall = time.monotonic() - t0
    if "status" in res:  # a CallFailure: the worker crashed, timed out or refused: nothing it wrote is trusted
        reason = f"the artifact worker failed: {res.get('reason') or 'no reason given'}"
        res = {"artifact": {"status": "failed", "reason": reason},
               "profile": {"status": "failed", "reason": reason, "tables": []} if profile else None}
    section = dict(res.get("artifact") or {"status": "failed", "reason": "no artifact section in the reply"})
    env = environment_of_variant(variant)
    section.update(variant=variant, batch_size=batch, dir=ARTIFACT_DIR, loader=LOADER_NAME,
                   wall_seconds=round(wall, 3),
                   environment={"name": env.name, "description": describe(env), "variables": env.variables(),
                                "run_script": RUN_SCRIPT_NAME})
    shutil.rmtree(final, ignore_errors=True)
    if section.get("status") == "ok":
        try:
            staging.mkdir(parents=True, exist_ok=True)
            doc["artifact"] = cast("ArtifactSection", section)
            text = loader_script(doc) or ""
            (staging / LOADER_NAME).write_text(text, encoding="utf-8")
            run = staging / RUN_SCRIPT_NAME
            run.write_text(run_script(doc) or "", encoding="utf-8")
            run.chmod(0o755)
            os.replace(staging, final)
            section["files"] = directory_files(final)
            section["size_bytes"] = sum(f["bytes"] for f in section["files"]
                                        if f["name"] not in (LOADER_NAME, RUN_SCRIPT_NAME))
            section["loader_code"] = text
        except OSError as exc:
            section = {**section, "status": "failed", "reason": f"writing {final} failed: {exc.strerror or exc}"}
    shutil.rmtree(staging, ignore_errors=True)
    # the worker's sections are plain dicts (ArtifactResult); ArtifactSection / ProfileSection are their shapes
    doc["artifact"] = cast("ArtifactSection", section)
    if profile:
        prof = res.get("profile")
        profile_section: ProfileSection = (cast("ProfileSection", dict(prof)) if isinstance(prof, Mapping) else
                                           {"status": "failed", "reason": "no profile in the reply", "tables": []})
        profile_section.setdefault("batch_size", batch)
        doc["profile"] = profile_section


__all__ = ["ARTIFACT_DIR", "LOADER_NAME", "RUN_SCRIPT_NAME", "write_deployment"]
