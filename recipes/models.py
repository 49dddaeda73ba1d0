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


def distilbert_classifier(vocab_size: int = 30522, dim: int = 128, layers: int = 2, heads: int = 2,
                          num_labels: int = 3) -> nn.Module:
    """A Hugging Face ``DistilBertForSequenceClassification`` from a ``DistilBertConfig`` (random weights), in eval
    mode: keyword ``input_ids`` and ``attention_mask``, no token types. Its traced form ran 1.5-2x faster in a
    process that had built it than as its saved artifact (glibc's mmap threshold: BENCHMARKS "A worker's build
    history"), which is what ``benchmarks/bench_shipped_showdown.py`` puts the showdown to."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    config = DistilBertConfig(vocab_size=vocab_size, dim=dim, n_layers=layers, n_heads=heads, hidden_dim=4 * dim,
                              num_labels=num_labels)
    return DistilBertForSequenceClassification(config).eval()


def gpt2_lm(vocab_size: int = 50257, hidden_size: int = 128, layers: int = 2, heads: int = 2,
            max_positions: int = 1024) -> nn.Module:
    """A Hugging Face ``GPT2LMHeadModel`` from a ``GPT2Config`` (random weights, nobody's checkpoint), eval mode.

    GPT-2's vocabulary (50,257 ids: the logits of a long prompt are what fills memory first), learned positions,
    fused QKV (``Conv1D``), tied input and output embeddings; a few thin layers so ``generate`` runs in
    milliseconds per token on a CPU.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_embd=hidden_size, n_layer=layers, n_head=heads,
                        n_positions=max_positions)
    return GPT2LMHeadModel(config).eval()


def llama_lm(vocab_size: int = 32000, hidden_size: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
             intermediate_size: int = 344, max_positions: int = 2048) -> nn.Module:
    """A Hugging Face ``LlamaForCausalLM`` from a ``LlamaConfig`` (random weights), in eval mode.

    Llama's parts: rotary positions, grouped-query attention (``kv_heads`` < ``heads``: a smaller KV cache),
    RMSNorm, SwiGLU MLP, untied output embedding; Llama 2's vocabulary size.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         intermediate_size=intermediate_size, max_position_embeddings=max_positions)
    return LlamaForCausalLM(config).eval()


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


class BatchedDetector(nn.Module):
    """A torchvision detector that takes one batched image tensor instead of a list of images.

    torchvision's detection models take ``list[Tensor]`` (images of any size) and return one dict
    ``{boxes (K,4), labels (K,), scores (K,)}`` per image; autotune feeds models positional tensors,
    so this wrapper unbinds ``(N, 3, H, W)`` into N images. The output is torchvision's list of dicts
    unchanged, which the correctness gate compares by matching detections (see
    :mod:`autotune.worker.detections`).
    """

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        self.detector = detector

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        return self.detector(list(images.unbind(0)))  # type: ignore[no-any-return]


def _calibrate_batchnorm(detector: nn.Module, *, size: int, batches: int = 2) -> None:
    """Set the backbone's BatchNorm running statistics from random images (in place; weights untouched).

    With random weights torchvision's BatchNorm layers hold their initial running statistics (mean 0,
    variance 1), so in eval mode they do not normalise: MobileNetV3's depthwise convolutions (kaiming
    fan-out init) shrink the activations layer by layer, the FPN features come out at ~1e-7, every RoI
    gets the same class logits (the biases) and every detection the same score. Such a detector is one
    big tie: its post-processing (top-k, NMS) ranks equal numbers, which neither exercises it nor gives
    a representative timing. Running the backbone on two seeded batches of N(0, 1) images (what
    autotune feeds) with BatchNorm in training mode and a cumulative average (``momentum=None``) gives
    O(1) features, spread scores and distinct boxes, as a trained model has.
    """
    bns = [mod for mod in detector.modules() if isinstance(mod, nn.modules.batchnorm._BatchNorm)]
    gen = torch.Generator().manual_seed(0)
    momenta = [bn.momentum for bn in bns]
    with torch.no_grad():
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None
            bn.train()
        for _ in range(batches):
            images = torch.randn(2, 3, size, size, generator=gen)
            transformed, _ = detector.transform(list(images.unbind(0)))  # type: ignore[operator]
            detector.backbone(transformed.tensors)  # type: ignore[operator]
    for bn, momentum in zip(bns, momenta, strict=True):
        bn.momentum = momentum
    detector.eval()


def fasterrcnn_batched(num_classes: int = 5, min_size: int = 320, max_size: int = 320,
                       calibrate: bool = True, **kwargs: object) -> nn.Module:
    """torchvision's ``fasterrcnn_mobilenet_v3_large_320_fpn`` with random weights, in eval mode, batched.

    No weights are downloaded (``weights=None, weights_backbone=None``): the recipes and tests time and
    gate the architecture, not its accuracy. The 320 model's defaults (``min_size=max_size=320``, 150
    RPN proposals) keep a CPU forward at batch 2 well under a second (~0.12 s on 2 cores). A handful of
    classes by default: random class scores are ~1/num_classes, and with COCO's 91 none clears the 0.05
    score threshold (no detection, nothing post-processed). ``calibrate`` sets the backbone's
    BatchNorm statistics from random images (:func:`_calibrate_batchnorm`; ``False`` keeps torchvision's
    initial ones, whose detections all tie). Extra ``kwargs`` go to the torchvision builder
    (``box_score_thresh``, ``box_detections_per_img``, ``box_nms_thresh``, ...).
    """
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    detector = fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=num_classes, min_size=min_size, max_size=max_size,
        **kwargs,
    ).eval()
    if calibrate:
        _calibrate_batchnorm(detector, size=min_size)
    return BatchedDetector(detector).eval()
