"""Model factories used by the shipped recipes (referenced as `models.py:function`).

Every model is built from a configuration with random weights: nothing is downloaded, so the recipes run
offline and the tests build the same models. The recipes time architectures, not accuracy. Hugging Face
is imported inside its factory (the `hf` extra), so the other factories do not need it.
"""

from __future__ import annotations

import torch
from torch import nn


def bert_classifier(vocab_size: int = 30522, hidden_size: int = 128, layers: int = 2, heads: int = 2,
                    intermediate_size: int = 512, num_labels: int = 2, max_positions: int = 512) -> nn.Module:
    """A Hugging Face ``BertForSequenceClassification`` from a ``BertConfig`` (random weights), in eval mode.

    The defaults are BERT-tiny's shape (2 layers, hidden 128, 2 heads) with bert-base's vocabulary: the
    smallest BERT that still has every part of the real one (embeddings with token types and positions,
    attention with a padding mask, pooler, classifier) and runs a batch in milliseconds on a CPU. The
    model is called with keyword arguments (``input_ids``, ``attention_mask``, ``token_type_ids``) and
    returns a ``SequenceClassifierOutput`` (a ``ModelOutput``, ``return_dict=True``) whose ``logits`` are
    ``(batch, num_labels)``.
    """
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=intermediate_size, num_labels=num_labels,
                        max_position_embeddings=max_positions, return_dict=True)
    return BertForSequenceClassification(config).eval()


class TokenClassifier(nn.Module):
    """Embedding + transformer encoder + mean pooling + linear head, on integer token inputs."""

    def __init__(self, vocab_size: int, d_model: int, nhead: int, layers: int, num_classes: int,
                 max_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(1, max_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=4 * d_model, batch_first=True,
                                           dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        h = self.encoder(h)
        return self.head(h.mean(dim=1))


def transformer_encoder(vocab_size: int = 30522, d_model: int = 256, nhead: int = 4, layers: int = 4,
                        num_classes: int = 2, max_len: int = 512) -> nn.Module:
    return TokenClassifier(vocab_size, d_model, nhead, layers, num_classes, max_len)


def mlp(in_features: int = 512, hidden: int = 2048, layers: int = 3, out_features: int = 10) -> nn.Module:
    dims = [in_features] + [hidden] * (layers - 1)
    blocks: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:], strict=True):
        blocks += [nn.Linear(a, b), nn.GELU()]
    blocks.append(nn.Linear(dims[-1], out_features))
    return nn.Sequential(*blocks)
