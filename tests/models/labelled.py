"""A small *labelled* task for the accuracy budget: Gaussian blobs, an MLP trained on them, its data and metric.

The model factory trains a tiny MLP for a few hundred full-batch steps on a training draw of four Gaussian
blobs in 16 dimensions (seeded: every worker builds the same weights, in about 0.2 s); the data factory yields a
held-out draw of the same blobs, in order, and ``metric`` scores top-1 accuracy against its true labels, which
this module keeps. So eager fp32's accuracy is a real held-out accuracy (about 0.9, not 1.0), and a variant's
drop is what it costs on the task.

``offset`` builds the *same function* in a precision-hostile form: the first layer sees ``x + offset`` and its
bias takes ``W @ offset`` back off. In fp32 (24-bit significand) the answer is unchanged up to rounding; in bf16
(8 bits) ``x + 1000`` is rounded to a multiple of 4, which wipes out the inputs (unit variance): a real
lower-precision variant that is broken, for the budget to reject.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

DIM, CLASSES = 16, 4
TEST_ROWS = 512


def _blobs(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(1234)) * 0.8
    labels = torch.randint(0, CLASSES, (rows,), generator=gen)
    return centres[labels] + torch.randn(rows, DIM, generator=gen), labels


#: The held-out set the data factory yields and the metric scores: labels live here, next to the metric.
TEST_X, TEST_Y = _blobs(TEST_ROWS, seed=7)


class Offset(nn.Module):
    """``linear(x + c) - W @ c``: the linear layer, written so that reduced precision destroys it."""

    def __init__(self, linear: nn.Linear, offset: float) -> None:
        super().__init__()
        self.linear = linear
        self.offset = offset
        with torch.no_grad():
            self.linear.bias -= self.linear.weight.sum(1) * offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x + self.offset)


def blob_classifier(offset: float = 0.0, steps: int = 100) -> nn.Module:
    """An MLP trained on the blobs (seeded); ``offset`` != 0: the same function, bf16-hostile (module docstring)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread trains in ~0.2 s, several on a busy machine take seconds
    with torch.inference_mode(False), torch.enable_grad():  # a worker may build models under inference mode
        torch.manual_seed(0)
        x, y = _blobs(1024, seed=3)
        model = nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, CLASSES))
        params = list(model.parameters())
        for _ in range(steps):  # plain gradient descent: torch.optim's first use costs seconds of imports
            grads = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p -= 0.5 * g
    torch.set_num_threads(threads)
    if offset:
        model[0] = Offset(model[0], offset)
    return model.eval()


def batches(batch_size: int) -> Iterator[torch.Tensor]:
    """The held-out inputs in order (no labels: the model takes only the inputs)."""
    for start in range(0, TEST_ROWS, batch_size):
        yield TEST_X[start:start + batch_size]


def metric(outputs: list[torch.Tensor], batches: list[torch.Tensor]) -> float:
    """Top-1 accuracy against the true labels of the rows scored (the batches are the first ones, in order)."""
    logits = torch.cat(outputs)
    return float((logits.argmax(-1) == TEST_Y[:len(logits)]).float().mean())


def bad_metric(outputs: list[torch.Tensor], batches: list[torch.Tensor]) -> str:
    """Returns no number: validation must name ``accuracy.metric``."""
    return "accuracy"


def features(offset: float = 0.0) -> nn.Module:
    """A feature extractor (per token: (B, T, 16) -> (B, T, 32)), not a classifier: the budget's default for it is
    closeness. ``offset``: the same bf16-hostile form as :func:`blob_classifier`'s."""
    torch.manual_seed(0)
    layer = nn.Linear(DIM, 32)
    return nn.Sequential(Offset(layer, offset) if offset else layer, nn.Tanh()).eval()
