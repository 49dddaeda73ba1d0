"""Compare two reports: the same configurations, B/A ratios with confidence intervals, regressions.

``autotune compare A B`` answers "is B slower than A?" for two runs of the same recipe: two
machines, two torch versions, or before and after a model change. A configuration is a variant
and a batch size; only configurations measured (status ``ok``) in both reports are compared.

**The ratio's confidence interval.** A report of schema 2 keeps each candidate's measurement
(``measurement``: every timed sample, the per-call latencies and the warmup analysis, see
:mod:`autotune.core.measurement`). When both rows have one, the interval of ``B/A`` is a bootstrap of the raw
samples: each side's steady samples are resampled on their own by the circular block bootstrap the
measurement's own CI uses (block length from their autocorrelation, :mod:`autotune.core.stats`), with a seed of
its own, and the 2.5% and 97.5% quantiles of ``throughput*(B) / throughput*(A)`` over
:data:`N_BOOT` resamples are the interval. The latency percentile the reports constrain gets an interval
the same way (resampled percentiles of the per-call latencies, or of the steady block means where those
are what the percentile was taken of).

A report of schema 1 kept only each candidate's throughput and its 95% CI, so for a row without raw
samples on either side the interval is derived from the two stored intervals with the MOVER method (Zou &
Donner 2008, "method of variance estimates recovery") on the log scale. With ``a = ln A``, ``b = ln B``
and each side's 95% limits ``[a_lo, a_hi]``, ``[b_lo, b_hi]``::

    low  = (b - a) - sqrt((b - b_lo)**2 + (a_hi - a)**2)
    high = (b - a) + sqrt((b_hi - b)**2 + (a - a_lo)**2)

and the ratio's interval is ``[exp(low), exp(high)]``. It keeps each interval's asymmetry (a throughput
interval is ``batch / seconds`` and so is skewed). On the same data the two methods give intervals of
about the same width (both add the two runs' variances; ``tests/test_compare.py`` measures it); what the
samples add is an interval for the latency percentile, which has no stored CI, and a report that can be
analysed again. Both assume the two measurements are independent, which two separate runs are, and
describe the noise within each run only: the difference between two runs of the same thing on the same
machine (other load, frequency, memory placement) is not in it. That is what the threshold is for.

**Fresh processes first.** A screen is timed in a reused worker whose history moves it by several percent from
one run to the next, which neither CI above sees (two runs of the same code, compared on their screens, showed
five "regressions"). Where both reports' showdowns timed a configuration, the comparison is made on those
rounds instead, with the fresh *process* as the unit and a t interval over the processes
(:mod:`autotune.compare_rounds` has the pseudo-code); each row says its ``source`` (``showdown`` or
``screen``). A screen-only row keeps the intervals above, widened to at least the run-to-run spread of a
screen that the reports show (their finalists' screen against their fresh processes), so a screen's history
is not called a regression.

**A regression** is a configuration whose throughput ratio interval lies entirely below
``1 - threshold`` (B is slower than A by more than the threshold, beyond the measurement noise),
or one that ran in A and no longer runs in B (``oom``, ``failed`` or ``rejected`` by the
correctness gate). An improvement is the mirror image: the interval entirely above
``1 + threshold``. The latency percentile the reports constrain (``p99`` by default) is shown with
its ratio (and, from raw samples, its interval) but never decides a regression: the verdict is the
throughput's. A configuration with one steady sample on a side (a zero-width stored interval, or a
single resampled value: no interval at all) gets no ratio CI either, and is shown as ``no CI``
rather than judged.

Configurations measured in only one report are listed, with what the other report says about
them (absent, pruned by the search, or its failure). Differences between the two environments
(machine, torch version, model factory, ...) are listed too: a comparison across machines is
meant to show them, one on the same machine should have none.

Why one module (~500 lines): the comparison of two reports is one concept: its value objects, the
matching of configurations, the two ways to a ratio CI and the verdict rule, which read together.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.compare_rounds import fresh_ratio, fresh_rounds, screen_floor, widen
from autotune.core.measurement import Measurement
from autotune.core.stats import replicate_interval
from autotune.errors import InputError
from autotune.report.canonical import load_report
from autotune.report.schema import PERCENTILES

__all__ = [
    "DEFAULT_THRESHOLD",
    "Comparison",
    "Difference",
    "Measured",
    "Ratio",
    "Row",
    "Unmatched",
    "compare_files",
    "compare_reports",
    "parse_threshold",
    "ratio_ci",
    "sample_latency_ratio",
    "sample_ratio_ci",
]

DEFAULT_THRESHOLD = 0.05
#: z of a two-sided 95% interval (the level of every CI in report.json).
_Z95 = 1.959963984540054
#: Statuses that mean "this configuration does not run here" (pruned means "not measured").
_BROKEN = ("oom", "failed", "rejected")

VERDICTS = ("regression", "improvement", "unchanged", "no CI")
#: Bootstrap resamples per side of a sample-based ratio interval.
N_BOOT = 2000
#: Seeds of the two sides' resampling: different, so a report compared with itself is resampled apart
#: (with one seed both sides would resample alike and every ratio replicate would be exactly 1).
_SEED_A, _SEED_B = 1, 2
#: The largest x whose exp(x) is a float.
_LOG_MAX = math.log(sys.float_info.max)
#: How a ratio's interval was made (``Ratio.method``).
METHODS = ("bootstrap", "mover", "processes")


def parse_threshold(text: str, *, field: str = "--threshold") -> float:
    """``"5%"`` or ``"0.05"`` -> 0.05; the fraction must lie strictly between 0 and 1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InputError(f"{field}: expected a fraction such as 0.05 or a percentage such as 5%, "
                         f"got {text!r}") from None
    if not (0.0 < value < 1.0) or not math.isfinite(value):
        raise InputError(f"{field}: must be between 0 and 1 (0% and 100%), exclusive, got {text!r}")
    return value


