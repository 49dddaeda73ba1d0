"""``[generate]`` recipes: ``generate()`` of a causal LM tuned per configuration and concurrency (issue 33).

One concept per module: ``configs`` (the configurations, the reference, simplicity), ``points`` (a point's
statistics: TTFT, ITL, tokens/s, compile), ``agreement`` (greedy tokens against the reference), ``boundary``
(the concurrency boundary on the batch boundary's search), ``search`` (the points, the pick, the side-by-side
rounds), ``artifact`` (``load.py`` returning a ready ``generate``), ``stage`` (the run: report and artifact).
The parent's side; the worker's is :mod:`autotune.worker.generation`. No torch.
"""

from __future__ import annotations

from autotune.generate.stage import run_generate

__all__ = ["run_generate"]
