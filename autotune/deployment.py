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

import ctypes
import os
import re
import shutil
import sys
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
    once complete and in one atomic exchange (:func:`swap_in`), so a failed build never leaves half an artifact,
    nor an old run's artifact beside a report that recommends something else, and a kill leaves the old
    artifact or the new one, never none. A Ctrl-C removes the staging directory; after a SIGKILL the next run
    on this ``--out`` does (:func:`clean_staging`).
    """
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
        res = _saved_by_worker(recipe_data, variant, batch, staging, make_runner=make_runner, timeout=timeout,
                               profile=profile)
    except BaseException:  # Ctrl-C: the worker is killed (Runner); what it wrote so far goes, artifact/ stays
        shutil.rmtree(staging, ignore_errors=True)
        raise
    wall = time.monotonic() - t0
    section = dict(res.get("artifact") or {"status": "failed", "reason": "no artifact section in the reply"})
    env = environment_of_variant(variant)
    section.update(variant=variant, batch_size=batch, dir=ARTIFACT_DIR, loader=LOADER_NAME,
                   wall_seconds=round(wall, 3),
                   environment={"name": env.name, "description": describe(env), "variables": env.variables(),
                                "run_script": RUN_SCRIPT_NAME})
    if section.get("status") == "ok":
        try:
            staging.mkdir(parents=True, exist_ok=True)
            doc["artifact"] = cast("ArtifactSection", section)
            text = loader_script(doc) or ""
            (staging / LOADER_NAME).write_text(text, encoding="utf-8")
            run = staging / RUN_SCRIPT_NAME
            run.write_text(run_script(doc) or "", encoding="utf-8")
            run.chmod(0o755)
            served = _server_files(staging, recipe_data, section.get("interface") or {})
            swap_in(staging, final)
            section["files"] = directory_files(final)
            section["size_bytes"] = sum(f["bytes"] for f in section["files"]
                                        if f["name"] not in (LOADER_NAME, RUN_SCRIPT_NAME, TRAFFIC_NAME, *served))
            section["loader_code"] = text
        except OSError as exc:
            section = {**section, "status": "failed", "reason": f"writing {final} failed: {exc.strerror or exc}"}
            _remove_dir(final)
    else:  # a failed build: no artifact/ beside a report that says so (nor an older run's, recommending another)
        _remove_dir(final)
    shutil.rmtree(staging, ignore_errors=True)
    # the worker's sections are plain dicts (ArtifactResult); ArtifactSection / ProfileSection are their shapes
    doc["artifact"] = cast("ArtifactSection", section)
    if profile:
        prof = res.get("profile")
        profile_section: ProfileSection = (cast("ProfileSection", dict(prof)) if isinstance(prof, Mapping) else
                                           {"status": "failed", "reason": "no profile in the reply", "tables": []})
        profile_section.setdefault("batch_size", batch)
        doc["profile"] = profile_section


def _saved_by_worker(recipe_data: Mapping[str, Any], variant: str, batch: int, directory: Path, *,
                     make_runner: Callable[[], Runner], timeout: float, profile: bool) -> dict[str, Any]:
    """A fresh worker's op ``artifact`` into ``directory``: ``{"artifact": section, "profile": section | None}``,
    a failure of the worker itself (crash, timeout, refusal) in both sections: nothing it wrote is trusted."""
    from autotune.client import WorkerClient
    from autotune.errors import AutotuneError

    try:
        with make_runner() as runner:
            res: dict[str, Any] = dict(WorkerClient(runner).artifact(recipe_data, variant, batch, directory=directory,
                                                                     profile=profile, timeout=timeout))
    except AutotuneError as exc:
        res = {"status": "failed", "reason": str(exc)}
    if "status" in res:  # a CallFailure
        reason = f"the artifact worker failed: {res.get('reason') or 'no reason given'}"
        res = {"artifact": {"status": "failed", "reason": reason},
               "profile": {"status": "failed", "reason": reason, "tables": []} if profile else None}
    return res


def write_finalist_artifact(recipe_data: Mapping[str, Any], row: Mapping[str, Any], directory: Path, *,
                            make_runner: Callable[[], Runner], timeout: float) -> dict[str, Any]:
    """A showdown finalist's artifact in ``directory``, as the run would ship it if it won: the model file a fresh
    worker saves (no profile) and the ``load.py`` the deployment step would write for it (the same
    :func:`~autotune.report.loader.loader_script`, from a document whose recommendation is ``row``). Returns the
    artifact section: ``status`` ok with ``kind``, or failed with its ``reason``. The showdown then stages the
    finalist from it (op ``stage`` with ``shipped``)."""
    from autotune.report.loader import loader_script

    variant, batch = str(row["variant"]), int(row["batch_size"])
    res = _saved_by_worker(recipe_data, variant, batch, directory, make_runner=make_runner, timeout=timeout,
                           profile=False)
    section = dict(res.get("artifact") or {"status": "failed", "reason": "no artifact section in the reply"})
    if section.get("status") != "ok":
        return section
    section.update(variant=variant, batch_size=batch, dir=str(directory), loader=LOADER_NAME)
    doc = {"recipe": {**recipe_data, "device_resolved": "cpu"}, "recommendation": dict(row), "artifact": section}
    try:
        (directory / LOADER_NAME).write_text(loader_script(doc) or "", encoding="utf-8")
    except OSError as exc:
        return {**section, "status": "failed", "reason": f"writing {directory / LOADER_NAME} failed: "
                                                          f"{exc.strerror or exc}"}
    return section


def finalists_dir(out_dir: Path) -> Path:
    """Where the showdown saves its finalists' artifacts (removed after it; a killed run's by :func:`clean_staging`)."""
    return out_dir / f".{ARTIFACT_DIR}.finalists.{os.getpid()}"


#: The traffic the artifact was measured on (written by the worker: autotune.worker.artifact.save_traffic).
TRAFFIC_NAME = "traffic.npz"


def _server_files(staging: Path, recipe_data: Mapping[str, Any], interface: Mapping[str, Any]) -> list[str]:
    """``serve.py`` and its siblings, and ``serving.json`` with the model's name, the inputs' dynamic dims (the
    batcher pads them to a batch's longest) and pad values (the serving search adds the recommended
    configuration): every artifact can be served with ``./run.sh serve``."""
    from autotune.serving.ship import SERVING_JSON, copy_server, model_name_of, write_serving_json

    serving = recipe_data.get("serving") or {}
    data = recipe_data.get("data") or {}
    dynamic = {str(x["name"]): [int(d) for d in x.get("dynamic_dims") or [] if int(d) > 0]  # dim 0: the batch
               for x in interface.get("inputs") or []}
    dynamic = {name: dims for name, dims in dynamic.items() if dims}
    write_serving_json(staging, {
        "model_name": model_name_of(str(recipe_data.get("name") or "model"), serving.get("model_name")),
        "pad_values": dict(data.get("pad_values") or {}),
        "dynamic_dims": dynamic,
    })
    return [*copy_server(staging), SERVING_JSON]


#: ``renameat2``'s flag that swaps two paths atomically (Linux 3.15, glibc 2.28; ext4, xfs, btrfs, tmpfs, ...).
RENAME_EXCHANGE = 2
#: The staging directory's name (``.artifact.<pid>``) and a swapped-out artifact's (``.artifact.old.<pid>``).
STAGING_NAME = re.compile(rf"\.{ARTIFACT_DIR}\.(old\.|finalists\.)?[0-9]+")


def swap_in(staging: Path, final: Path) -> None:
    """Put ``staging`` in place of ``final`` so that a kill at any moment leaves the old artifact or the new one.

    Pseudo-code::

        if final does not exist:            rename(staging, final)                  # atomic
        elif renameat2(RENAME_EXCHANGE):    swap(staging, final); rmtree(staging)   # atomic; staging holds the old
        else:                               rename(final, .artifact.old.<pid>); rename(staging, final); rmtree(old)

    The fallback (no ``renameat2``, or a filesystem without the exchange) has a window between its two renames
    in which ``artifact/`` is missing: :func:`clean_staging`, run by the next process that locks the directory,
    puts ``.artifact.old.<pid>`` back then.
    """
    if not final.exists():
        os.rename(staging, final)
        return
    if _exchange(staging, final):
        _remove_dir(staging)
        return
    old = final.parent / f".{ARTIFACT_DIR}.old.{os.getpid()}"
    _remove_dir(old)
    os.rename(final, old)
    os.rename(staging, final)
    _remove_dir(old)


def _exchange(a: Path, b: Path) -> bool:
    """``renameat2(a, b, RENAME_EXCHANGE)``; False where the system or the filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE)
    return bool(rc == 0)