@dataclass(frozen=True)
class Ratio:
    """B/A with its 95% CI (``None`` when a side has no CI) and how the CI was made (:data:`METHODS`)."""

    value: float
    ci: tuple[float, float] | None
    method: str | None = None


def _log_limits(value: float, ci: Sequence[float | None] | None) -> tuple[float, float] | None:
    """Distances of the CI's limits from the estimate on the log scale (None if unusable)."""
    if ci is None or len(ci) != 2:
        return None
    lo, hi = ci
    if lo is None or hi is None or not (0.0 < lo <= hi) or not math.isfinite(hi) or value <= 0:
        return None
    centre = math.log(value)
    # An estimate outside its own interval (a mean next to a bootstrap CI can be) counts as on the edge.
    return (max(0.0, centre - math.log(lo)), max(0.0, math.log(hi) - centre))


def ratio_ci(a: float, a_ci: Sequence[float | None] | None, b: float, b_ci: Sequence[float | None] | None
             ) -> Ratio:
    """B/A and its 95% CI from the two 95% CIs, by MOVER on the log scale (see the module docstring)."""
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"ratio of non-positive or non-finite values: {b!r} / {a!r}")
    value = b / a
    da, db = _log_limits(a, a_ci), _log_limits(b, b_ci)
    if da is None or db is None or not 0.0 < value < math.inf:  # B/A of 1e300 / 1e-300 overflows, 5e-324 / 1e3 is 0
        return Ratio(value, None)
    a_down, a_up = da
    b_down, b_up = db
    centre = math.log(value)
    low = centre - math.hypot(b_down, a_up)
    high = centre + math.hypot(b_up, a_down)
    if high > _LOG_MAX:  # an interval beyond the floats (extreme throughputs): none
        return Ratio(value, None)
    return Ratio(value, (math.exp(low), math.exp(high)), "mover")


def _replicate_ratio(value: float, a: np.ndarray, b: np.ndarray) -> Ratio:
    """``value`` with the percentile interval of the replicates' ratios ``b / a`` (None if it has no width)."""
    with np.errstate(all="ignore"):  # extreme throughputs (1e300 against 1e-300) overflow or divide by zero
        ratios = b / a
    if not (np.all(np.isfinite(ratios)) and math.isfinite(value)):
        return Ratio(value, None, "bootstrap")  # no interval: the verdict is "no CI", never a traceback
    lo, hi = replicate_interval(ratios)
    return Ratio(value, (lo, hi) if lo < hi else None, "bootstrap")


