"""What a study searches and how: the space, the settings of one run, its outcome, Optuna's sampler.

The space is pre-crossed: a trial's parameters are the two categoricals ``variant`` and ``batch_size``
(the batch sizes of every variant, with the ones a variant may not run pruned by the loop), so a study
stays readable in optuna-dashboard and a resumed or joining run reads the same parameters whatever the
strategy. These are plain values shared by every other module of :mod:`autotune.study`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution

from autotune.core.process_env import DEFAULT
from autotune.core.recipe import Constraints
from autotune.core.variant_names import VariantSpec
from autotune.errors import InputError


def _parsed(variant: str) -> VariantSpec | None:
    """``variant`` read by the variant grammar, or None for a name it does not read (a stored study may hold one from
    an older version): the helpers below then answer for a plain name."""
    try:
        return VariantSpec.parse(variant)
    except InputError:
        return None


def plain_name(variant: str) -> str:
    """``variant``'s runtime or compiler alone, every modifier dropped (``onnx+int8+tcmalloc`` -> ``onnx``); the
    name up to its first ``+`` for a name the variant grammar does not read."""
    spec = _parsed(variant)
    if spec is None:
        return variant.split("+")[0]
    return VariantSpec(compiler=spec.compiler, compile_mode=spec.compile_mode).name


def modifier_kind(variant: str) -> int:
    """The kind of ``variant``'s first modifier, in the order a tier of screens takes them: 0 a precision, 1 a memory
    format, 2 threads, CUDA graphs or buckets, 3 a process environment; 4 for none (or a name the grammar does not
    read). Why this order: lower precision moved throughput most in the families run here (bf16 1.5x a ViT's,
    int8 rejected or 2x), a process environment least (0.75-1.3x)."""
    spec = _parsed(variant)
    if spec is None:
        return 4
    kinds = (spec.precision != "fp32", spec.memory_format != "contiguous",
             spec.threads is not None or spec.cuda_graphs or spec.buckets, spec.environment != DEFAULT)
    return next((i for i, k in enumerate(kinds) if k), 4)


def modifier_count(variant: str) -> int:
    """How many modifiers ``variant`` adds to its compiler and mode (:meth:`SearchSpace.screen_order`); 0 for a name
    the variant grammar does not read."""
    spec = _parsed(variant)
    if spec is None:
        return 0
    return sum((spec.precision != "fp32", spec.memory_format != "contiguous", spec.cuda_graphs,
                spec.threads is not None, spec.buckets, spec.environment != DEFAULT))


#: Compilers whose build is a compile of tens of seconds on a CPU (torch.compile's Inductor; export's AOTInductor):
#: the rest build in seconds.
SLOW_BUILDS = frozenset({"compile", "export"})


def slow_build(variant: str) -> bool:
    """Whether ``variant``'s build is a compile of tens of seconds (:data:`SLOW_BUILDS`); False for a name the
    variant grammar does not read."""
    spec = _parsed(variant)
    return spec is not None and spec.compiler in SLOW_BUILDS


@dataclass(frozen=True)
class SearchSpace:
    """Variants and, per variant, the batch sizes it may run (within its memory boundary).

    ``preferred``: per variant, the batch a throughput search measures first instead of the largest (where
    the batch-boundary probes saw throughput peak: past it a CPU's throughput often falls, and a search
    with time for one trial per variant would otherwise take the worst point of the plateau).
    """

    variants: tuple[str, ...]
    batch_sizes: Mapping[str, tuple[int, ...]]
    preferred: Mapping[str, int] = field(default_factory=dict)

    def throughput_start(self, variant: str) -> int:
        """The batch a throughput search measures ``variant`` at first: the preferred one, else the largest
        (``variant`` must have batch sizes)."""
        sizes = self.batch_sizes[variant]
        preferred = self.preferred.get(variant)
        return preferred if preferred in sizes else max(sizes)

    @property
    def all_batch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted({b for v in self.variants for b in self.batch_sizes.get(v, ())}))

    def combos(self) -> list[tuple[str, int]]:
        return [(v, b) for v in self.variants for b in self.batch_sizes.get(v, ())]

    def allows(self, variant: str, batch_size: int) -> bool:
        return batch_size in self.batch_sizes.get(variant, ())

    def screen_order(self) -> tuple[str, ...]:
        """The variants in the order their first measurements go: breadth first, by how many modifiers a variant
        adds to its compiler (a precision other than fp32, a memory format, CUDA graphs, pinned threads, buckets, a
        process environment other than the default), the recipe's order within each tier.

        Why: the variants come crossed depth first (each runtime with all its precisions and environments before
        the next runtime). A ConvNeXt with eager/onnx/openvino x fp32/bf16/int8 x four environments spent its
        180-s budget on ten eager rows, and onnx and openvino were never measured (session 38). Every runtime
        plain first, then one modifier at a time, then their combinations: the search learns from the big
        differences first, and a short budget still compares the runtimes.

        Within a tier the slow builds (:func:`slow_build`) go last: on a 2-core AVX2 EPYC the quickstart's compile
        took 38 s of its 92-s search (27.5 s of it compiling, 9 s for any other screen), and openvino, listed after
        it, was never measured (session 40)."""
        return tuple(sorted(self.variants, key=lambda v: (modifier_count(v), slow_build(v))))  # else the recipe's

    def screen_tiers(self) -> tuple[tuple[str, ...], ...]:
        """:meth:`screen_order` cut into its tiers: the plain variants, those of one modifier, of two, ..."""
        tiers: dict[int, list[str]] = {}
        for v in self.screen_order():
            tiers.setdefault(modifier_count(v), []).append(v)
        return tuple(tuple(tiers[k]) for k in sorted(tiers))

    def distributions(self) -> dict[str, CategoricalDistribution]:
        return {
            "variant": CategoricalDistribution(list(self.variants)),
            "batch_size": CategoricalDistribution(list(self.all_batch_sizes)),
        }


@dataclass(frozen=True)
class SearchSettings:
    """One run's settings: what it optimises under which constraints, where its study is, its budgets."""

    objective: str
    constraints: Constraints
    storage: str
    study_name: str
    #: Digest of ``fingerprint`` (what a study is matched on); any string where there are no parts.
    recipe_fingerprint: str
    time_budget_s: float
    max_trials: int = 0
    seed: int = 0
    #: The parts the digest was made of (:func:`~autotune.study.fingerprint.study_fingerprint`): stored
    #: with a new study, and compared part by part with a stored one so that a mismatch says what differs.
    fingerprint: Mapping[str, Any] | None = None
    #: ``tpe`` (Optuna's sampler over (variant, batch)) or ``bracket`` (:mod:`autotune.study.bracket` decides).
    strategy: str = "tpe"
    #: Seconds of a full measurement (the recipe's ``measure.max_seconds``): the bracket strategy's
    #: cost model and the unit of its fidelities.
    measure_seconds: float = 10.0


