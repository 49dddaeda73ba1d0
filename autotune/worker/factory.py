"""Resolving a factory reference (``module:function`` or ``file.py:function``) to the callable it names.

One function for the model factory and the data factory, so both go wrong the same way: every failure
(module missing, attribute missing, file missing, import raising) is one :class:`WorkloadError` that names the
recipe field and what was found. No torch here; the callers (in the worker) import it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from autotune.core.recipe import AccuracySpec, DataSpec, ModelSpec
from autotune.errors import WorkloadError


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: what a report row has room for."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def resolve_factory(spec: ModelSpec | DataSpec | AccuracySpec, *, recipe_path: str,
                    field: str = "model.factory") -> Any:
    """Import ``module:function`` or ``file.py:function`` (relative to the recipe); an ``[accuracy]`` metric is
    resolved the same way (its ``factory`` is the metric's reference), from the same module object as a data
    factory in the same file, so module-level labels are shared."""
    where = f"{recipe_path}: field '{field}'"
    target, _, attr = spec.factory.rpartition(":")
    if target.endswith(".py") or "/" in target:
        file = Path(target)
        if not file.is_absolute():
            file = Path(spec.base_dir) / file
        if not file.exists():
            raise WorkloadError(f"{where}: file '{file}' not found (paths are relative to the recipe)")
        mod_name = f"autotune_user_{abs(hash(str(file.resolve())))}"
        module = sys.modules.get(mod_name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(mod_name, file)
            if loader_spec is None or loader_spec.loader is None:
                raise WorkloadError(f"{where}: cannot import '{file}' as a Python module")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[mod_name] = module
            try:
                loader_spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[mod_name]
                raise WorkloadError(f"{where}: importing '{file}' failed: {one_line(exc)}") from None
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise WorkloadError(f"{where}: cannot import module '{target}': {one_line(exc)}") from None
        except Exception as exc:
            raise WorkloadError(f"{where}: importing module '{target}' failed: {one_line(exc)}") from None
    try:
        factory = getattr(module, attr)
    except AttributeError:
        raise WorkloadError(f"{where}: module '{target}' has no attribute '{attr}'") from None
    if not callable(factory):
        raise WorkloadError(f"{where}: '{spec.factory}' is not callable")
    return factory