def sample_ratio_ci(a: Measurement, b: Measurement, *, n_boot: int = N_BOOT) -> Ratio:
    """B/A throughput and its 95% CI by a bootstrap of the two measurements' raw samples (module docstring)."""
    with np.errstate(all="ignore"):
        value = b.throughput / a.throughput if a.throughput > 0 else math.inf
    if a.steady_samples.size < 2 or b.steady_samples.size < 2:
        return Ratio(value, None, "bootstrap")
    return _replicate_ratio(value, a.throughput_replicates(n_boot=n_boot, seed=_SEED_A),
                            b.throughput_replicates(n_boot=n_boot, seed=_SEED_B))


def sample_latency_ratio(a: Measurement, b: Measurement, statistic: str, *, n_boot: int = 1000) -> Ratio | None:
    """B/A of ``latency_ms[statistic]`` and its 95% CI from the raw samples (None without a latency)."""
    la, lb = a.latency_ms[statistic], b.latency_ms[statistic]
    if not (la > 0 and math.isfinite(la) and math.isfinite(lb)):
        return None
    if a.latency_values.size < 2 or b.latency_values.size < 2:
        return Ratio(lb / la, None, "bootstrap")
    return _replicate_ratio(lb / la, a.latency_replicates(statistic, n_boot=n_boot, seed=_SEED_A),
                            b.latency_replicates(statistic, n_boot=n_boot, seed=_SEED_B))


@dataclass(frozen=True)
class Measured:
    """What one report says about a configuration that it measured (``measurement``: its raw samples, schema 2)."""

    throughput: float
    throughput_ci: tuple[float, float] | None
    latency_ms: float | None
    trial: int | None
    measurement: Measurement | None = None


@dataclass(frozen=True)
class Row:
    """A configuration measured in both reports."""

    variant: str
    batch_size: int
    a: Measured
    b: Measured
    throughput: Ratio
    latency: Ratio | None
    verdict: str
    #: where the throughputs came from: "showdown" (fresh processes, both reports) or "screen"
    source: str = "screen"

    @property
    def label(self) -> str:
        return f"{self.variant}@{self.batch_size}"


@dataclass(frozen=True)
class Unmatched:
    """A configuration measured in one report only; ``other`` says what the other report has."""

    variant: str
    batch_size: int
    measured_in: str  # "A" or "B"
    other: str  # "absent", "pruned", or "<status>: <reason>"

    @property
    def label(self) -> str:
        return f"{self.variant}@{self.batch_size}"

    @property
    def broken(self) -> bool:
        """Measured in A, and B tried it and it no longer runs (oom, failed, rejected)."""
        return self.measured_in == "A" and self.other.split(":", 1)[0] in _BROKEN


@dataclass(frozen=True)
class Difference:
    """One fact that differs between the two reports' environments or recipes."""

    field: str
    a: str
    b: str


