"""What the artifact carries to serve: ``serve.py`` and its two siblings, ``serving.json``, other servers' configs.

``serve.py`` is :mod:`autotune.serving.server` copied as it is (with :mod:`autotune.serving.batcher` and
:mod:`autotune.serving.v2` beside it): standard library and numpy at the front end, the artifact's ``load.py``
in each instance, no autotune. ``serving.json`` holds its defaults (the model's name, pad values, and, once
the serving search ran, the recommended instances, threads, max batch and delay), so ``./run.sh serve --port N``
starts the measured configuration with no other argument. The files for Triton, TorchServe and Ray Serve
(:mod:`autotune.serving.configs`) say the same configuration in those servers' terms.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SERVING_JSON = "serving.json"


def server_files() -> dict[str, str]:
    """Artifact file name -> module file relative to this package: ``server.py`` as ``serve.py``, the others flat
    under their own names (:data:`autotune.serving.server.SHIPPED`)."""
    from autotune.serving.server import SHIPPED

    return {("serve.py" if name == "server.py" else Path(name).name): name for name in SHIPPED}


def model_name_of(recipe_name: str, explicit: str | None = None) -> str:
    """The name the server serves under: ``serving.model_name``, else the recipe's name as a URL-safe
    identifier (:func:`autotune.core.recipe.spec.safe_model_name`)."""
    from autotune.core.recipe.spec import safe_model_name

    return explicit or safe_model_name(recipe_name)


def copy_server(directory: Path) -> list[str]:
    """Copy the server's modules into ``directory`` (the artifact's staging directory)."""
    here = Path(__file__).resolve().parent
    files = server_files()
    for target, source in files.items():
        shutil.copyfile(here / source, directory / target)
    return list(files)


def write_serving_json(directory: Path, settings: Mapping[str, Any]) -> None:
    """``serving.json``, replaced atomically (a reader never sees half of it)."""
    tmp = directory / f".{SERVING_JSON}.{os.getpid()}"
    tmp.write_text(json.dumps(dict(settings), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, directory / SERVING_JSON)


def read_serving_json(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / SERVING_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_other_servers(directory: Path, files: Mapping[str, str]) -> list[str]:
    """The configuration files for other servers (relative paths under ``directory``), written; their names."""
    out = []
    for rel, text in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        out.append(rel)
    return out


__all__ = ["SERVING_JSON", "copy_server", "model_name_of", "read_serving_json",
           "write_other_servers", "write_serving_json"]