@dataclass
class SearchOutcome:
    """What a run of the loop returns: every measured row of the study (all runs), and why it stopped."""

    rows: list[dict[str, Any]]
    stopped_by: str
    wall_seconds: float
    sampler: str
    measured_this_run: int
    trials: int
    extra: dict[str, Any] = field(default_factory=dict)
    #: Wall seconds of each candidate this run measured (worker start, build, warm-up, timing): the tuner sizes
    #: the showdown's staging by them (a busy machine's are several times a quiet one's).
    candidate_seconds: tuple[float, ...] = ()
    #: Every (variant, batch size) the search could have tried: what it did not try is reported (set by the tuner).
    space: tuple[tuple[str, int], ...] = ()


#: ``evaluate(trial, variant, batch)``; the bracket strategy also passes ``fidelity=`` (share of the full
#: measurement time), so an evaluator used with it must accept that keyword.
Evaluate = Callable[..., dict[str, Any]]


def make_sampler(objective: str, *, seed: int) -> optuna.samplers.BaseSampler:
    """TPE for one objective, NSGA-II for the Pareto pair; both honour ``Trial.set_constraint`` values."""
    if objective == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=5)


def metric_names(objective: str, constraints: Constraints) -> list[str]:
    """Names of the study's objective values, as optuna-dashboard shows them."""
    latency = f"{constraints.latency_percentile} latency (ms)"
    return {"throughput": ["throughput (samples/s)"], "latency": [latency],
            "pareto": ["throughput (samples/s)", latency]}[objective]
