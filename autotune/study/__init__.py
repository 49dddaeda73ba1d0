"""The study: the search over (variant, batch) as an Optuna study, persistent, resumable, shared by workers.

A study is the record of one tuning's search: every trial asks for one (variant, batch size), measures it in
a worker and stores the candidate row in the trial. It lives in a database (SQLite in ``--out`` by default,
any RDB URL such as PostgreSQL), so a run interrupted anywhere is resumed where it stopped, ``autotune
worker`` on identical machines joins it and shares the work, and optuna-dashboard can show it.

Why Optuna and not a grid: the space (variants × precisions × memory formats × threads × batch sizes) grows
multiplicatively, while a tuning has a time budget. TPE (NSGA-II for the Pareto objective) with constraint
handling spends that budget where the good configurations are, and the study's storage makes a run
resumable and lets identical machines share the work. The ``bracket`` strategy decides by its own logic and
uses the study only as that record.

One module per part, from the plain values up to the loops:

- :mod:`~autotune.study.space`: what is searched and how (``SearchSpace``, ``SearchSettings``,
  ``SearchOutcome``, the sampler, the metric names);
- :mod:`~autotune.study.urls`: a storage URL shown with its passwords masked, driver messages scrubbed;
- :mod:`~autotune.study.fingerprint`: the study's fingerprint, what its measurements depend on; refusing a
  study made for another setup (resume, join);
- :mod:`~autotune.study.model_identity`: the model's part of that fingerprint (the factory file's hash or
  its package's version, the inputs);
- :mod:`~autotune.study.heartbeat`: liveness of RUNNING trials (heartbeats, stale trials failed);
- :mod:`~autotune.study.storage`: opening the storage and the study; storage and ``--out`` failures as
  one-line input errors;
- :mod:`~autotune.study.rows`: the candidate rows the trials carry, read back;
- :mod:`~autotune.study.session`: one process's session on the study (``StudySession``): ask, heartbeat,
  tell or fail a trial; what is measured and in flight;
- :mod:`~autotune.study.loop`: ``Search``, the ``tpe`` loop (and the entry point of both strategies);
- :mod:`~autotune.study.bracket`: the ``bracket`` strategy's algorithm (pure: no Optuna, no storage);
- :mod:`~autotune.study.bracket_loop`: ``run_bracket``, that algorithm run on a session.

The package re-exports the names other modules use. A test that shortens a module-level setting patches it
in the module that reads it (``HEARTBEAT_*_S`` in :mod:`~autotune.study.heartbeat`, ``SQLITE_BUSY_TIMEOUT_S``
in :mod:`~autotune.study.storage`): they are deliberately not re-exported here, where patching would
change nothing.
"""

from autotune.study.bracket import Arm, BracketSearch, Proposal, coarse_grid, refined_batch_sizes
from autotune.study.bracket_loop import SCREEN_FRACTION, run_bracket, tell_row
from autotune.study.fingerprint import (
    FINGERPRINT_ATTR,
    fingerprint_differences,
    fingerprint_digest,
    recipe_fingerprint,
    study_fingerprint,
    verify_join,
)
from autotune.study.heartbeat import fail_stale_trials
from autotune.study.loop import MAX_REPEATS, Search
from autotune.study.rows import ROW_ATTR, SUMMARY_ATTRS, measured_rows, stored_rows
from autotune.study.session import IN_FLIGHT_POLL_S, TERMINAL_VARIANT_STATUSES, StudySession
from autotune.study.space import Evaluate, SearchOutcome, SearchSettings, SearchSpace, make_sampler, metric_names
from autotune.study.storage import (
    let_go_of_interrupted_frames,
    load_existing_study,
    make_storage,
    open_study,
    sqlite_file,
    storage_errors,
)
from autotune.study.urls import URL_EXAMPLES, display_url

__all__ = [
    "FINGERPRINT_ATTR",
    "IN_FLIGHT_POLL_S",
    "MAX_REPEATS",
    "ROW_ATTR",
    "SCREEN_FRACTION",
    "SUMMARY_ATTRS",
    "TERMINAL_VARIANT_STATUSES",
    "URL_EXAMPLES",
    "Arm",
    "BracketSearch",
    "Evaluate",
    "Proposal",
    "Search",
    "SearchOutcome",
    "SearchSettings",
    "SearchSpace",
    "StudySession",
    "coarse_grid",
    "display_url",
    "fail_stale_trials",
    "fingerprint_differences",
    "fingerprint_digest",
    "let_go_of_interrupted_frames",
    "load_existing_study",
    "make_sampler",
    "make_storage",
    "measured_rows",
    "metric_names",
    "open_study",
    "recipe_fingerprint",
    "refined_batch_sizes",
    "run_bracket",
    "sqlite_file",
    "storage_errors",
    "stored_rows",
    "study_fingerprint",
    "tell_row",
    "verify_join",
]