@dataclass(frozen=True)
class Comparison:
    a_path: str
    b_path: str
    threshold: float
    latency_percentile: str
    rows: tuple[Row, ...]
    only_a: tuple[Unmatched, ...]
    only_b: tuple[Unmatched, ...]
    differences: tuple[Difference, ...]
    recommendation_a: str | None
    recommendation_b: str | None
    #: log-scale half-width floor applied to screen-only rows (None: no report showed a screen's spread)
    screen_floor: float | None = None

    @property
    def sources(self) -> str:
        """What the comparison used, in words."""
        fresh = sum(r.source == "showdown" for r in self.rows)
        text = (f"{fresh} of {len(self.rows)} configuration(s) compared on the showdowns' fresh processes "
                "(process as the unit, t interval)")
        if fresh < len(self.rows):
            text += "; the rest on the search's screens"
            if self.screen_floor is not None:
                text += (f", their CI widened to at least +-{100 * math.expm1(self.screen_floor):.1f}% "
                         "(the run-to-run spread of a screen against fresh processes)")
            else:
                text += " (no showdown to show a screen's run-to-run spread: their CI is within-run noise only)"
        return text + "."

    @property
    def regressions(self) -> tuple[str, ...]:
        """Labels of the significant regressions: slower beyond the threshold, or no longer running."""
        return tuple([r.label for r in self.rows if r.verdict == "regression"]
                     + [u.label for u in self.only_a if u.broken])

    @property
    def different_machines(self) -> bool:
        return any(d.field in _MACHINE_FIELDS for d in self.differences)

    @property
    def different_torch(self) -> bool:
        return any(d.field == "torch" for d in self.differences)

    def summary(self) -> list[str]:
        """Sentences for a person: what differs, and what the comparison found."""
        lines = []
        machine = [d.field for d in self.differences if d.field in _MACHINE_FIELDS]
        if machine:
            lines.append(f"A and B come from different machines ({', '.join(machine)} differ).")
        for d in self.differences:
            if d.field == "torch":
                lines.append(f"A and B use different torch versions: {d.a} and {d.b}.")
        other = [d.field for d in self.differences if d.field not in _MACHINE_FIELDS and d.field != "torch"]
        if other:
            lines.append(f"Also different: {', '.join(other)}.")
        if not self.differences:
            lines.append("Same machine, software and workload in both reports.")
        if self.recommendation_a != self.recommendation_b:
            lines.append(f"Recommendation: A {self.recommendation_a or 'none'}, B {self.recommendation_b or 'none'}.")
        if self.rows:
            lines.append(self.sources[0].upper() + self.sources[1:])
        pct = f"{100 * self.threshold:g}%"
        if self.regressions:
            lines.append(f"{len(self.regressions)} regression(s) beyond {pct}: {', '.join(self.regressions)}.")
        else:
            lines.append(f"No regression beyond {pct} in {len(self.rows)} configuration(s) measured in both.")
        return lines

    def to_dict(self) -> dict[str, Any]:
        def measured(m: Measured) -> dict[str, Any]:
            return {"trial": m.trial, "throughput": m.throughput,
                    "throughput_ci": list(m.throughput_ci) if m.throughput_ci else None,
                    f"latency_{self.latency_percentile}_ms": m.latency_ms,
                    "raw_samples": m.measurement is not None}

        def unmatched(u: Unmatched) -> dict[str, Any]:
            return {"variant": u.variant, "batch_size": u.batch_size, "label": u.label,
                    "measured_in": u.measured_in, "other": u.other}

        return {
            "a": self.a_path,
            "b": self.b_path,
            "threshold": self.threshold,
            "latency_percentile": self.latency_percentile,
            "ratio_ci_method": _METHOD_TEXT,
            "sources": self.sources,
            "screen_floor": self.screen_floor,
            "rows": [
                {"variant": r.variant, "batch_size": r.batch_size, "label": r.label, "verdict": r.verdict,
                 "throughput_ratio": r.throughput.value,
                 "throughput_ratio_ci": list(r.throughput.ci) if r.throughput.ci else None,
                 "ratio_ci_method": r.throughput.method, "source": r.source,
                 "latency_ratio": r.latency.value if r.latency else None,
                 "latency_ratio_ci": list(r.latency.ci) if r.latency and r.latency.ci else None,
                 "a": measured(r.a), "b": measured(r.b)}
                for r in self.rows
            ],
            "only_a": [unmatched(u) for u in self.only_a],
            "only_b": [unmatched(u) for u in self.only_b],
            "differences": [{"field": d.field, "a": d.a, "b": d.b} for d in self.differences],
            "different_machines": self.different_machines,
            "different_torch": self.different_torch,
            "recommendation": {"a": self.recommendation_a, "b": self.recommendation_b},
            "regressions": list(self.regressions),
        }


_METHOD_TEXT = ("showdown rows: Welch t interval over the two runs' fresh processes (log throughput); "
                "screen rows: bootstrap of the two runs' steady samples (circular blocks, independent runs) where "
                "both rows keep them (report schema 2), else MOVER on log throughput from the two stored 95% CIs, "
                "widened to the run-to-run spread of a screen")


# ----------------------------------------------------------------------------- environments


def _get(doc: Mapping[str, Any], *path: str) -> Any:
    value: Any = doc
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _gpu_names(doc: Mapping[str, Any]) -> Any:
    gpus = _get(doc, "environment", "gpus")
    if not isinstance(gpus, list) or not gpus:
        return None
    return ", ".join(str(g.get("name")) if isinstance(g, Mapping) else str(g) for g in gpus)


