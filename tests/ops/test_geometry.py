"""ModelGeometry.from_config: the one reading of a config's attention geometry, on the shipped
configs, the tiny model (as a dict and as a transformers config), Gemma 3's multimodal config and
bad values (each error naming the field, its value and what is allowed)."""

import copy
import json

import pytest
import transformers as tf

from attntemp.assets import configs_path, tiny_path
from attntemp.ops.attention_config import groups
from attntemp.ops.geometry import ModelGeometry, stated_l0, stated_positions

SHIPPED = sorted(p.stem for p in configs_path().glob("*.json"))
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
         "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 10000.0}  # fmt: skip
YARN4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}


def shipped(name: str) -> dict:
    return json.loads((configs_path() / f"{name}.json").read_text())


# name: (layers, q heads, kv heads, head_dim, rotary_dim, max positions, trained length, layer types, rope_type)
FACTS = {
    "llama3_1": (32, 32, 8, 128, 128, 131072, 8192, {"full_attention"}, "llama3"),
    "qwen3_yarn": (36, 32, 8, 128, 128, 131072, 32768, {"full_attention"}, "yarn"),
    "phi3_mini_128k": (32, 32, 32, 96, 96, 131072, 4096, {"full_attention"}, "longrope"),  # top-level L0
    "gemma3_4b": (34, 8, 4, 256, 256, 131072, 131072, {"full_attention", "sliding_attention"}, "linear"),
    "deepseek_v3": (61, 128, 128, 192, 64, 163840, 4096, {"full_attention"}, "yarn"),  # MLA: nope + rope
    "deepseek_v4": (43, 64, 1, 512, 64, 1048576, 65536, {"full_attention"}, "yarn"),
    "qwen3_next_1m": (48, 16, 2, 256, 64, 1048576, 262144, {"full_attention"}, "yarn"),  # partial rotary 0.25
    "gpt_oss": (24, 64, 8, 64, 64, 131072, 4096, {"full_attention", "sliding_attention"}, "yarn"),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_shipped_configs_read_as_their_model_cards_say(name):
    g = ModelGeometry.from_config(shipped(name))
    found = (g.num_layers, g.num_heads, g.num_kv_heads, g.head_dim, g.rotary_dim, g.max_positions,
             g.trained_length, set(g.layer_types), g.rope_of()["rope_type"])  # fmt: skip
    assert found == FACTS[name]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_has_one_geometry_and_the_audit_reads_it(name):
    """Every shipped config reads; its groups (the audit's reference) carry this very geometry, and
    their L0 is the geometry's trained length where the RoPE is scaled."""
    config = shipped(name)
    g = ModelGeometry.from_config(config)
    assert len(g.layer_types) == len(g.rope_layers) == g.num_layers
    assert g.num_heads % g.num_kv_heads == 0 and 0 < g.rotary_dim <= g.head_dim
    assert g.trained_length is not None and g.trained_length <= (g.max_positions or g.trained_length)
    found = groups(config)
    assert all(grp.geometry == g for grp in found)
    if g.rope_of()["rope_type"] not in ("default", "dynamic"):
        assert g.l0(g.rope_of()) == g.trained_length


def test_llama4_nope_layers_and_gemma3_local_base():
    scout = ModelGeometry.from_config(shipped("llama4_scout"))
    assert scout.rope_layers.count(False) == 12 and not scout.rope_layers[3] and scout.rope_layers[0]
    gemma = ModelGeometry.from_config(shipped("gemma3_4b"))
    assert gemma.layer_types[:6] == ("sliding_attention",) * 5 + ("full_attention",)  # sliding_window_pattern 6
    assert (gemma.rope_theta, gemma.local_rope_theta, gemma.sliding_window) == (1e6, 1e4, 1024)
    assert gemma.rope_of("sliding_attention") == {"rope_type": "default", "rope_theta": 10000.0}  # not scaled


def test_gemma3_text_config_as_a_dict_and_as_a_transformers_config():
    """A multimodal config is read through its text config: the ``text_config`` of the dict, the
    ``get_text_config()`` of the transformers object; both give the same geometry."""
    text = {"num_hidden_layers": 6, "max_position_embeddings": 2048, "num_attention_heads": 4, "head_dim": 16}
    outer = tf.Gemma3Config(text_config={**text, "num_key_value_heads": 2})
    from_object = ModelGeometry.from_config(outer)
    from_dict = ModelGeometry.from_config(outer.to_dict())
    assert from_object == from_dict
    assert from_object.model_type == "gemma3_text" and from_object.num_layers == 6
    assert from_object.layer_types == ("sliding_attention",) * 5 + ("full_attention",)
    assert (from_object.rope_theta, from_object.local_rope_theta) == (1e6, 1e4)
    assert (from_object.max_positions, from_object.trained_length) == (2048, 2048)


def test_the_tiny_model_as_a_dict_and_as_its_loaded_config():
    config = json.loads((tiny_path() / "config.json").read_text())
    g = ModelGeometry.from_config(config)
    assert ModelGeometry.from_config(tf.AutoConfig.from_pretrained(tiny_path())) == g
    assert (g.num_layers, g.num_heads, g.num_kv_heads, g.head_dim, g.max_positions, g.trained_length) == (
        4, 8, 4, 16, 256, 256)  # fmt: skip
    assert g.layer_types == ("full_attention",) * 4 and g.sliding_window is None and g.rope_theta == 10000.0


def test_an_extension_in_the_config_gives_its_l0_and_plain_rope_the_context():
    assert ModelGeometry.from_config({**LLAMA, "rope_scaling": YARN4}).trained_length == 1024
    assert ModelGeometry.from_config(LLAMA).trained_length == 4096
    phi3 = tf.Phi3Config(num_hidden_layers=2, max_position_embeddings=128)  # original_max_position_embeddings 4096
    assert ModelGeometry.from_config(phi3).trained_length == 128  # plain RoPE: L0 is the context
    dynamic = ModelGeometry.from_config({**LLAMA, "rope_scaling": {**YARN4, "rope_type": "dynamic", "factor": 2.0}})
    assert dynamic.base_length(dynamic.rope_of()) == 4096 and dynamic.ignored_l0() == 1024


def test_rope_of_is_a_copy_and_the_stated_readers():
    g = ModelGeometry.from_config({**LLAMA, "rope_scaling": YARN4})
    g.rope_of()["factor"] = 99.0
    assert g.rope_of()["factor"] == 4.0
    assert stated_l0(YARN4) == 1024 and stated_l0({"rope_type": "linear"}) is None and stated_l0(None) is None
    assert stated_positions(tf.LlamaConfig(max_position_embeddings=77)) == 77 and stated_positions(object()) is None


def test_a_config_without_max_positions_has_none():
    config = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    g = ModelGeometry.from_config(config)
    assert g.max_positions is None and g.trained_length is None
    with pytest.raises(ValueError, match="config has no 'max_position_embeddings'; expected a positive integer"):
        g.positions()


BAD = [
    ({"num_key_value_heads": 3}, "config.num_key_value_heads=3 is not allowed: it must divide num_attention_heads=2"),
    ({"max_position_embeddings": 0}, r"config.max_position_embeddings=0 is not allowed; expected an integer >= 1"),
    ({"max_position_embeddings": 2**40}, r"config.max_position_embeddings=1099511627776 is not allowed; expected at"),
    ({"num_hidden_layers": None}, "config has no 'num_hidden_layers'; expected a positive integer there"),
    ({"head_dim": 0}, r"config.head_dim=0 is not allowed; expected an integer >= 1"),
    ({"sliding_window": -1}, r"config.sliding_window=-1 is not allowed; expected an integer >= 1"),
    ({"layer_types": ["full_attention"]}, r"config.layer_types has 1 entries; expected 2 strings"),
    ({"rope_parameters": [1]}, r"config.rope_parameters=\[1\] is not allowed; expected an object"),
    ({"rope_scaling": {**YARN4, "rope_type": "yarm"}}, r"config rope_type='yarm' is not allowed.*Did you mean 'yarn'"),
    ({"rope_scaling": {**YARN4, "original_max_position_embeddings": 0}},
     r"config.rope_scaling.original_max_position_embeddings=0 is not allowed; expected an integer >= 1"),
    ({"rope_scaling": {**YARN4, "original_max_position_embeddings": 8192}},
     r"config.rope_scaling.original_max_position_embeddings=8192 is not allowed; expected at most "
     r"max_position_embeddings=4096"),
    ({"rope_theta": -1.0}, r"config.rope_theta=-1.0 is not allowed"),  # the top-level field, where it is read
    ({"rope_theta": 1e308}, r"config.rope_theta=1e\+308 is not allowed; expected a number in \(1, 1e\+12\]"),
    ({"rope_scaling": {**YARN4, "rope_theta": 0.5}}, r"config.rope_scaling.rope_theta=0.5 is not allowed"),
    ({"layer_types": "full_attention"}, r"config.layer_types='full_attention' is not allowed; expected a list of"),
    ({"original_max_position_embeddings": 0}, r"config.original_max_position_embeddings=0 is not allowed"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_values_raise_naming_the_field_the_value_and_what_is_allowed(change, message):
    config = {k: v for k, v in {**copy.deepcopy(LLAMA), **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        ModelGeometry.from_config(config)


@pytest.mark.parametrize("config", [[1, 2], {"text_config": "gemma"}])
def test_a_config_must_be_an_object(config):
    with pytest.raises(ValueError, match="is not allowed; expected a JSON object"):
        ModelGeometry.from_config(config)
