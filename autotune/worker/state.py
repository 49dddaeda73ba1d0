"""What a worker keeps between requests: the models it built (per recipe), the staged finalist, probe baselines.

Torch is imported here, but a worker imports this module through :mod:`autotune.worker.ops`, whose
import is the timed start-up (see its header).
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autotune.core.protocol import Role
from autotune.core.recipe import Recipe
from autotune.worker import devices
from autotune.worker.model import WorkloadInfo, build_model, check_forward
from autotune.worker.variants import VariantSpec


@dataclass
class LoadedWorkload:
    recipe: Recipe
    device: torch.device
    model: torch.nn.Module
    info: WorkloadInfo
    backend: devices.DeviceBackend


@dataclass
class ProbeMaster:
    """The model a probe worker builds variants from, kept on the host (never on the accelerator:
    the device then holds only the variant's own copy, as in a deployment)."""

    recipe: Recipe
    device: torch.device
    backend: devices.DeviceBackend
    model: torch.nn.Module | None

    def weight_bytes(self) -> int:
        """Bytes of the master's parameters and buffers (each storage once)."""
        if self.model is None:
            return 0
        seen: dict[int, int] = {}
        for t in [*self.model.parameters(), *self.model.buffers()]:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())


class WorkerState:
    """Models built once per (recipe, device) and reused across candidates."""

    def __init__(self, *, role: Role = "measure") -> None:
        self.role = role
        #: The showdown finalist this worker holds (op ``stage``), timed by op ``slice``.
        self.staged: Staged | None = None
        self._cache: dict[str, LoadedWorkload] = {}
        self.default_threads = torch.get_num_threads()
        #: Baselines of this worker's first two probes of each variant (see ``op_probe``'s drift).
        self.early_baselines: dict[str, list[int]] = {}
        self._masters: dict[str, ProbeMaster] = {}

    def workload(self, recipe_data: dict[str, Any]) -> LoadedWorkload:
        key = json.dumps(recipe_data, sort_keys=True)
        if key not in self._cache:
            recipe = Recipe.from_dict(recipe_data)
            device = devices.resolve_device(recipe.device)
            backend = devices.backend_for(device)
            backend.activate()  # cuda:N / xpu:N: events, streams and capability queries act on N
            model = build_model(recipe, device=device)
            info = check_forward(recipe, model, device=device)
            self._cache[key] = LoadedWorkload(recipe, device, model, info, backend)
        return self._cache[key]

    def master(self, recipe_data: dict[str, Any]) -> ProbeMaster:
        """The probes' model, on the host; validation (one forward) already ran in the measure worker."""
        key = json.dumps(recipe_data, sort_keys=True)
        if key not in self._masters or self._masters[key].model is None:
            recipe = Recipe.from_dict(recipe_data)
            device = devices.resolve_device(recipe.device)
            backend = devices.backend_for(device)
            backend.activate()
            model = build_model(recipe, device=torch.device("cpu"))
            self._masters[key] = ProbeMaster(recipe, device, backend, model)
        return self._masters[key]


def _trim_heap() -> None:
    """Give freed heap pages back to the OS so the next RSS high-water mark is this probe's own."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class Staged:
    """A showdown finalist built and warm in this worker, waiting for its slices."""

    spec: VariantSpec
    device: torch.device
    call: Callable[[], Any]
