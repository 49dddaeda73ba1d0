"""Labelled synthetic tasks and models trained on them, for the precision recipes and benchmarks.

Why: the other recipes time random-weight architectures, whose logits are nearly tied (a random classifier
has no margin), so an int8 or bf16 rounding flips its top-1 answer on a few percent of the inputs whatever the
quantizer's quality, and accuracy against labels is chance. An accuracy budget needs a model that has learnt
something and a labelled set it is scored on; nothing may be downloaded, so both are generated here:

* **images** (:func:`image_task`): 3 x size x size, one of ``classes`` oriented stripe patterns (angle and
  frequency per class) with a random phase, contrast and colour tint, plus Gaussian noise; ImageNet-normalised.
* **text** (:func:`text_task`): BERT-style token batches (``[CLS] words [SEP]``, padded), label 1 when the
  sentence holds more "positive" than "negative" marker tokens (two small sets of word ids), else 0.
* **clusters** (:func:`cluster_task`): Gaussian clusters in ``in_features`` dims, one per class.

The model factories (:func:`trained_cnn`, :func:`trained_bert`, :func:`trained_mlp`) build the architecture,
train it with Adam for ``steps`` steps on the task (seeded, a few seconds to a minute on 2 cores), and cache the
weights in ``$XDG_CACHE_HOME/autotune-recipes`` (``~/.cache``) keyed by the arguments, so later builds (every
worker builds the model) load them. The data factories (:func:`labelled_image_batches`,
:func:`labelled_text_batches`) serve the inputs of a held-out split as the recipe's traffic (the calibration
data of static int8 too); :func:`labelled_set` gives the same split with its labels, for an accuracy metric.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

PAD_ID, CLS_ID, SEP_ID, FIRST_WORD_ID = 0, 101, 102, 999
#: Held-out data (traffic and labelled set) is drawn from seeds offset by this, training data from below it.
HELD_OUT = 1_000_000


# ---- tasks -------------------------------------------------------------------------------------------------


def image_task(n: int, *, size: int = 32, classes: int = 10, noise: float = 0.5, seed: int = 0
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images (n, 3, size, size) float32, normalised, and their labels (n,) int64. ``noise`` is the pixel
    noise's standard deviation against a pattern amplitude of about 0.25: high enough that the task is not solved
    perfectly, so an accuracy drop can show."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    angle = labels.float() * (math.pi / classes)
    freq = 2.0 + (labels % 3).float() * 1.5
    phase = torch.rand(n, generator=g) * 2 * math.pi
    coords = torch.linspace(-math.pi, math.pi, size)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    proj = xx[None] * torch.cos(angle)[:, None, None] + yy[None] * torch.sin(angle)[:, None, None]
    pattern = torch.sin(freq[:, None, None] * proj + phase[:, None, None])
    contrast = 0.5 + torch.rand(n, 1, 1, generator=g)
    tint = 0.6 + 0.8 * torch.rand(n, 3, 1, 1, generator=g)
    images = 0.5 + 0.25 * (contrast * pattern)[:, None] * tint + noise * torch.randn(n, 3, size, size, generator=g)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return ((images - mean) / std).float(), labels


def _markers(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.arange(FIRST_WORD_ID, FIRST_WORD_ID + 40)
    del vocab_size
    return ids[:20], ids[20:]


def text_task(n: int, *, seq_min: int = 16, seq_max: int = 64, vocab_size: int = 8192, seed: int = 0
              ) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor]:
    """``n`` sentences as one dict per sample (unpadded ``input_ids``), and their labels (n,) int64."""
    g = torch.Generator().manual_seed(seed)
    positive, negative = _markers(vocab_size)
    samples = []
    labels = []
    for _ in range(n):
        length = int(torch.randint(seq_min, seq_max + 1, (1,), generator=g))
        words = torch.randint(FIRST_WORD_ID + 40, vocab_size, (length - 2,), generator=g)
        k_pos = int(torch.randint(0, 4, (1,), generator=g))
        k_neg = int(torch.randint(0, 4, (1,), generator=g))
        if k_pos == k_neg:
            k_pos += 1
        slots = torch.randperm(length - 2, generator=g)[:k_pos + k_neg]
        words[slots[:k_pos]] = positive[torch.randint(0, len(positive), (k_pos,), generator=g)]
        words[slots[k_pos:]] = negative[torch.randint(0, len(negative), (k_neg,), generator=g)]
        samples.append({"input_ids": torch.cat([torch.tensor([CLS_ID]), words, torch.tensor([SEP_ID])])})
        labels.append(int(k_pos > k_neg))
    return samples, torch.tensor(labels)


def pad_text(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A batch padded to its longest sample: ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64)."""
    width = max(int(s["input_ids"].numel()) for s in samples)
    ids = torch.full((len(samples), width), PAD_ID, dtype=torch.int64)
    mask = torch.zeros((len(samples), width), dtype=torch.int64)
    for row, s in enumerate(samples):
        n = int(s["input_ids"].numel())
        ids[row, :n] = s["input_ids"]
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def cluster_task(n: int, *, in_features: int = 64, classes: int = 10, seed: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian clusters: ``n`` points (n, in_features) and their labels; the centres are fixed (seed 0)."""
    centres = torch.randn(classes, in_features, generator=torch.Generator().manual_seed(12345)) * 1.5
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    return centres[labels] + torch.randn(n, in_features, generator=g), labels


# ---- training with a cache ---------------------------------------------------------------------------------


def _cache_path(name: str, config: dict[str, Any]) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autotune-recipes"
    key = hashlib.sha256(json.dumps({"name": name, **config}, sort_keys=True).encode()).hexdigest()[:16]
    return root / f"{name}-{key}.pt"


def _trained(name: str, config: dict[str, Any], model: nn.Module, steps: int,
             batch: Callable[[int], tuple[Any, torch.Tensor]], *, lr: float = 2e-3) -> nn.Module:
    """``model`` trained for ``steps`` Adam steps on ``batch(step)`` (inputs, labels), or loaded from the cache."""
    path = _cache_path(name, config)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return model.eval()
    torch.manual_seed(config.get("seed", 0))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        inputs, labels = batch(step)
        out = model(**inputs) if isinstance(inputs, dict) else model(inputs)
        logits = out.logits if hasattr(out, "logits") else out
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)
    return model


def small_cnn(classes: int = 10, width: int = 32) -> nn.Module:
    """Four conv-BN-ReLU blocks (stride 2 from the second), global average pooling and a linear head: a
    VGG-style CNN small enough to train in seconds on a CPU (resnet18 takes minutes on 2 cores)."""
    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(*block(3, width, 1), *block(width, width * 2, 2), *block(width * 2, width * 4, 2),
                         *block(width * 4, width * 4, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(width * 4, classes))


def trained_cnn(classes: int = 10, size: int = 32, width: int = 32, noise: float = 0.5, steps: int = 120,
                seed: int = 0) -> nn.Module:
    """:func:`small_cnn` trained on :func:`image_task`."""
    torch.manual_seed(seed)
    model = small_cnn(classes, width)
    config = {"classes": classes, "size": size, "width": width, "noise": noise, "steps": steps, "seed": seed}
    return _trained("cnn-stripes", config, model, steps,
                    lambda s: image_task(64, size=size, classes=classes, noise=noise, seed=seed * 7919 + s))


def trained_bert(vocab_size: int = 8192, hidden_size: int = 128, layers: int = 2, heads: int = 2,
                 intermediate_size: int = 512, steps: int = 150, seed: int = 0) -> nn.Module:
    """BERT-tiny's shape (``recipes/models.py:bert_classifier``) trained on :func:`text_task` (2 labels)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate_size, num_labels=2, max_position_embeddings=512, return_dict=True))
    config = {"vocab": vocab_size, "hidden": hidden_size, "layers": layers, "heads": heads,
              "intermediate": intermediate_size, "steps": steps, "seed": seed}

    def batch(step: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        samples, labels = text_task(32, vocab_size=vocab_size, seed=seed * 7919 + step)
        return pad_text(samples), labels

    return _trained("bert-markers", config, model, steps, batch, lr=1e-3)


def trained_mlp(in_features: int = 64, hidden: int = 256, classes: int = 10, steps: int = 200, seed: int = 0
                ) -> nn.Module:
    """A 3-layer MLP trained on :func:`cluster_task` (a second on a CPU)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, classes))
    config = {"in": in_features, "hidden": hidden, "classes": classes, "steps": steps, "seed": seed}
    return _trained("mlp-clusters", config, model, steps,
                    lambda s: cluster_task(64, in_features=in_features, classes=classes, seed=seed * 7919 + s))


# ---- the held-out split: traffic and labelled set ----------------------------------------------------------


def labelled_set(task: str, *, samples: int = 256, batch_size: int = 32, seed: int = 0, **kwargs: Any
                 ) -> list[tuple[Any, torch.Tensor]]:
    """The held-out split of ``task`` (``images``, ``text`` or ``clusters``) as (inputs, labels) batches: the
    inputs are what the matching data factory yields for the same arguments."""
    out: list[tuple[Any, torch.Tensor]] = []
    for start in range(0, samples, batch_size):
        n = min(batch_size, samples - start)
        s = HELD_OUT + seed * 7919 + start
        if task == "images":
            x, y = image_task(n, seed=s, **kwargs)
            out.append((x, y))
        elif task == "text":
            texts, y = text_task(n, seed=s, **kwargs)
            out.append((pad_text(texts), y))
        elif task == "clusters":
            x, y = cluster_task(n, seed=s, **kwargs)
            out.append((x, y))
        else:
            raise ValueError(f"unknown task {task!r}; allowed: images, text, clusters")
    return out


def labelled_image_batches(batch_size: int, size: int = 32, classes: int = 10, noise: float = 0.5,
                           samples: int = 256, seed: int = 0) -> Iterator[torch.Tensor]:
    """The images of :func:`labelled_set` ``("images")`` (a data factory: one positional tensor per batch)."""
    for x, _ in labelled_set("images", samples=samples, batch_size=batch_size, seed=seed, size=size, classes=classes,
                             noise=noise):
        yield x


def labelled_text_batches(batch_size: int, seq_min: int = 16, seq_max: int = 64, samples: int = 256, seed: int = 0
                          ) -> Iterator[dict[str, torch.Tensor]]:
    """The token batches of :func:`labelled_set` ``("text")`` (a data factory: dicts passed by keyword)."""
    for x, _ in labelled_set("text", samples=samples, batch_size=batch_size, seed=seed, seq_min=seq_min,
                             seq_max=seq_max):
        yield x


def labelled_cluster_batches(batch_size: int, in_features: int = 64, classes: int = 10, samples: int = 256,
                             seed: int = 0) -> Iterator[torch.Tensor]:
    """The points of :func:`labelled_set` ``("clusters")``."""
    for x, _ in labelled_set("clusters", samples=samples, batch_size=batch_size, seed=seed,
                             in_features=in_features, classes=classes):
        yield x
