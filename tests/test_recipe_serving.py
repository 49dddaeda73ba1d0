"""The recipe's ``[serving]`` table: its values, its errors (file, field, what is allowed) and its JSON form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.core.recipe import Recipe, ServingSpec, load_recipe, safe_model_name
from autotune.errors import RecipeError

BASE = """
name = "resnet demo"
device = "cpu"
[model]
factory = "torchvision.models:resnet18"
[[inputs]]
name = "x"
shape = [3, 32, 32]
[search]
variants = ["eager"]
batch_sizes = [1, 4]
"""


def _serving(write_recipe, body: str) -> Recipe:
    return load_recipe(write_recipe(BASE + "[serving]\n" + body))


def test_defaults_with_only_the_slo(write_recipe) -> None:
    recipe = _serving(write_recipe, "slo_ms = 40\n")
    s = recipe.serving
    assert s is not None
    assert (s.slo_ms, s.percentile, s.arrivals, s.arrivals_kind, s.concurrency) == (40.0, "p99", "poisson",
                                                                                     "poisson", None)
    assert (s.request_samples, s.rate, s.instances, s.threads, s.max_batch) == (1, None, "auto", "auto", "auto")
    assert s.max_delay_ms == (0.0, 1.0, 2.0, 5.0, 10.0)
    assert (s.time_budget_s, s.confirm) == (120.0, 3)
    assert s.model_name == "resnet_demo"  # the recipe's name made safe
    assert s.arrivals_path is None
    assert Path(s.base_dir) == Path(recipe.path).resolve().parent


def test_every_field_and_the_round_trip(write_recipe, tmp_path: Path) -> None:
    (tmp_path / "trace.txt").write_text("0.0\n0.01\n")
    recipe = _serving(write_recipe, """slo_ms = 25.5
percentile = "p99.9"
arrivals = "trace.txt"
request_samples = "batch"
rate = 300
instances = [4, 1, 2, 2]
threads = 2
max_batch = [8, 1]
max_delay_ms = [5, 0, 0.5]
time_budget_s = 60
model_name = "resnet-18.v2"
confirm = 5
""")
    s = recipe.serving
    assert s is not None
    assert s.arrivals == "trace.txt" and s.arrivals_kind == "replay"
    assert s.arrivals_path == tmp_path / "trace.txt"
    assert (s.request_samples, s.rate, s.instances, s.threads, s.max_batch) == ("batch", 300.0, (1, 2, 4), (2,),
                                                                                  (1, 8))
    assert s.max_delay_ms == (0.0, 0.5, 5.0)
    assert (s.percentile, s.time_budget_s, s.model_name, s.confirm) == ("p99.9", 60.0, "resnet-18.v2", 5)
    data = recipe.to_dict()
    assert data["serving"]["instances"] == [1, 2, 4] and data["serving"]["threads"] == [2]
    assert Recipe.from_dict(json.loads(json.dumps(data))) == recipe


def test_a_closed_loop_and_its_round_trip(write_recipe) -> None:
    recipe = _serving(write_recipe, 'slo_ms = 10\narrivals = "closed"\nconcurrency = 16\n')
    assert recipe.serving is not None
    assert (recipe.serving.arrivals_kind, recipe.serving.concurrency) == ("closed", 16)
    assert Recipe.from_dict(json.loads(json.dumps(recipe.to_dict()))) == recipe


def test_without_the_table_the_json_form_is_as_before(write_recipe) -> None:
    """A recipe without [serving] has no ``serving`` key: old recipes' report.json and study fingerprints stay."""
    plain = load_recipe(write_recipe(BASE))
    assert plain.serving is None
    assert "serving" not in plain.to_dict()
    assert Recipe.from_dict(plain.to_dict()) == plain
    served = _serving(write_recipe, "slo_ms = 40\n")
    without = served.to_dict()
    without.pop("serving")
    assert without == plain.to_dict()


def test_the_spec_alone_round_trips() -> None:
    spec = ServingSpec(slo_ms=5.0, instances=(1, 2), max_delay_ms=(0.0,), model_name="m")
    assert ServingSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@pytest.mark.parametrize(("name", "safe"), [("quickstart", "quickstart"), ("my model/v2", "my_model_v2"),
                                            ("..x", "x"), ("///", "model"), ("a" * 80, "a" * 64)])
