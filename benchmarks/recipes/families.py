"""Model families nobody here wrote, built from their configs (random weights, a few thin layers): causal LMs for
``generate()`` recipes (bloom_generate.toml, falcon_generate.toml; session 44; a mixture of experts,
mixtral_generate.toml, session 46), a document model, a forecaster and an optical-flow model for runs with serving
(layoutlm_serving.toml, patchtst_serving.toml, raft.toml; session 45), and a detector on images of varying sizes
(detr_serving.toml, session 46), and a segmenter whose answer is as large as its image (lraspp_serving.toml,
session 47)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn


def bloom_lm(vocab_size: int = 32000, hidden: int = 128, layers: int = 2, heads: int = 4) -> nn.Module:
    """BLOOM: ALiBi position biases (no position embeddings), fused QKV, embedding LayerNorm, tied embeddings."""
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(vocab_size=vocab_size, hidden_size=hidden, n_layer=layers, n_head=heads)
    return BloomForCausalLM(config).eval()


def falcon_lm(vocab_size: int = 32000, hidden: int = 128, layers: int = 2, heads: int = 4,
              kv_heads: int = 2) -> nn.Module:
    """Falcon's new decoder architecture: grouped KV heads, attention and MLP in parallel, rotary positions."""
    from transformers import FalconConfig, FalconForCausalLM

    config = FalconConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, num_kv_heads=kv_heads, new_decoder_architecture=True,
                          parallel_attn=True, bias=False, alibi=False)
    return FalconForCausalLM(config).eval()


def layoutlm(vocab_size: int = 30522, hidden: int = 128, layers: int = 2, heads: int = 2) -> nn.Module:
    """LayoutLM: each token comes with its box (``bbox``, [batch, tokens, 4]), whose heights and widths index
    embeddings, so random integers are not valid inputs (a box with y1 < y0 is an index error): see
    :func:`layout_batches`."""
    from transformers import LayoutLMConfig, LayoutLMForSequenceClassification

    config = LayoutLMConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=heads, intermediate_size=4 * hidden, num_labels=3)
    return LayoutLMForSequenceClassification(config).eval()


def layout_batches(batch_size: int, seq_min: int = 16, seq_max: int = 96, batches: int = 12, seed: int = 0,
                   vocab_size: int = 30522) -> Iterator[dict[str, torch.Tensor]]:
    """Documents of ``seq_min``-``seq_max`` words, each with its box (x0 < x1, y0 < y1 within [0, 1000]), padded per
    batch to its longest document (ids, boxes and mask 0 on the padding)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for _ in range(batches):
        lengths = rng.integers(seq_min, seq_max + 1, batch_size)
        width = int(lengths.max())
        ids = torch.zeros((batch_size, width), dtype=torch.int64)
        bbox = torch.zeros((batch_size, width, 4), dtype=torch.int64)
        mask = torch.zeros((batch_size, width), dtype=torch.int64)
        for row, n in enumerate(lengths):
            ids[row, :n] = torch.from_numpy(rng.integers(1000, vocab_size, n))
            x0, y0 = rng.integers(0, 900, n), rng.integers(0, 950, n)
            box = np.stack([x0, y0, x0 + rng.integers(5, 100, n), y0 + rng.integers(5, 50, n)], axis=1)
            bbox[row, :n] = torch.from_numpy(box)
            mask[row, :n] = 1
        yield {"input_ids": ids, "bbox": bbox, "attention_mask": mask}


def patchtst(context: int = 96, channels: int = 3, horizon: int = 24) -> nn.Module:
    """PatchTST forecasting: ``past_values`` [batch, context, channels] in, a ModelOutput of the forecast and the
    scaler's ``loc`` and ``scale`` ([batch, 1, channels]) out."""
    from transformers import PatchTSTConfig, PatchTSTForPrediction

    config = PatchTSTConfig(num_input_channels=channels, context_length=context, prediction_length=horizon,
                            patch_length=12, patch_stride=12, d_model=64, num_attention_heads=4, num_hidden_layers=2,
                            ffn_dim=128)
    return PatchTSTForPrediction(config).eval()


