"""The report document: validation, report.json / report.md / report.html, plots, console table.

The orchestrator builds one plain JSON-able dict (schema 2, see ARCHITECTURE.md) and hands it here;
nothing in this package measures anything. The document is the single source of truth:
``report.json`` is written first and ``autotune report DIR`` re-renders the other files from it,
so every rendering is a pure function of the document.

What a reader of the rendered report should be able to answer, in this order:

1. What should I deploy? (recommendation: variant, batch, throughput with its CI, latency
   percentiles, memory, compile time, warmup)
2. Why, and how sure is it? (speed-up over eager at the same batch size, the runner-up and
   whether its CI overlaps, correctness check, constraints, steady-state classification)
3. What else was tried and why it lost or failed? (every candidate with its status and reason)
4. Where is the memory wall? (batch boundary per variant, probes, fitted memory model)
5. On what machine, and how do I reproduce it? (environment, code, ``autotune measure`` command)
6. With a recipe's ``[serving]``: how do I serve it? (instances x threads, max batch and delay, the requests/s
   within the SLO against the naive servers, the command and the other servers' files)

Modules, each depending only on those above it:

- ``types``: the document as the tuner writes it, as TypedDicts (``ReportDocument``).
- ``schema``: schema constants and ``validate_report``.
- ``canonical``: ``normalise_report``, the canonical report.json text, ``load_report``.
- ``format``: number formatting and small accessors shared by every rendering.
- ``analysis``: ``rank_candidates`` and the sentences that explain the recommendation.
- ``snippets``, ``reproduce``, ``loader``: code fragments; ``measure_command`` and ``reproduce_code``;
  ``loader_script`` (``artifact/load.py``).
- ``plots``: ``render_plots`` (matplotlib, imported lazily).
- ``traffic``: the ``data`` section and the candidates' traffic by input shape, as rows and sentences.
- ``serving``: the ``serving`` section (the serving stage) as sentences and rows (``serving_view``).
- ``console``, ``sections`` + ``markdown`` / ``html``: the renderings.
- ``write``: ``write_reports``, the files on disk.
- ``assemble``: the document of a run: built when a run ends (``build_document``) and again from the stored
  study for ``autotune report DIR`` (``rerender``). Not re-exported: it is the one module here that reads
  the study (optuna), the showdown and the validated workload; the tuner and the CLI import it.

Each public function normalises (and so validates) the document once, then calls the module's
implementation, which can rely on lists, plain numbers and filled-in optional sections.
This package never imports torch, and optuna only in ``assemble``; matplotlib is imported inside the plot functions
only (and its absence costs the plots, not the report).
"""

from __future__ import annotations

from autotune.report.analysis import rank_candidates
from autotune.report.canonical import load_report, normalise_report
from autotune.report.console import console_table
from autotune.report.html import render_html
from autotune.report.markdown import render_markdown
from autotune.report.plots import PLOT_NAMES, render_plots
from autotune.report.reproduce import measure_command, reproduce_code
from autotune.report.schema import OBJECTIVES, REPORT_FILES, SCHEMA_VERSION, STATUSES, validate_report
from autotune.report.write import write_reports

__all__ = [
    "OBJECTIVES",
    "PLOT_NAMES",
    "REPORT_FILES",
    "SCHEMA_VERSION",
    "STATUSES",
    "console_table",
    "load_report",
    "measure_command",
    "normalise_report",
    "rank_candidates",
    "render_html",
    "render_markdown",
    "render_plots",
    "reproduce_code",
    "validate_report",
    "write_reports",
]
