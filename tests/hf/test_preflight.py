"""Generation's memory estimate: the prompt's forward keeps the last position's logits only."""

from attntemp.hf import preflight

# a Llama-3-8B-like config: 128k vocabulary
CFG = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}


def test_generation_estimate_has_no_prompt_by_vocabulary_term(monkeypatch):
    asked = []
    monkeypatch.setattr(preflight.resources, "check_memory", lambda name, value, needed, what: asked.append(needed))
    for n in (1024, 131072):
        preflight.check_generation("max_new_tokens", 8, CFG, n, 8)
    small, long = asked
    per_token = (long - small) / (131072 - 1024)
    logits_row = preflight.BYTES * CFG["vocab_size"]  # what [n, V] logits would add per prompt token
    body = preflight.BYTES * (8 * 4096 + 4 * 14336) + preflight.kv_cache_bytes(CFG, 1)
    assert abs(per_token - body) < 1e-6 * body  # activations and KV cache per token; no V term
    full = preflight.forward_bytes(CFG, 1, 131072)  # a plain forward does form them: 64 GB more
    assert full - long > 0.9 * 131072 * logits_row - preflight.kv_cache_bytes(CFG, 131080)
