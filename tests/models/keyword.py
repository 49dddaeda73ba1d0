"""A tiny text classifier that takes keyword inputs and returns a dict, and data factories for it (good and bad).

Pure torch, so the traffic tests need no transformers: masked mean pooling makes the answer independent of
padding (so ``+buckets`` must pass the gate), and ``unmasked`` ignores the mask (so padding changes its answer).
"""

from __future__ import annotations

import torch
from torch import nn


class MaskedClassifier(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 16, classes: int = 3, use_mask: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)
        self.use_mask = use_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        h = torch.tanh(self.proj(self.embed(input_ids)))
        if self.use_mask and attention_mask is not None:
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        else:
            pooled = h.mean(1)
        return {"logits": self.head(pooled), "hidden": h}


def classifier(use_mask: bool = True) -> nn.Module:
    return MaskedClassifier(use_mask=use_mask)


def batches(batch_size: int, n: int = 5, lengths: tuple[int, ...] = (5, 9, 12), partial: bool = True,
            seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``n`` batches cycling through ``lengths`` (padded to the longest row), the last one partial."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        rows = max(1, batch_size - 1) if partial and i == n - 1 else batch_size
        length = lengths[i % len(lengths)]
        lens = torch.randint(1, length + 1, (rows,), generator=g)
        lens[0] = length
        mask = (torch.arange(length)[None, :] < lens[:, None]).long()
        ids = torch.randint(1, 100, (rows, length), generator=g) * mask
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def positional(batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(b["input_ids"], b["attention_mask"]) for b in batches(batch_size)]


def raises(batch_size: int) -> list[dict[str, torch.Tensor]]:
    raise RuntimeError("the dataset is not mounted")


def empty(batch_size: int) -> list[dict[str, torch.Tensor]]:
    return []


def not_iterable(batch_size: int) -> int:
    return 3


def mismatched_rows(batch_size: int) -> list[dict[str, torch.Tensor]]:
    return [{"input_ids": torch.ones(batch_size, 4, dtype=torch.long),
             "attention_mask": torch.ones(batch_size + 1, 4, dtype=torch.long)}]


def non_tensor(batch_size: int) -> list[dict[str, object]]:
    return [{"input_ids": [[1, 2, 3]] * batch_size, "attention_mask": None}]


def too_many_rows(batch_size: int) -> list[torch.Tensor]:
    return [torch.ones(batch_size + 2, 4, dtype=torch.long)]


def changing_keys(batch_size: int) -> list[dict[str, torch.Tensor]]:
    a = batches(batch_size, n=2)
    return [a[0], {"input_ids": a[1]["input_ids"]}]
