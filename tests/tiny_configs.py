"""Tiny randomly initialised configs, one per supported architecture, built in code."""

import torch
import transformers as tf
from transformers import AttentionInterface

COMMON = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=128,
)


def config(arch: str):
    if arch == "llama":
        return tf.LlamaConfig(**COMMON, num_key_value_heads=2)
    if arch == "mistral":
        return tf.MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=24)
    if arch == "qwen2":
        return tf.Qwen2Config(**COMMON, num_key_value_heads=2)
    if arch == "qwen3":
        return tf.Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=16)
    if arch == "gemma2":
        return tf.Gemma2Config(
            **COMMON,
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=24,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=30.0,
        )
    if arch == "gemma3_text":
        return tf.Gemma3TextConfig(
            **COMMON,
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=24,
            layer_types=["sliding_attention", "full_attention"],
        )
    if arch == "phi3":
        return tf.Phi3Config(**COMMON, num_key_value_heads=2, pad_token_id=0)
    if arch == "gpt_neox":
        return tf.GPTNeoXConfig(
            vocab_size=97,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=128,
            rotary_pct=0.25,
        )
    raise KeyError(arch)


ARCHS = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "gpt_neox")


def model(arch: str, seed: int = 0, attn: str = "sdpa"):
    torch.manual_seed(seed)
    cfg = config(arch)
    if arch == "gemma2":
        attn = "eager"  # soft-capping: transformers' sdpa refuses it
    m = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    return m.eval()


class Capture:
    """Wrap the registered attention function to record what reaches it and what it returns."""

    def __init__(self, name):
        self.name, self.calls = name, []

    def __enter__(self):
        self.orig = AttentionInterface._global_mapping[self.name]

        def spy(module, q, k, v, mask, **kw):
            out = self.orig(module, q, k, v, mask, **kw)
            self.calls.append((module.layer_idx, q, k, v, kw, out[0]))
            return out

        AttentionInterface._global_mapping[self.name] = spy
        return self

    def __exit__(self, *exc):
        AttentionInterface._global_mapping[self.name] = self.orig
