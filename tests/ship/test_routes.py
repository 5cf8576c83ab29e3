"""attntemp.ship.engines.routes: no export route hands an engine a setting it reads otherwise.

Every engine x every rope kind: the export's settings, read back and run through every reading of
that engine, compute what the spec means at each checked length (transformers' reading of the spec),
or the result names the nearest spec it carries (and the settings compute that one), or it refuses."""

import json

import pytest
from tiny_configs import config

import attntemp.ship.export as E
from attntemp.ops.rope.params import Rope
from attntemp.ops.spec import TemperatureSpec
from attntemp.ship.engines import ENGINES
from attntemp.ship.engines.base import ExportResult, ExportTarget
from attntemp.ship.engines.routes import departures
from attntemp.ship.readings import Handed, differs, lengths, meant, readers_of
from attntemp.ship.readings.of_transformers import TRANSFORMERS

L0 = 128  # the tiny llama config: max_position_embeddings 128, head_dim 16, rope_theta 10000
CFG = config("llama").to_dict()
DIM, THETA = 16, 10000.0
YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": L0}
SPECS = {
    "dynamic": TemperatureSpec(rope={"rope_type": "dynamic", "factor": 2.0}),
    "yarn, attention_factor 1": TemperatureSpec(rope={**YARN, "attention_factor": 1.0}),
    "yarn, default": TemperatureSpec(rope=YARN),
    "yarn + m": TemperatureSpec(multiplier=1.2, rope=YARN),
    "longrope, short_factor 1": TemperatureSpec(
        rope={
            **YARN,
            "rope_type": "longrope",
            "short_factor": [1.0] * 8,
            "long_factor": [1.0 + i / 4 for i in range(8)],
        }
    ),
    "ntk": TemperatureSpec(rope={"rope_type": "ntk", "factor": 2.0}),
    "dynamic + m": TemperatureSpec(multiplier=1.2, rope={"rope_type": "dynamic", "factor": 2.0}),
}
# what each engine does with each: carried as meant, its nearest spec, or refused
ORDER = ("transformers", "vllm", "llama.cpp")
OUTCOMES = {
    "dynamic": ("meant", "nearest", "nearest"),
    "yarn, attention_factor 1": ("meant", "meant", "meant"),
    "yarn, default": ("meant", "meant", "meant"),
    "yarn + m": ("meant", "meant", "meant"),
    "longrope, short_factor 1": ("meant", "nearest", "nearest"),
    "ntk": ("meant", "meant", "meant"),
    "dynamic + m": ("refused", "refused", "nearest"),  # only llama.cpp has a knob for m without YaRN
}
EXPECTED = {engine: {case: OUTCOMES[case][i] for case in OUTCOMES} for i, engine in enumerate(ORDER)}


def read_as_meant(engine, result, spec):
    """Every departure of ``engine``'s readings of ``result`` from what ``spec`` means (empty: none),
    read back as the engine module does and checked here, length by length."""
    e = ENGINES[engine]
    params = spec.rope if spec.rope.l0 else spec.rope.updated(original_max_position_embeddings=L0)
    got = e.reads_back(result, Handed({}, DIM, THETA, L0, L0))  # the model: its config unchanged
    want = meant(params, DIM, THETA, L0)
    out = []
    for n in lengths(L0, 2 * L0):  # every spec here extends to s L0 = 256
        reference = TRANSFORMERS(want, n)
        out += [w for r in readers_of(engine) if (w := differs(r(got, n), reference, spec.multiplier))]
    return out


def test_every_engine_has_its_expected_routes():
    assert set(EXPECTED) == set(ENGINES)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("case", list(SPECS))
def test_no_route_hands_an_engine_a_setting_it_reads_otherwise(engine, case):
    spec = SPECS[case]
    try:
        result = E.export(spec, engine, trained_length=L0, config=CFG, gguf_arch="llama")
    except ValueError as exc:
        assert EXPECTED[engine][case] == "refused", f"refused: {exc}"
        return
    carried = spec if result.nearest is None else result.nearest
    assert EXPECTED[engine][case] == ("meant" if result.nearest is None else "nearest")
    assert read_as_meant(engine, result, carried) == []
    assert result.checked == tuple(r.label for r in readers_of(engine))
    if result.nearest is not None:  # named as such, and not what was asked
        assert carried != spec and result.nearest_why and "NEAREST SPEC" in result.render()
        assert read_as_meant(engine, result, spec) != []


def test_the_old_vllm_route_for_dynamic_is_read_otherwise():
    """What export printed before (rope_type dynamic in --hf-overrides): no scaling and NaN past L0."""
    rp = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": THETA}
    old = ExportResult("vllm", 1.0, rp, ("--hf-overrides", json.dumps({"rope_parameters": rp})))
    params = Rope({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": L0})
    why = departures(ENGINES["vllm"], old, 1.0, params, ExportTarget(THETA, rotary_dim=DIM, positions=L0))
    assert "vllm 0.11-0.21 at n = 64: frequencies off" in why
    assert f"vllm 0.22-0.29 at n = {L0 + 1}: undefined past position {L0}" in why and "vllm >=0.30" in why


def test_vllm_dynamic_goes_as_static_ntk_at_an_explicit_theta_with_its_context():
    got = E.export(SPECS["dynamic"], "vllm", trained_length=L0, config=CFG)
    over = json.loads(got.args[got.args.index("--hf-overrides") + 1])
    assert over["rope_parameters"] == {"rope_type": "default", "rope_theta": pytest.approx(THETA * 3 ** (16 / 14))}
    assert over["max_position_embeddings"] == 256 and got.args[-2:] == ("--max-model-len", "256")
    assert got.nearest.rope == {"rope_type": "ntk", "factor": 3.0, "original_max_position_embeddings": L0}
    assert "alpha = s^2 - s + 1 = 3" in got.nearest_why and '"rope_type": "dynamic"' not in got.render()


def test_the_cli_route_for_dynamic_names_the_nearest_spec(tmp_path):
    """`attntemp export --spec dyn.json --engine vllm --config config.json`: no `dynamic` handed to vLLM."""
    spec = SPECS["dynamic"].save(tmp_path / "dyn.json")
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    cfg = E.ExportConfig(spec=str(spec), engine="vllm", config=str(tmp_path / "config.json"), trained_length=L0)
    text = E.run_export(cfg).render()
    assert "NEAREST SPEC vllm carries" in text and '\\"dynamic\\"' not in text and '"dynamic"' not in text


def test_without_the_models_geometry_the_nearest_is_refused_saying_what_it_needs():
    with pytest.raises(
        ValueError, match=r"not carried: vllm reads these settings otherwise: .*undefined past position 128"
    ):
        E.export(SPECS["dynamic"], "vllm", trained_length=L0)
    with pytest.raises(ValueError, match=r"needs the model's rope_theta and rotary dim \(pass its config: --config\)"):
        E.export(SPECS["dynamic"], "vllm", trained_length=L0)


def test_vllm_yarn_raises_max_position_embeddings_to_the_served_context():
    """From 0.30 vLLM refuses a --max-model-len past max_position_embeddings for yarn: the overrides raise it."""
    got = E.export(SPECS["yarn, default"], "vllm", trained_length=L0, config=CFG)
    assert json.loads(got.args[1])["max_position_embeddings"] == 256 and got.args[-1] == "256"
