"""The model's identity: what a recipe contributes to a study's fingerprint (the model and its inputs).

Kept apart from the recipe (:mod:`autotune.core.recipe`) because it reads more than the recipe: the factory
file's bytes and the installed packages' metadata, at the moment a study is opened or joined
(:mod:`autotune.study.fingerprint` puts it together with the device, torch and hardware), not when the recipe
is loaded; the parent alone does that.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

from autotune.core.recipe.spec import AccuracySpec, DataSpec, ModelSpec, Recipe
from autotune.errors import RecipeError


def factory_file(model: ModelSpec | DataSpec | AccuracySpec) -> Path | None:
    """The file a ``path/to/file.py:function`` factory is imported from (relative to the recipe's directory);
    None for a ``package.module:function`` factory. The same rule as the worker's import."""
    target = model.factory.rpartition(":")[0]
    if not (target.endswith(".py") or "/" in target):
        return None
    file = Path(target)
    return file if file.is_absolute() else Path(model.base_dir) / file


def _package_version(module: str) -> str | None:
    """``name version`` of the installed distribution that provides ``module``'s top-level package, read from
    metadata (nothing is imported); None for a module no distribution provides."""
    top = module.split(".", 1)[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _file_digest(file: Path | None, *, recipe_path: str, field: str) -> str | None:
    """The first 16 hex digits of a factory file's SHA-256 (None for a module factory); an unreadable file is a
    :class:`RecipeError` naming the field."""
    if file is None:
        return None
    try:
        return hashlib.sha256(file.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise RecipeError(f"{recipe_path}: field '{field}': cannot read '{file}': {exc.strerror or exc}") from None


def model_identity(recipe: Recipe) -> dict[str, Any]:
    """What the recipe contributes to a study's fingerprint: the model and its inputs.

    A ``file.py:function`` factory is identified by the file's contents (SHA-256), not only by its name:
    an edited model is another study. A ``module:function`` factory by the version of the package that
    provides it. The recipe's directory is not in it (two checkouts of one project match).
    Raises :class:`RecipeError` when the factory file cannot be read.
    """
    file = factory_file(recipe.model)
    digest = _file_digest(file, recipe_path=recipe.path, field="model.factory")
    module = recipe.model.factory.rpartition(":")[0]
    parts = {
        "model.factory": recipe.model.factory,
        "model.factory_file_sha256": digest,
        "model.factory_package": None if file is not None else _package_version(module),
        "model.kwargs": json.dumps(dict(recipe.model.kwargs), sort_keys=True),
        "inputs": json.dumps([dict(name=i.name, shape=list(i.shape), dtype=i.dtype, vocab_size=i.vocab_size)
                              for i in recipe.inputs], sort_keys=True),
    }
    # inputs only added to the fingerprint when set, so studies made before these fields existed still match
    extra = [dict(name=i.name, keyword=i.keyword, range=list(i.range) if i.range else None)
             for i in recipe.inputs if i.keyword or i.range]
    if extra:
        parts["inputs.keyword_range"] = json.dumps(extra, sort_keys=True)
    if recipe.data is not None:
        data_digest = _file_digest(factory_file(recipe.data), recipe_path=recipe.path, field="data.factory")
        parts["data"] = json.dumps({"factory": recipe.data.factory, "file_sha256": data_digest,
                                    "kwargs": dict(recipe.data.kwargs), "max_batches": recipe.data.max_batches,
                                    "buckets": list(recipe.data.buckets or []),
                                    "pad_values": dict(recipe.data.pad_values)}, sort_keys=True, default=str)
    if recipe.accuracy is not None:  # the budget decides which rows are rejected: another budget is another study
        acc = recipe.accuracy
        metric_digest = (_file_digest(factory_file(acc), recipe_path=recipe.path, field="accuracy.metric")
                         if acc.metric else None)
        # undecided = "reject" rejects rows that "accept" keeps; the default stays out, so studies made before the
        # field existed keep their fingerprint
        strict = {"undecided": acc.undecided} if acc.undecided != "accept" else {}
        parts["accuracy"] = json.dumps({"metric": acc.metric, "file_sha256": metric_digest, "max_drop": acc.max_drop,
                                        "relative": acc.relative, **strict}, sort_keys=True)
    return parts