#: (field, getter) of the facts whose difference a reader of a comparison must know about.
_FACTS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("hostname", lambda d: _get(d, "environment", "hostname")),
    ("machine", lambda d: _get(d, "environment", "machine")),
    ("cpu_model", lambda d: _get(d, "environment", "cpu_model")),
    ("cpu_logical_cores", lambda d: _get(d, "environment", "cpu_logical_cores")),
    ("gpus", _gpu_names),
    ("memory_total_bytes", lambda d: _get(d, "environment", "memory_total_bytes")),
    ("torch", lambda d: _get(d, "environment", "torch_version")),
    ("python", lambda d: _get(d, "environment", "python")),
    ("torchvision", lambda d: _get(d, "environment", "packages", "torchvision")),
    ("autotune", lambda d: _get(d, "tool", "version")),
    ("device", lambda d: _get(d, "recipe", "device_resolved") or _get(d, "recipe", "device")),
    ("model.factory", lambda d: _get(d, "recipe", "model", "factory")),
    ("model.kwargs", lambda d: _get(d, "recipe", "model", "kwargs")),
    ("inputs", lambda d: _get(d, "recipe", "inputs")),
    ("measure.mode", lambda d: _get(d, "recipe", "measure", "mode")),
    ("latency_percentile", lambda d: _get(d, "recipe", "constraints", "latency_percentile")),
)
_MACHINE_FIELDS = frozenset({"hostname", "machine", "cpu_model", "cpu_logical_cores", "gpus",
                             "memory_total_bytes"})


def _show(value: Any) -> str:
    return "unknown" if value is None else str(value)


def environment_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[Difference, ...]:
    """The facts of :data:`_FACTS` that differ (a fact unknown on both sides does not)."""
    out = []
    for name, get in _FACTS:
        va, vb = get(a), get(b)
        if va != vb:
            out.append(Difference(name, _show(va), _show(vb)))
    return tuple(out)


# ----------------------------------------------------------------------------- matching


def _configurations(doc: Mapping[str, Any]) -> dict[tuple[str, int], Mapping[str, Any]]:
    """One row per (variant, batch size): the first measured (ok) one by trial, else the first other.

    Rows that repeat an earlier trial (``repeat_of_trial``: the search proposed a combination that
    was already measured) carry the same numbers and are skipped.
    """
    best: dict[tuple[str, int], Mapping[str, Any]] = {}

    def order(row: Mapping[str, Any]) -> int:
        trial = row.get("trial")
        return trial if isinstance(trial, int) else 1 << 30

    for row in sorted(doc["candidates"], key=order):
        if row.get("repeat_of_trial") is not None:
            continue
        key = (str(row["variant"]), int(row["batch_size"]))
        held = best.get(key)
        if held is None or (held.get("status") != "ok" and row.get("status") == "ok"):
            best[key] = row
    return best


def _measured(row: Mapping[str, Any], percentile: str, side: str) -> Measured:
    trial = row.get("trial") if isinstance(row.get("trial"), int) else None
    if row.get("measurement") is not None:
        try:
            m = Measurement.from_dict(row["measurement"])
        except InputError as exc:
            raise InputError(f"{side}: {row['variant']}@{row['batch_size']}: {exc}") from None
        lo, hi = m.throughput_ci
        return Measured(throughput=m.throughput, throughput_ci=(lo, hi) if lo < hi else None,
                        latency_ms=m.latency_ms.get(percentile), trial=trial, measurement=m)
    ci = row.get("throughput_ci")
    pair = (float(ci[0]), float(ci[1])) if ci and ci[0] is not None and ci[1] is not None else None
    if pair is not None and pair[0] == pair[1]:
        pair = None  # a zero-width interval comes from a single steady sample: it is no interval
    latency = (row.get("latency_ms") or {}).get(percentile)
    return Measured(throughput=float(row["throughput"]), throughput_ci=pair,
                    latency_ms=float(latency) if latency is not None else None, trial=trial)


