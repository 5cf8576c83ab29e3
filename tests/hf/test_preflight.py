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


GEMMA3_270M = {  # google/gemma-3-270m's text config: a 262k vocabulary on a 640-wide model
    "hidden_size": 640,
    "intermediate_size": 2048,
    "vocab_size": 262144,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
}


def test_a_scoring_forward_is_charged_one_chunk_of_logits_not_the_length_times_the_vocabulary():
    """Gemma 3 270M at 49152 tokens measured 4.6 GiB peak (docs/results/gemma3_long_context*.json);
    charged [L, V] float32 logits it was refused at 52 GiB on a 24 GiB machine."""
    scoring = preflight.forward_bytes(GEMMA3_270M, 1, 49152, head_chunk=preflight.LOGIT_CHUNK)
    plain = preflight.forward_bytes(GEMMA3_270M, 1, 49152)
    assert scoring < 8 * 2**30 < 50 * 2**30 < plain
    longer = preflight.forward_bytes(GEMMA3_270M, 1, 98304, head_chunk=preflight.LOGIT_CHUNK)
    per_token = preflight.BYTES * (8 * 640 + 4 * 2048)  # activations only: no vocabulary term
    assert abs((longer - scoring) / 49152 - per_token) < 1e-6 * per_token
    with_grad = preflight.forward_bytes(GEMMA3_270M, 1, 49152, grad=True, head_chunk=preflight.LOGIT_CHUNK)
    assert with_grad > plain  # the backward pass keeps every chunk's logits: no discount
