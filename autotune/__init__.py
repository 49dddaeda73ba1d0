"""autotune: find the fastest way to run a PyTorch model on the machine it runs on.

The public surface is small on purpose: the CLI (``autotune``), :func:`load_recipe` and
:func:`run_tuning`. Importing the package does not import torch or optuna.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
