"""The package version, in a module of its own so that the pipeline can stamp reports with it
without importing the package's ``__init__`` (which imports the public API, which imports the
pipeline: a cycle)."""

from __future__ import annotations

__version__ = "0.1.0"
