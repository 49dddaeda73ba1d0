"""What a study's measurements depend on (its fingerprint), and the refusal of a study made for another setup.

A study's rows are only worth reusing (a resume, a worker joining from another machine, the boundaries
read back by :mod:`autotune.variant_boundaries`) where they were measured on the same thing: the same model code
and inputs, the same resolved device, the same torch, the same hardware. The fingerprint is those parts,
stored with the study when it is made; a digest of them is what a study is matched on, and on a mismatch
the parts say what differs, so the message names it ("torch: study 2.5.1, here 2.6.0") rather than
refusing with a bare hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import InputError
from autotune.study.urls import display_url

if TYPE_CHECKING:
    import optuna

    from autotune.core.recipe import Recipe
    from autotune.study.space import SearchSettings

#: Study attribute holding the fingerprint's parts (what a study measures, on what, with which torch).
FINGERPRINT_ATTR = "fingerprint"


def recipe_fingerprint(recipe_data: Mapping[str, Any]) -> str:
    """The fingerprint of studies made before :func:`study_fingerprint`: model, inputs, device as written.

    It did not cover the factory file's contents, the resolved device, torch or the hardware. A study that
    carries only this one is accepted on resume when it matches, and then gets the full fingerprint.
    """
    key = {k: recipe_data[k] for k in ("model", "inputs", "device") if k in recipe_data}
    key["model"] = {k: v for k, v in dict(key.get("model", {})).items() if k != "base_dir"}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _torch_version() -> str | None:
    """``torch.__version__`` (with its build tag, e.g. ``2.14.1+cu130``) without importing torch in this process:
    read from ``torch/version.py`` where the package is found, else from its metadata (no build tag)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        spec = importlib.util.find_spec("torch")  # a top-level package: found, not imported
        for location in (spec.submodule_search_locations or []) if spec else []:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", (Path(location) / "version.py").read_text(),
                          re.M)
            if m:
                return m[1]
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def study_fingerprint(recipe: Recipe, device: str) -> dict[str, Any]:
    """What a study's measurements depend on, part by part (JSON values, so a stored copy compares equal).

    The model (the factory reference, the factory file's contents or the factory package's version, the
    kwargs), the inputs, the resolved device (``cpu``, ``cuda:0``; never ``auto``), torch's version and the
    stable hardware facts (architecture, CPU model, core count, GPU names: nothing that changes while the
    machine runs, such as free memory, clocks or the driver). Budgets and search knobs are not in it: a
    resume may change them.
    """
    from autotune.environment import hardware_fingerprint
    from autotune.study.model_identity import model_identity

    parts = {**model_identity(recipe), "device": device, "torch": _torch_version(), **hardware_fingerprint()}
    return dict(json.loads(json.dumps(parts)))


def fingerprint_digest(parts: Mapping[str, Any]) -> str:
    """The short digest of ``parts`` a study is matched on (``SearchSettings.recipe_fingerprint``)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _shown(value: Any) -> str:
    text = "none" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fingerprint_differences(stored: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """One ``part: study X, here Y`` per part that differs, in the order of ``here``'s parts."""
    keys = list(here) + [k for k in stored if k not in here]
    return [f"{k}: study {_shown(stored.get(k))}, here {_shown(here.get(k))}"
            for k in keys if stored.get(k) != here.get(k)]

def verify_fingerprint(study: optuna.Study, settings: SearchSettings, *,
                        recipe_data: Mapping[str, Any] | None = None, joining: bool = False) -> None:
    """Store the fingerprint in a new study; refuse (:class:`InputError`, saying what differs) a study whose
    fingerprint is not this one.

    A study made before the fingerprint had parts (only ``recipe_fingerprint``, of model, inputs and device as
    written) is resumed when that old fingerprint matches ``recipe_data``, and then gets the new one; a worker
    cannot join it (there is nothing to compare the factory file, torch or hardware with).
    """
    attrs = study.user_attrs
    stored = attrs.get("recipe_fingerprint")
    here = settings.fingerprint
    where = f"--study {settings.study_name}: the study in {display_url(settings.storage)}"
    if stored is None:
        if joining:
            raise InputError(f"{where} was not created by `autotune run` (it has no fingerprint); "
                             "refusing to join it")
        study.set_user_attr("recipe_fingerprint", settings.recipe_fingerprint)
        if here is not None:
            study.set_user_attr(FINGERPRINT_ATTR, dict(here))
        study.set_user_attr("objective", settings.objective)
        if recipe_data is not None:
            study.set_user_attr("recipe", dict(recipe_data))
        return
    stored_parts = attrs.get(FINGERPRINT_ATTR)
    if joining and here is not None and stored_parts is None:
        raise InputError(f"{where} was made by an older autotune whose fingerprint has no parts to compare (factory "
                         "file contents, torch, hardware); refusing to join it: resume it once with `autotune run` "
                         "where it was made, then join")
    if stored == settings.recipe_fingerprint:
        return
    if (stored_parts is None and here is not None and recipe_data is not None and not joining
            and stored == recipe_fingerprint(recipe_data)):
        study.set_user_attr("recipe_fingerprint", settings.recipe_fingerprint)  # an older study: adopt it
        study.set_user_attr(FINGERPRINT_ATTR, dict(here))
        return
    if stored_parts is not None and here is not None:
        what = "; ".join(fingerprint_differences(stored_parts, here)) or "the fingerprint"
    else:
        what = "model, inputs or device"
    if joining:
        raise InputError(f"{where} was made for another setup; refusing to join it: what differs: {what}. "
                         "Join with the same recipe and model file, device, torch and hardware as the study")
    raise InputError(f"{where} was made for another setup; what differs: {what}. "
                     "Pick another --study NAME or --out directory, or run where the study was made")


def verify_join(study: optuna.Study, settings: SearchSettings) -> None:
    """``autotune worker``: refuse (:class:`InputError`) to join a study whose fingerprint is not ``settings``'s."""
    verify_fingerprint(study, settings, joining=True)

