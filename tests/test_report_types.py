"""The report's TypedDicts (autotune.report.types) and its runtime schema (autotune.report.schema) cannot drift.

Section by section: every field the schema validates is declared in the type, every field the schema
requires is required in the type (the writer always writes what a reader needs), and the fields the type
declares but the schema does not validate are exactly the ones listed here (schema 1 readers ignore
unknown fields, so they are written without being checked). Adding a field on one side only fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from autotune.candidate import AccuracySummary, CandidateRow, TrafficBucket, TrafficSummary
from autotune.core.measurement import MeasurementRecord
from autotune.report import schema
from autotune.report.types import (
    ArtifactSection,
    BoundarySection,
    DataSection,
    DataShape,
    ProbeEntry,
    ProfileSection,
    RecipeSection,
    Recommendation,
    ReportDocument,
    SearchSection,
    ServingAtFraction,
    ServingBaselines,
    ServingCalls,
    ServingConfig,
    ServingKnob,
    ServingPoint,
    ServingRecommendation,
    ServingSection,
    ServingServer,
)

#: (type, schema field table, fields the type declares that the schema does not validate)
SECTIONS: dict[str, tuple[Any, dict[str, Any], set[str]]] = {
    "document": (ReportDocument, schema.DOCUMENT_FIELDS, {"workload"}),
    "recommendation": (Recommendation, schema.CANDIDATE_FIELDS,
                       {"foreign_cores", "repeat_of_trial", "fidelity", "search_action", "search_seconds"}),
    "recipe": (RecipeSection, schema.RECIPE_FIELDS, {"search", "batch", "measure", "device_resolved"}),
    "search": (SearchSection, schema.SEARCH_FIELDS,
               {"measured_this_run", "search_seconds", "workers"}),
    "batch_boundary": (BoundarySection, schema.BOUNDARY_FIELDS,
                       {"granularity", "upper_bound", "hit_upper_bound", "anomalies", "confirmed_by",
                        "reused_from_study"}),
    "probe": (ProbeEntry, schema.PROBE_FIELDS, {"phase", "baseline_bytes"}),
    "artifact": (ArtifactSection, schema.ARTIFACT_FIELDS, set()),
    "profile": (ProfileSection, schema.PROFILE_FIELDS, set()),
    "data": (DataSection, schema.DATA_FIELDS, set()),
    "data_shape": (DataShape, schema.DATA_SHAPE_FIELDS, set()),
    "traffic": (TrafficSummary, schema.TRAFFIC_FIELDS, set()),
    "traffic_bucket": (TrafficBucket, schema.TRAFFIC_BUCKET_FIELDS, set()),
    "measurement": (MeasurementRecord, schema.MEASUREMENT_FIELDS, set()),
    "accuracy": (AccuracySummary, schema.ACCURACY_FIELDS, set()),
    "serving": (ServingSection, schema.SERVING_FIELDS, set()),
    "serving_recommendation": (ServingRecommendation, schema.SERVING_RECOMMENDATION_FIELDS, set()),
    "serving_at_fraction": (ServingAtFraction, schema.SERVING_FRACTION_FIELDS, set()),
    "serving_config": (ServingConfig, schema.SERVING_CONFIG_FIELDS, set()),
    "serving_point": (ServingPoint, schema.SERVING_POINT_FIELDS, set()),
    "serving_knob": (ServingKnob, schema.SERVING_KNOB_FIELDS, set()),
    "serving_baselines": (ServingBaselines, schema.SERVING_BASELINE_FIELDS, set()),
    "serving_calls": (ServingCalls, schema.SERVING_CALLS_FIELDS, set()),
    "serving_server": (ServingServer, schema.SERVING_SERVER_FIELDS, set()),
}


def _keys(typed: Any) -> set[str]:
    return set(typed.__required_keys__) | set(typed.__optional_keys__)


@pytest.mark.parametrize("section", list(SECTIONS))
def test_the_type_declares_what_the_schema_validates(section: str) -> None:
    typed, fields, unvalidated = SECTIONS[section]
    assert set(fields) - _keys(typed) == set(), "validated by the schema but not declared in the type"
    assert _keys(typed) - set(fields) == unvalidated, "declared in the type but not validated by the schema"


@pytest.mark.parametrize("section", list(SECTIONS))
def test_what_the_schema_requires_the_type_requires(section: str) -> None:
    typed, fields, _ = SECTIONS[section]
    required = {name for name, (_, is_required) in fields.items() if is_required}
    assert required <= set(typed.__required_keys__)


def test_a_candidate_row_is_the_recommendation_without_its_verdict() -> None:
    """Candidates and the recommendation share the schema's candidate table; only the verdict differs."""
    assert _keys(Recommendation) - _keys(CandidateRow) == {
        "decided_by", "showdown", "throughput_source",
        # the run's own figures, kept beside the artifact's when the headline is the artifact's (artifact_check)
        "measured_throughput", "measured_throughput_ci", "measured_throughput_source", "measured_latency_ms"}
    assert CandidateRow.__required_keys__ <= Recommendation.__required_keys__
