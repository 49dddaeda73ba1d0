"""The worker's side of ``[generate]`` recipes: ``model.generate`` built per configuration and timed per token.

``prompts`` (the workload's prompts and the batches of a concurrency), ``build`` (a configuration: attention,
precision, cache and compile as ``generate`` kwargs), ``clock`` (TTFT and each decode step from the streamer),
``run`` (the op's actions: measure, probe, artifact). The parent's side is :mod:`autotune.generate`.
"""

from __future__ import annotations
