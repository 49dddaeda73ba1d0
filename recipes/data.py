"""Data factories used by the shipped recipes (referenced as ``data.py:function`` in a recipe's ``[data]`` table).

autotune calls ``factory(batch_size=b, **kwargs)`` and times the model on the batches it yields, in order: a
tensor (one positional argument), a tuple of tensors (positional arguments) or a dict of tensors (keyword
arguments); dim 0 is the batch and the last batch may be partial.

Sample ``i`` of a dataset is drawn from its own random stream, seeded by ``(seed, i)``: the traffic is the same
sequence of samples whatever the batch size, so candidates at different batch sizes serve the same requests
(in more or fewer batches), and a run is repeatable.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

#: BERT's special token ids (bert-base-uncased's vocabulary): padding, [CLS] at the start, [SEP] at the end.
PAD_ID, CLS_ID, SEP_ID = 0, 101, 102
#: The first id of an ordinary word piece in that vocabulary (below it: [unused*] and special tokens).
FIRST_WORD_ID = 999


def _sample_count(batch_size: int, batches: int, samples: int | None) -> int:
    if batch_size < 1 or batches < 1:
        raise ValueError(f"batch_size and batches must be positive, got {batch_size} and {batches}")
    if samples is None:
        return batch_size * batches
    if samples < 1:
        raise ValueError(f"samples must be positive, got {samples}")
    return min(samples, batch_size * batches)


def text_length(seed: int, index: int, seq_min: int, seq_max: int) -> int:
    """Sample ``index``'s token count, special tokens included: log-normal, clipped to [seq_min, seq_max].

    Tokenised sentences and short documents are right-skewed: most are short and a tail is long, and a
    tokenizer truncates that tail at its ``max_length`` (the mass at ``seq_max``). The median is the
    geometric mean of the bounds and sigma 0.5, so for 20..128 the median is about 51 tokens and about 3%
    of the samples are truncated at 128; the longest sample of a batch, which sets the padded length,
    grows with the batch size as it does with real traffic.
    """
    rng = np.random.default_rng([seed, index, 0])
    median = math.sqrt(seq_min * seq_max)
    length = round(float(rng.lognormal(math.log(median), 0.5)))
    return min(max(length, seq_min), seq_max)


def bert_batches(batch_size: int, seq_min: int = 20, seq_max: int = 128, batches: int = 16, seed: int = 0,
                 vocab_size: int = 30522, samples: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Tokenised text for a BERT classifier: dicts of ``input_ids``, ``attention_mask``, ``token_type_ids``.

    Every batch is padded to its longest sample (dynamic padding, as Hugging Face's
    ``DataCollatorWithPadding`` does), so the sequence dimension varies between batches. Each sample is
    ``[CLS] word pieces [SEP]`` with its length from :func:`text_length`, then ``PAD_ID`` (0) up to the
    batch's length; ``attention_mask`` is 1 on the tokens and 0 on the padding; ``token_type_ids`` are 0
    (single-segment inputs, as in sentence classification). All int64.

    ``batches`` full batches, or, with ``samples`` (a dataset size), the samples cut into batches of
    ``batch_size`` with a partial last batch, at most ``batches`` of them.
    """
    if not 3 <= seq_min <= seq_max:
        raise ValueError(f"need 3 <= seq_min <= seq_max ([CLS], a word piece, [SEP]), got {seq_min}, {seq_max}")
    if vocab_size <= FIRST_WORD_ID:
        raise ValueError(f"vocab_size must exceed {FIRST_WORD_ID} (BERT's special ids), got {vocab_size}")
    total = _sample_count(batch_size, batches, samples)
    for start in range(0, total, batch_size):
        indices = range(start, min(start + batch_size, total))
        lengths = [text_length(seed, i, seq_min, seq_max) for i in indices]
        width = max(lengths)
        input_ids = torch.full((len(lengths), width), PAD_ID, dtype=torch.int64)
        attention_mask = torch.zeros((len(lengths), width), dtype=torch.int64)
        for row, (i, n) in enumerate(zip(indices, lengths, strict=True)):
            words = np.random.default_rng([seed, i, 1]).integers(FIRST_WORD_ID, vocab_size, n - 2)
            input_ids[row, 0], input_ids[row, n - 1] = CLS_ID, SEP_ID
            input_ids[row, 1:n - 1] = torch.from_numpy(words)
            attention_mask[row, :n] = 1
        yield {"input_ids": input_ids, "attention_mask": attention_mask,
               "token_type_ids": torch.zeros_like(input_ids)}


def image_batches(batch_size: int, height: int = 96, width: int = 96, batches: int = 8, seed: int = 0,
                  samples: int | None = None) -> Iterator[torch.Tensor]:
    """Preprocessed RGB images as one positional float32 tensor per batch, ``(b, 3, height, width)``.

    After resizing and cropping every image has the same shape, so only the batch dimension varies (the
    last batch, with ``samples``). Pixels are uniform in [0, 1), then ImageNet-normalised (minus each
    channel's mean, over its standard deviation): the range a deployed CNN sees.
    """
    total = _sample_count(batch_size, batches, samples)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    for start in range(0, total, batch_size):
        pixels = [np.random.default_rng([seed, i]).random((3, height, width), dtype=np.float32)
                  for i in range(start, min(start + batch_size, total))]
        yield (torch.from_numpy(np.stack(pixels)) - mean) / std
