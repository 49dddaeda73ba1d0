"""Causal LM families nobody here wrote, built from their configs (random weights, a few thin layers), for
``generate()`` recipes (benchmarks/recipes/bloom_generate.toml, falcon_generate.toml; session 44)."""

from __future__ import annotations

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