def _remove_dir(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def clean_staging(out_dir: Path) -> list[Path]:
    """What killed runs left of their artifact step in ``out_dir`` (call with its lock held: :mod:`autotune.outdir`).

    A swapped-out artifact whose swap never finished (no ``artifact/``) is put back; every other staging or
    swapped-out directory is removed. Returns the removed paths.
    """
    removed: list[Path] = []
    final = out_dir / ARTIFACT_DIR
    left = sorted(p for p in out_dir.glob(f".{ARTIFACT_DIR}.*") if STAGING_NAME.fullmatch(p.name))
    for path in left:
        if not final.exists() and ".old." in path.name and path.is_dir():
            os.rename(path, final)
            continue
        _remove_dir(path)
        removed.append(path)
    return removed


#: What must be the same for a resumed run to keep the last run's artifact: the machine and torch it was built with.
_SAME_MACHINE = ("hostname", "cpu_model", "torch_version")


def previous_report(out_dir: Path) -> dict[str, Any] | None:
    """The last run's report.json in ``out_dir`` as it was when this run started (None: none, or unreadable).

    Read before the run writes anything: the report is rewritten as the run goes, so by the artifact step the file
    holds this run's document."""
    import json

    try:
        doc = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def reusable_deployment(previous: Mapping[str, Any] | None, doc: Mapping[str, Any], out_dir: Path
                        ) -> dict[str, Any] | None:
    """The last run's ``artifact``, ``profile`` and ``artifact_check`` sections when this run would build and time
    the same artifact again (issue 32: a resumed run measured nothing new, and rebuilt and re-profiled its
    artifact anyway); None otherwise.

    The same means: the same recommendation (variant and batch), recipe, autotune version, machine (hostname, CPU
    model) and torch; and ``OUT/artifact/`` still holds every file the section lists, at its size. Deleting
    ``OUT/artifact/`` makes the next run build it again."""
    if not isinstance(previous, Mapping):
        return None
    art, rec = previous.get("artifact"), doc.get("recommendation")
    if not isinstance(art, Mapping) or art.get("status") != "ok" or not isinstance(rec, Mapping):
        return None
    if (art.get("variant"), art.get("batch_size")) != (rec.get("variant"), rec.get("batch_size")):
        return None
    if previous.get("tool") != doc.get("tool") or previous.get("recipe") != doc.get("recipe"):
        return None
    before, now = previous.get("environment") or {}, doc.get("environment") or {}
    if any(before.get(key) != now.get(key) for key in _SAME_MACHINE):
        return None
    files = art.get("files")
    if not isinstance(files, list) or not files:
        return None
    for f in files:
        path = out_dir / ARTIFACT_DIR / str(f.get("name"))
        if not path.is_file() or path.stat().st_size != f.get("bytes"):
            return None
    out: dict[str, Any] = {"artifact": {**art, "reused": True}}
    if isinstance(previous.get("profile"), Mapping):
        out["profile"] = previous["profile"]
    check = previous.get("artifact_check")
    if isinstance(check, Mapping) and check.get("status") == "ok":
        out["artifact_check"] = {**check, "reused": True}
    return out


__all__ = ["ARTIFACT_DIR", "LOADER_NAME", "RUN_SCRIPT_NAME", "clean_staging", "finalists_dir", "previous_report",
           "reusable_deployment", "swap_in", "write_deployment", "write_finalist_artifact"]