def _ratios(ma: Measured, mb: Measured, percentile: str) -> tuple[Ratio, Ratio | None]:
    """B/A of throughput and of the latency percentile: from the raw samples when both sides have them."""
    if ma.measurement is not None and mb.measurement is not None:
        return (sample_ratio_ci(ma.measurement, mb.measurement),
                sample_latency_ratio(ma.measurement, mb.measurement, percentile))
    tput = ratio_ci(ma.throughput, ma.throughput_ci, mb.throughput, mb.throughput_ci)
    lat = (Ratio(mb.latency_ms / ma.latency_ms, None)
           if ma.latency_ms and mb.latency_ms is not None and ma.latency_ms > 0 else None)
    return tput, lat


def ratio_verdict(ratio: Ratio, threshold: float) -> str:
    """The verdict rule of the module docstring (also ``compare --rerun``'s, :mod:`autotune.artifact_timing`)."""
    if ratio.ci is None:
        return "no CI"
    if ratio.ci[1] < 1.0 - threshold:
        return "regression"
    if ratio.ci[0] > 1.0 + threshold:
        return "improvement"
    return "unchanged"


def _other(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "absent"
    status = str(row.get("status"))
    reason = row.get("reason")
    return f"{status}: {reason}" if reason and status != "pruned" else status


def _label(rec: Mapping[str, Any] | None) -> str | None:
    return None if rec is None else f"{rec['variant']}@{rec['batch_size']}"


def _usable(row: Mapping[str, Any] | None) -> bool:
    return row is not None and row.get("status") == "ok" and isinstance(row.get("throughput"), int | float) \
        and row["throughput"] > 0


def compare_reports(a: Mapping[str, Any], b: Mapping[str, Any], *, threshold: float = DEFAULT_THRESHOLD,
                    a_path: str = "A", b_path: str = "B") -> Comparison:
    """Compare two normalised report documents (as :func:`autotune.report.load_report` returns them)."""
    if not (0.0 < threshold < 1.0):
        raise InputError(f"threshold: must be between 0 and 1, exclusive, got {threshold!r}")
    percentile = _get(a, "recipe", "constraints", "latency_percentile") or "p99"
    if percentile not in PERCENTILES:
        percentile = "p99"
    rows_a, rows_b = _configurations(a), _configurations(b)
    floor = screen_floor(a, b)
    rows: list[Row] = []
    only_a: list[Unmatched] = []
    only_b: list[Unmatched] = []
    for key in sorted(set(rows_a) | set(rows_b)):
        ra, rb = rows_a.get(key), rows_b.get(key)
        variant, batch = key
        if _usable(ra) and _usable(rb):
            assert ra is not None and rb is not None
            ma, mb = _measured(ra, percentile, a_path), _measured(rb, percentile, b_path)
            tput, lat = _ratios(ma, mb, percentile)
            fa, fb = fresh_rounds(a, variant, batch), fresh_rounds(b, variant, batch)
            source = "screen"
            if fa is not None and fb is not None:
                value, ci = fresh_ratio(fa, fb)
                tput, source = Ratio(value, ci, "processes"), "showdown"
                ma = Measured(fa.throughput, fa.ci(), ma.latency_ms, ma.trial, ma.measurement)
                mb = Measured(fb.throughput, fb.ci(), mb.latency_ms, mb.trial, mb.measurement)
            elif floor is not None:
                tput = Ratio(tput.value, widen(tput.value, tput.ci, floor), tput.method)
            rows.append(Row(variant, batch, ma, mb, tput, lat, ratio_verdict(tput, threshold), source))
        elif _usable(ra):
            only_a.append(Unmatched(variant, batch, "A", _other(rb)))
        elif _usable(rb):
            only_b.append(Unmatched(variant, batch, "B", _other(ra)))
    return Comparison(
        a_path=a_path, b_path=b_path, threshold=threshold, latency_percentile=percentile,
        rows=tuple(rows), only_a=tuple(only_a), only_b=tuple(only_b),
        differences=environment_differences(a, b),
        recommendation_a=_label(a.get("recommendation")), recommendation_b=_label(b.get("recommendation")),
        screen_floor=floor,
    )


def compare_files(a: Path | str, b: Path | str, *, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Load two report.json files (or run directories holding one) and compare them.

    A missing file, invalid JSON, a document that is not a report or has another schema version
    raise ``InputError`` naming the path and the field.
    """
    return compare_reports(load_report(a), load_report(b), threshold=threshold, a_path=str(a), b_path=str(b))