def test_safe_model_name(name: str, safe: str) -> None:
    assert safe_model_name(name) == safe


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        ("percentile = \"p99\"\n", r"field 'serving\.slo_ms': is required"),
        ("slo_ms = 0\n", r"field 'serving\.slo_ms': must be positive, got 0"),
        ("slo_ms = -5\n", r"field 'serving\.slo_ms': must be positive"),
        ("slo_ms = \"40ms\"\n", r"field 'serving\.slo_ms': expected a number, got str"),
        ("slo = 40\n", r"field 'serving\.slo': unknown key.*did you mean 'serving\.slo_ms'"),
        ("slo_ms = 40\npercentile = \"p999\"\n",
         r"field 'serving\.percentile': 'p999' is not allowed; allowed: p50, p90, p95, p99, p99\.9"),
        ("slo_ms = 40\npercentile = \"mean\"\n", r"field 'serving\.percentile': 'mean' is not allowed"),
        ("slo_ms = 40\narrivals = \"poison\"\n",
         r"field 'serving\.arrivals': 'poison' is not allowed; allowed: \"poisson\", \"closed\" or a path.*"
         r"did you mean 'poisson'"),
        ("slo_ms = 40\narrivals = \"traces/none.txt\"\n",
         r"field 'serving\.arrivals': no file '.*traces/none\.txt'.*relative to the recipe"),
        ("slo_ms = 40\narrivals = \"\"\n", r"field 'serving\.arrivals': must not be empty"),
        ("slo_ms = 40\narrivals = \"closed\"\n", r"field 'serving\.concurrency': is required with arrivals"),
        ("slo_ms = 40\narrivals = \"closed\"\nconcurrency = 0\n", r"field 'serving\.concurrency': must be positive"),
        ("slo_ms = 40\nconcurrency = 4\n",
         r"field 'serving\.concurrency': only applies to arrivals = \"closed\", but arrivals is 'poisson'"),
        ("slo_ms = 40\narrivals = \"closed\"\nconcurrency = 4\nrate = 100\n",
         r"field 'serving\.rate': does not apply to arrivals = \"closed\""),
        ("slo_ms = 40\nrate = 0\n", r"field 'serving\.rate': must be positive"),
        ("slo_ms = 40\nrequest_samples = 0\n", r"field 'serving\.request_samples': must be a positive integer or"),
        ("slo_ms = 40\nrequest_samples = \"batches\"\n",
         r"field 'serving\.request_samples': 'batches' is not allowed; allowed: a positive integer.*"
         r"did you mean 'batch'"),
        ("slo_ms = 40\nrequest_samples = 1.5\n", r"field 'serving\.request_samples': expected an integer or a string"),
        ("slo_ms = 40\ninstances = \"many\"\n",
         r"field 'serving\.instances': 'many' is not allowed; allowed: \"auto\", a positive integer or a list"),
        ("slo_ms = 40\nthreads = []\n", r"field 'serving\.threads': must not be empty"),
        ("slo_ms = 40\nmax_batch = [1, 0]\n", r"field 'serving\.max_batch\[1\]': must be a positive integer, got 0"),
        ("slo_ms = 40\nmax_batch = [1, true]\n", r"field 'serving\.max_batch\[1\]': must be a positive integer"),
        ("slo_ms = 40\ninstances = 0\n", r"field 'serving\.instances': must be a positive integer, got 0"),
        ("slo_ms = 40\nmax_delay_ms = [0, -1]\n",
         r"field 'serving\.max_delay_ms\[1\]': must be a finite number of milliseconds >= 0, got -1"),
        ("slo_ms = 40\nmax_delay_ms = []\n", r"field 'serving\.max_delay_ms': must not be empty"),
        ("slo_ms = 40\nmax_delay_ms = inf\n", r"field 'serving\.max_delay_ms': must be a finite number"),
        ("slo_ms = 40\nmax_delay_ms = [\"1ms\"]\n", r"field 'serving\.max_delay_ms\[0\]': must be a finite number"),
        ("slo_ms = 40\ntime_budget_s = 0\n", r"field 'serving\.time_budget_s': must be positive"),
        ("slo_ms = 40\nconfirm = 0\n", r"field 'serving\.confirm': must be positive"),
        ("slo_ms = 40\nconfirm = 0\n", r"field 'serving\.confirm': must be positive"),
        ("slo_ms = 40\nmodel_name = \"my model\"\n",
         r"field 'serving\.model_name': 'my model' is not allowed; allowed: up to 64 letters.*'my_model'"),
        ("slo_ms = 40\nmodel_name = \"../x\"\n", r"field 'serving\.model_name': '\.\./x' is not allowed"),
    ],
)
def test_bad_tables_name_the_file_the_field_and_what_is_allowed(write_recipe, body: str, pattern: str) -> None:
    with pytest.raises(RecipeError, match=r"recipe\.toml: " + pattern):
        _serving(write_recipe, body)


def test_serving_must_be_a_table(write_recipe) -> None:
    with pytest.raises(RecipeError, match=r"recipe\.toml: field 'serving': expected a table"):
        load_recipe(write_recipe(BASE.replace('device = "cpu"', 'device = "cpu"\nserving = 40')))
