"""How each engine carries advise's candidates: a setting an engine reads otherwise is carried as
its nearest spec, linked to the raced candidate that reads alike, and never recommended under the
candidate's own name (issue 51)."""

import pytest

from attntemp.advise.candidates import by_key, candidates, rotary
from attntemp.advise.carry import AS_MEANT, computes_as_meant, reads_alike, with_engines
from attntemp.hf.loading import load_model
from attntemp.ops.spec import TemperatureSpec


@pytest.fixture(scope="module")
def raced():
    model, _ = load_model("tiny")
    config = model.config.to_dict()
    return with_engines(candidates(512 / 256, 256, rotary(config)), 256, 512, config), config


@pytest.mark.parametrize(
    ("key", "engine", "near"),
    [
        ("dynamic", "vllm", "ntk-static"),  # vLLM 0.22+ reads dynamic as no scaling, 0.11-0.21 as static NTK
        ("dynamic", "llama.cpp", "ntk-static"),  # the converter drops dynamic
        ("yarn-past-l0", "vllm", "yarn"),  # the long factors at every length: YaRN's frequencies
        ("yarn-past-l0+m", "llama.cpp", "yarn+m"),  # with YaRN's attention factor: YaRN with its m
    ],
)
def test_a_setting_read_otherwise_is_carried_as_the_nearest_raced_candidate(raced, key, engine, near):
    cands, _ = raced
    route = by_key(cands, key).engines[engine]
    assert route["how"] == "nearest" and route["as"] == near and route["why"]
    assert not computes_as_meant(by_key(cands, key), engine) and computes_as_meant(by_key(cands, near), engine)


def test_transformers_computes_every_candidate_as_meant_or_says_why_not(raced):
    cands, _ = raced
    for c in cands:
        route = c.engines["transformers"]
        assert route["how"] in AS_MEANT or (route["how"] == "not carried" and route["why"]), c.key


def test_reads_alike_compares_frequencies_and_the_total_logit_multiplier(raced):
    cands, config = raced
    geo = rotary(config)
    yarn, yarn_m = by_key(cands, "yarn").spec, by_key(cands, "yarn+m").spec
    assert reads_alike(yarn, yarn, 256, 512, geo)
    assert not reads_alike(yarn, yarn_m, 256, 512, geo)  # same frequencies, another m
    assert not reads_alike(yarn, by_key(cands, "yarn-smaller").spec, 256, 512, geo)  # another scale
    # m on the spec or as YaRN's attention factor on cos and sin (squared on the logits): the same logits
    factor = by_key(cands, "yarn-past-l0+m").spec
    f = dict(factor.rope)["attention_factor"]
    as_m = TemperatureSpec.from_dict(
        {**factor.to_dict(), "multiplier": f * f, "rope": {**factor.to_dict()["rope"], "attention_factor": 1.0}}
    )
    assert f > 1 and reads_alike(factor, as_m, 256, 512, geo)
    assert not reads_alike(factor, by_key(cands, "yarn-past-l0").spec, 256, 512, geo)
    assert not reads_alike(by_key(cands, "yarn").spec, by_key(cands, "yarn+logn").spec, 256, 512, geo)  # schedule


@pytest.mark.parametrize(
    ("key", "engine", "served"),
    [
        ("baseline", "vllm", ['"max_position_embeddings": 512}', "--max-model-len 512"]),
        ("baseline", "llama.cpp", ["--ctx-size 512", "context_length=int:512"]),
        ("yarn", "vllm", ['"max_position_embeddings": 512}', "--max-model-len 512"]),
        ("yarn", "llama.cpp", ["--ctx-size 512"]),
    ],
)
def test_every_route_serves_the_length_asked(raced, key, engine, served):
    """advise --length 512: each engine's settings serve 512 tokens (issue 60: they served s L0)."""
    cands, _ = raced
    settings = by_key(cands, key).engines[engine]["settings"]
    assert all(s in settings for s in served), settings


def test_a_yarn_whose_s_l0_is_short_of_the_length_is_served_past_it_or_not_carried(raced):
    """YaRN s = 1.5 at 512 (s L0 = 384): llama.cpp serves it to 512 with n_ctx_train raised; vLLM
    0.11-0.29 refuse --max-model-len past orig x factor, so vLLM does not carry it (no bake route
    either: the RoPE itself is what the engine refuses)."""
    cands, _ = raced
    small = next(c for c in cands if c.name == "YaRN s = 1.5, m = 1")
    assert "--ctx-size 512" in small.engines["llama.cpp"]["settings"]
    assert "context_length=int:512" in small.engines["llama.cpp"]["settings"]
    vllm = small.engines["vllm"]
    assert vllm["how"] == "not carried" and "--max-model-len 512 > the derived max_model_len 384" in vllm["why"]
