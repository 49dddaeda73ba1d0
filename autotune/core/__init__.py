"""The shared core: what both processes import, and nothing process-specific (no torch).

autotune runs in two kinds of process (ARCHITECTURE.md, "Processes"): the parent (``autotune.*`` outside
:mod:`autotune.core` and :mod:`autotune.worker`: CLI, API, tuner, search, showdown, report), which never
imports torch, and workers (:mod:`autotune.worker`, ``python -m autotune.worker``), which build and time
models with it. What they share lives here, so neither has to import the other:

* :mod:`~autotune.core.recipe` (the recipe and its JSON form, which every request carries),
  :mod:`~autotune.core.protocol` (the requests and replies), :mod:`~autotune.core.measure_settings` (how a
  candidate is timed), :mod:`~autotune.core.variant_names` (the variant-name grammar);
* :mod:`~autotune.core.measurement` (what the timing loop returns, and its stored form),
  :mod:`~autotune.core.warmup` (steady-state detection), :mod:`~autotune.core.stats` (percentiles, bootstrap
  CIs), :mod:`~autotune.core.contention` (foreign CPU during a timing window);
* the vocabularies: :mod:`~autotune.core.vocab` (closed sets of names), :mod:`~autotune.core.sizes` (byte
  sizes), :mod:`~autotune.core.device_names` (device strings), :mod:`~autotune.core.events` (progress events).

Rules: a core module imports, of autotune, only other core modules and the package's infrastructure
(:mod:`autotune.errors`, :mod:`autotune.version`), never the parent's modules nor the worker's, and never
torch (``tests/test_layout.py`` holds both); beyond the standard library it uses numpy. The package imports
none of its modules.
"""
