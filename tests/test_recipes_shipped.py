"""The shipped recipes' data factories (recipes/data.py) and the models they feed (recipes/models.py, timm).

The factories are resolved the way a worker resolves them (``autotune.worker.model.resolve_factory``, relative to
the recipe) and called the way the ``[data]`` contract says: ``factory(batch_size=b, **kwargs)``. That the
recipes parse is ``tests/test_recipe.py::test_shipped_recipes_parse``.
"""

from __future__ import annotations

import inspect
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.core.recipe import ModelSpec
from autotune.worker.model import resolve_factory

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
DATA_RECIPES = sorted(p for p in RECIPES.glob("*.toml") if "data" in tomllib.loads(p.read_text()))


def _table(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def _factory(path: Path, section: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The recipe's ``[model]`` or ``[data]`` factory, resolved as the worker does, and its kwargs."""
    table = _table(path)[section]
    spec = ModelSpec(factory=table["factory"], kwargs=dict(table.get("kwargs", {})), base_dir=str(path.parent))
    return resolve_factory(spec, recipe_path=str(path)), dict(spec.kwargs)


def _data(recipe: str) -> Callable[..., Any]:
    """The data factory of ``recipes/<recipe>.toml``."""
    return _factory(RECIPES / f"{recipe}.toml", "data")[0]


def test_the_shipped_data_recipes_are_the_expected_ones() -> None:
    assert [p.name for p in DATA_RECIPES] == ["bert.toml", "bert_serving.toml", "precision_bert.toml",
                                              "precision_cnn.toml", "timm_cnn.toml", "timm_cnn_auto.toml"]


@pytest.mark.parametrize("path", DATA_RECIPES, ids=lambda p: p.name)
def test_data_and_model_kwargs_fit_the_factories(path: Path) -> None:
    """Every kwarg a recipe passes is a parameter of its factory (the data factory also takes batch_size)."""
    if _table(path)["model"]["factory"].startswith("timm:"):
        pytest.importorskip("timm")  # resolving timm:create_model imports timm (models.py imports transformers late)
    data, data_kwargs = _factory(path, "data")
    inspect.signature(data).bind(batch_size=4, **data_kwargs)
    model, model_kwargs = _factory(path, "model")
    inspect.signature(model).bind(**model_kwargs)


# ---------------------------------------------------------------------------- bert_batches


def _unpadded(batches: list[dict[str, torch.Tensor]]) -> list[list[int]]:
    """Every sample's token ids without its padding, in order."""
    return [row[mask.bool()].tolist() for b in batches for row, mask in zip(b["input_ids"], b["attention_mask"],
                                                                           strict=True)]


def test_bert_batches_are_padded_tokenised_text() -> None:
    bert_batches = _data("bert")
    batches = list(bert_batches(batch_size=8, seq_min=20, seq_max=128, batches=12, seed=3))
    assert len(batches) == 12
    for batch in batches:
        assert set(batch) == {"input_ids", "attention_mask", "token_type_ids"}
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        assert {t.dtype for t in batch.values()} == {torch.int64}
        assert ids.shape == mask.shape == types.shape and ids.shape[0] == 8
        lengths = mask.sum(dim=1)
        assert 20 <= int(lengths.min()) and int(lengths.max()) <= 128
        assert ids.shape[1] == int(lengths.max()), "padded to the longest sample of the batch"
        positions = torch.arange(ids.shape[1])
        assert torch.equal(mask, (positions < lengths[:, None]).long()), "ones on the tokens, then zeros"
        assert torch.equal(ids == 0, mask == 0), "pad id 0 exactly on the padding"
        assert (ids[:, 0] == 101).all() and torch.equal(ids.gather(1, lengths[:, None] - 1).squeeze(1),
                                                         torch.full((8,), 102))
        assert torch.equal(types, torch.zeros_like(ids))
    widths = {b["input_ids"].shape[1] for b in batches}
    assert len(widths) >= 4, f"the sequence dimension varies between batches, got {widths}"


def test_bert_batches_are_deterministic_and_the_same_samples_at_every_batch_size() -> None:
    bert_batches = _data("bert")
    first = list(bert_batches(batch_size=4, samples=24, seed=1))
    again = list(bert_batches(batch_size=4, samples=24, seed=1))
    assert all(torch.equal(a[k], b[k]) for a, b in zip(first, again, strict=True) for k in a)
    one_by_one = list(bert_batches(batch_size=1, samples=24, batches=24, seed=1))
    assert _unpadded(first) == _unpadded(one_by_one)
    assert _unpadded(first) != _unpadded(list(bert_batches(batch_size=4, samples=24, seed=2)))


def test_bert_batches_last_batch_is_partial_and_batches_cap_the_samples() -> None:
    bert_batches = _data("bert")
    sizes = [b["input_ids"].shape[0] for b in bert_batches(batch_size=16, samples=120, batches=16)]
    assert sizes == [16] * 7 + [8]
    assert [b["input_ids"].shape[0] for b in bert_batches(batch_size=1, samples=120, batches=16)] == [1] * 16


def test_bert_lengths_are_right_skewed_within_the_bounds() -> None:
    """Log-normal lengths: the median near the bounds' geometric mean, a truncated tail at seq_max."""
    spec = ModelSpec(factory="data.py:text_length", kwargs={}, base_dir=str(RECIPES))
    text_length = resolve_factory(spec, recipe_path=str(RECIPES / "bert.toml"))
    lengths = sorted(text_length(0, i, 20, 128) for i in range(2000))
    assert lengths[0] >= 20 and lengths[-1] <= 128
    assert 45 <= lengths[1000] <= 57  # sqrt(20 * 128) = 50.6
    assert 0.01 < sum(n == 128 for n in lengths) / 2000 < 0.06


@pytest.mark.parametrize("kwargs", [{"seq_min": 2}, {"seq_min": 64, "seq_max": 32}, {"vocab_size": 500},
                                    {"batches": 0}, {"samples": 0}])
def test_bert_batches_reject_impossible_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        next(iter(_data("bert")(batch_size=2, **kwargs)))


# ---------------------------------------------------------------------------- image_batches


def test_image_batches_are_normalised_fixed_shape_tensors() -> None:
    image_batches = _data("timm_cnn")
    batches = list(image_batches(batch_size=8, height=32, width=48, samples=20, seed=5))
    assert [tuple(b.shape) for b in batches] == [(8, 3, 32, 48), (8, 3, 32, 48), (4, 3, 32, 48)]
    assert all(isinstance(b, torch.Tensor) and b.dtype == torch.float32 for b in batches)
    pixels = torch.cat(batches)
    means = torch.tensor([0.485, 0.456, 0.406])
    stds = torch.tensor([0.229, 0.224, 0.225])
    assert torch.allclose(pixels.amin(dim=(0, 2, 3)), -means / stds, atol=0.01)
    assert torch.allclose(pixels.amax(dim=(0, 2, 3)), (1 - means) / stds, atol=0.01)
    assert torch.equal(pixels, torch.cat(list(image_batches(batch_size=3, height=32, width=48, samples=20,
                                                            batches=7, seed=5))))
    assert not torch.equal(pixels, torch.cat(list(image_batches(batch_size=8, height=32, width=48, samples=20,
                                                                seed=6))))


# ---------------------------------------------------------------------------- the models on their traffic


def test_bert_classifier_runs_on_bert_batches_and_ignores_the_padding() -> None:
    pytest.importorskip("transformers")
    model_factory, model_kwargs = _factory(RECIPES / "bert.toml", "model")
    data_factory, data_kwargs = _factory(RECIPES / "bert.toml", "data")
    torch.manual_seed(0)
    model = model_factory(**model_kwargs)
    assert not model.training
    batch = next(iter(data_factory(batch_size=4, **data_kwargs)))
    with torch.inference_mode():
        out = model(**batch)
        from transformers.utils import ModelOutput

        assert isinstance(out, ModelOutput) and out.logits.shape == (4, 2)
        # the attention mask hides the padding: a sample alone gives the logits it gets in the padded batch
        n = int(batch["attention_mask"][0].sum())
        alone = model(**{k: v[:1, :n] for k, v in batch.items()}).logits
    assert torch.allclose(alone, out.logits[:1], atol=1e-5)


def test_timm_cnn_runs_on_image_batches() -> None:
    pytest.importorskip("timm")
    model_factory, model_kwargs = _factory(RECIPES / "timm_cnn.toml", "model")
    data_factory, data_kwargs = _factory(RECIPES / "timm_cnn.toml", "data")
    assert model_kwargs["pretrained"] is False
    model = model_factory(**model_kwargs).eval()
    batch = next(iter(data_factory(batch_size=2, **data_kwargs)))
    with torch.inference_mode():
        assert model(batch).shape == (2, 10)


# ---------------------------------------------------------------------------- labelled.py (precision recipes)


def test_labelled_factories_serve_the_held_out_split_with_its_labels(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The data factory yields exactly the inputs of ``labelled_set``; a trained model scores well on them (the
    point of the module: a classifier with a margin) and loads from its cache the second time."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = ModelSpec(factory="labelled.py:trained_mlp", kwargs={}, base_dir=str(RECIPES))
    trained_mlp = resolve_factory(spec, recipe_path=str(RECIPES / "precision_cnn.toml"))
    module = sys.modules[trained_mlp.__module__]
    batches = list(module.labelled_cluster_batches(batch_size=32, samples=80, seed=2))
    labelled = module.labelled_set("clusters", samples=80, batch_size=32, seed=2)
    assert [b.shape[0] for b in batches] == [32, 32, 16]
    assert all(torch.equal(b, x) for b, (x, _) in zip(batches, labelled, strict=True))
    model = trained_mlp()
    assert len(list((tmp_path / "autotune-recipes").glob("mlp-clusters-*.pt"))) == 1
    with torch.inference_mode():
        accuracy = sum(int((model(x).argmax(1) == y).sum()) for x, y in labelled) / 80
        again = trained_mlp()  # from the cache: the same weights
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(),
                                                      strict=True))
    assert accuracy > 0.9
    texts = list(module.labelled_text_batches(batch_size=8, samples=16))
    assert {tuple(sorted(t)) for t in texts} == {("attention_mask", "input_ids", "token_type_ids")}
    images = list(module.labelled_image_batches(batch_size=8, samples=8))
    assert images[0].shape == (8, 3, 32, 32)
