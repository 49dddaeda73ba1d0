"""autotune: find the fastest way to run a PyTorch model on the machine it runs on.

The public API (:mod:`autotune.api`), keyword-only after the recipe, with typed results::

    import autotune
    recipe = autotune.make_recipe(model="torchvision.models:resnet18", inputs=[{"name": "x", "shape": [3, 64, 64]}],
                                  variants=["eager", "frozen"], batch_sizes=[1, 8])
    result = autotune.tune(recipe, out="out/resnet18", on_event=print)
    result.recommendation, autotune.find_batch_boundary(recipe, variant="eager", memory_budget=2 << 30)

Importing the package does not import torch or optuna (the work happens in worker processes).
"""

from __future__ import annotations

from autotune.api import (
    BatchBoundaries,
    BoundaryResult,
    CandidateResult,
    TuneResult,
    analyze_warmup,
    find_batch_boundary,
    load_recipe,
    make_recipe,
    measure,
    tune,
)
from autotune.core.events import Event
from autotune.version import __version__

__all__ = [
    "BatchBoundaries", "BoundaryResult", "CandidateResult", "Event", "TuneResult", "__version__", "analyze_warmup",
    "find_batch_boundary", "load_recipe", "make_recipe", "measure", "tune",
]
