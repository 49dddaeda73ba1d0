"""The one exception hierarchy of autotune.

Library code raises these; only the CLI turns them into messages and exit codes. Every
``AutotuneError`` carries a message meant for a person: it names the file, the field and
what is allowed, so the CLI can print it without a traceback.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class: anything autotune reports to a user as a clean error."""

    exit_code: int = 2


class InputError(AutotuneError):
    """Bad input from the user (file, recipe field, CLI flag). Exit code 2."""

    exit_code = 2


class RecipeError(InputError):
    """A recipe file is missing, malformed or has an invalid field."""


class WorkloadError(InputError):
    """The model factory or its inputs cannot be built or run as the recipe says."""


class DeviceUnavailableError(InputError):
    """The requested device does not exist on this machine."""


class VariantError(AutotuneError):
    """A variant could not be built or applied (reported as ``failed``, not fatal)."""


class BatchSpecificError(VariantError):
    """A variant's export specialised the batch it was built at, so it fails at any batch above 1 and works at 1:
    its row is ``failed`` with ``batch_specific``, and the search still tries the variant at batch 1."""


class UnsupportedSettingError(VariantError):
    """The model does not support a setting a configuration asks for (an attention implementation: a state-space
    model such as Mamba has no attention to choose). Every configuration with that setting fails alike, and the
    others may run: generate()'s reference then takes the next attention (``unsupported`` in the outcome)."""


class WorkerError(AutotuneError):
    """The worker process died, hung or broke the protocol."""


class BatchSearchError(AutotuneError):
    """The batch boundary search cannot produce an answer (e.g. batch 1 does not fit)."""


class NoFeasibleConfigurationError(AutotuneError):
    """The tuning ran but no candidate met the constraints. Exit code 1."""

    exit_code = 1