class _Raft(nn.Module):
    def __init__(self, num_flow_updates: int) -> None:
        super().__init__()
        from torchvision.models.optical_flow import raft_small

        self.raft = raft_small(weights=None)
        self.num_flow_updates = num_flow_updates

    def forward(self, image1: torch.Tensor, image2: torch.Tensor) -> list[torch.Tensor]:
        return self.raft(image1, image2, num_flow_updates=self.num_flow_updates)


def raft(num_flow_updates: int = 4) -> nn.Module:
    """torchvision's RAFT (small): two images in, a list of flow fields out (one per update), ~150 ms a pair."""
    return _Raft(num_flow_updates).eval()


def mixtral_lm(vocab_size: int = 32000, hidden: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
               experts: int = 4, per_token: int = 2) -> nn.Module:
    """Mixtral: a sparse mixture of experts (each token routed to ``per_token`` of ``experts`` MLPs, so a call's
    work depends on its tokens), grouped KV heads, rotary positions."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                           num_local_experts=experts, num_experts_per_tok=per_token)
    return MixtralForCausalLM(config).eval()


def detr(num_queries: int = 20, d_model: int = 64, labels: int = 5) -> nn.Module:
    """DETR: a timm resnet18 backbone (no pretrained weights: nothing is downloaded), one encoder and one decoder
    layer; ``pixel_values`` with a ``pixel_mask`` that marks each image's own extent in a padded batch. Its
    ``encoder_last_hidden_state`` has one row per backbone cell (height x width / 32^2), a length no padded input
    dim equals: the server serves images of different sizes in separate calls."""
    from transformers import DetrConfig, DetrForObjectDetection

    config = DetrConfig(use_timm_backbone=True, backbone="resnet18", use_pretrained_backbone=False,
                        num_queries=num_queries, d_model=d_model, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=2 * d_model,
                        decoder_ffn_dim=2 * d_model, num_labels=labels)
    return DetrForObjectDetection(config).eval()


def detr_batches(batch_size: int, sizes: tuple[int, ...] = (160, 192, 224, 256), batches: int = 8,
                 seed: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Images of a height and a width each drawn from ``sizes``, padded per batch to the largest of each with 0,
    and DETR's ``pixel_mask`` (1 on each image's own pixels)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for _ in range(batches):
        hw = [(int(rng.choice(sizes)), int(rng.choice(sizes))) for _ in range(batch_size)]
        height, width = max(h for h, _ in hw), max(w for _, w in hw)
        images = torch.zeros((batch_size, 3, height, width))
        mask = torch.zeros((batch_size, height, width), dtype=torch.int64)
        for row, (h, w) in enumerate(hw):
            images[row, :, :h, :w] = torch.from_numpy(rng.standard_normal((3, h, w)).astype(np.float32))
            mask[row, :h, :w] = 1
        yield {"pixel_values": images, "pixel_mask": mask}


def lraspp(classes: int = 4) -> nn.Module:
    """torchvision's LR-ASPP segmenter on a MobileNetV3-Large backbone (no weights anywhere): a dict ``{"out": (N,
    classes, H, W)}`` as tall and wide as its input, so each request's answer must be cut back to its own image."""
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    return lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=classes).eval()


def image_batches(batch_size: int, sizes: tuple[int, ...] = (96, 128, 160), batches: int = 8,
                  seed: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Images of a height and a width each drawn from ``sizes``, padded per batch to the largest of each with 0 (no
    mask: the model sees the padding)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for _ in range(batches):
        hw = [(int(rng.choice(sizes)), int(rng.choice(sizes))) for _ in range(batch_size)]
        images = torch.zeros((batch_size, 3, max(h for h, _ in hw), max(w for _, w in hw)))
        for row, (h, w) in enumerate(hw):
            images[row, :, :h, :w] = torch.from_numpy(rng.standard_normal((3, h, w)).astype(np.float32))
        yield {"input": images}  # LRASPP.forward(input)
