"""``attntemp audit --readings``: each reading's prediction set against what an engine returned.

The verdicts are tested on made-up engine outputs (a NaN where the reading names it or elsewhere, a
refusal or not); the prediction on the proxy against a plain forward; the run in vLLM itself is
opt-in (``engines`` marker: bash scripts/build_vllm_cpu.sh first)."""

from __future__ import annotations

import math

import pytest
import torch

from attntemp.ship import engine_common
from attntemp.ship.audit.run import AuditConfig, run_audit
from attntemp.ship.engine_common import save_proxy
from attntemp.ship.engines import vllm as vllm_engine
from attntemp.ship.readings import engine_checks as ar
from attntemp.ship.readings import reader_for, readers_of

VLLM_NEW = reader_for("vllm", "0.32.0")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    return save_proxy(ar.PROXY_CONFIG, tmp_path_factory.mktemp("proxy")).eval()


def case(name: str) -> ar.Case:
    return next(c for c in ar.cases() if c.name.startswith(name))


@pytest.mark.parametrize(
    ("version", "label"),
    [
        ("0.32.0", ">=0.30"),
        ("0.30.0", ">=0.30"),
        ("0.29.1", "0.22-0.29"),
        ("0.22.0", "0.22-0.29"),
        ("0.21.0", "0.11-0.21"),
    ],
)
def test_the_installed_version_picks_its_range(version, label):
    assert reader_for("vllm", version).versions == label


@pytest.mark.parametrize("version", ["0.10.2", "nightly", ""])
def test_a_version_no_reading_covers_is_refused_naming_the_ranges(version):
    with pytest.raises(ValueError, match=r"version=.*0.11-0.21, 0.22-0.29, >=0.30"):
        reader_for("vllm", version)


def test_the_prediction_with_transformers_own_frequencies_is_the_plain_forward_and_restores_the_proxy(proxy):
    row = ar.random_row(64)
    plain = readers_of("transformers")[0](ar.Case("plain", {}, 64, 256).handed(), 64)
    before = [m.inv_freq.clone() for m in proxy.modules() if hasattr(m, "attention_scaling")]
    got = ar.predicted_logp(proxy, row, plain)  # [63, V]
    with torch.no_grad():
        want = torch.log_softmax(proxy(torch.tensor([row])).logits[0, :-1].double(), -1)
    assert torch.allclose(got, want, atol=1e-6)
    after = [m.inv_freq for m in proxy.modules() if hasattr(m, "attention_scaling")]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_changed_multiplier_moves_the_prediction(proxy):
    c = case("yarn")
    row = ar.random_row(c.n)
    reading = VLLM_NEW(c.handed(), c.n)
    plain = readers_of("transformers")[0](ar.Case("plain", {}, c.n, 512, 512).handed(), c.n)
    assert engine_common.kl(ar.predicted_logp(proxy, row, plain), ar.predicted_logp(proxy, row, reading)) > 1e-3


def test_vllm_0_32_predicts_a_break_from_l0_for_dynamic_past_l0_and_plain_rope_under_it():
    under, past = case("dynamic s = 2, request under"), case("dynamic s = 2, request past")
    assert VLLM_NEW(under.handed(), under.n).breaks == ""
    assert ar.break_from(VLLM_NEW(past.handed(), past.n)) == ar.L0


def _engine(mine: torch.Tensor, broken: int | None, how: str) -> torch.Tensor:
    """``mine`` with its rows from ``broken`` on NaN or replaced by other (shuffled) distributions."""
    got = mine.clone()
    if broken is not None:
        got[broken:] = math.nan if how == "nan" else mine[broken:].flip(-1)
    return got


@pytest.mark.parametrize(
    ("broken", "how", "shift", "confirmed"),
    [
        (256, "nan", 0.0, True),  # NaN exactly where the reading says, the same logits before
        (256, "garbage", 0.0, True),  # other distributions from there on, the same before
        (200, "nan", 0.0, False),  # NaN earlier than predicted
        (200, "garbage", 0.0, False),  # off earlier than predicted
        (None, "nan", 0.0, False),  # the reading's own RoPE past the cache: no break where one is predicted
        (256, "nan", 0.5, False),  # the right NaN, other logits before it
    ],
)
def test_a_break_is_confirmed_only_where_it_falls_and_the_rest_agrees(proxy, broken, how, shift, confirmed):
    c = case("dynamic s = 2, request past")
    reading = VLLM_NEW(c.handed(), c.n)
    row = ar.random_row(c.n)
    mine = ar.predicted_logp(proxy, row, reading)  # [n-1, V]
    got = torch.log_softmax(_engine(mine, broken, how) * (1 + shift), -1)
    assert ar.reading_verdict(c, reading, mine, got, 0.0)["confirmed"] is confirmed


@pytest.mark.parametrize(("engine_refused", "confirmed"), [(True, True), (False, False)])
def test_a_refusal_is_confirmed_only_where_the_engine_refuses(engine_refused, confirmed):
    c = ar.Case("longer than served", {"rope_type": "dynamic", "factor": 2.0}, 600, 512)
    reading = VLLM_NEW(c.handed(), c.n)
    assert reading.breaks.startswith("refuses")
    got = None if engine_refused else torch.zeros(c.n - 1, 258)
    assert ar.reading_verdict(c, reading, None, got, 0.0)["confirmed"] is confirmed


def test_an_engine_that_refuses_what_the_reading_says_it_runs_is_not_confirmed(proxy):
    c = case("yarn")
    assert ar.reading_verdict(c, VLLM_NEW(c.handed(), c.n), torch.zeros(3, 4), None, 0.0)["confirmed"] is False


def test_the_engines_top_lists_become_dense_rows_and_a_nan_marks_its_row():
    got = {"rows": [{"top": [[[0, -0.1], [1, -2.4]], [[1, math.nan], [0, -1.0]]]}]}
    (dense,) = engine_common.engine_rows(got, 3)
    assert dense.shape == (2, 3) and dense[0, 0] == -0.1 and dense[0, 2] == -math.inf
    assert torch.isnan(dense[1]).all() and not torch.isnan(dense[0]).any()


def test_some_cases_tell_vllms_reading_from_transformers(proxy):
    """A case where both readings agree cannot fail on the difference: at least the dynamic, longrope
    served past L0 cases must move the logits (KL over the limit) between the two readings."""
    hf = readers_of("transformers")[0]
    apart = []
    for i, c in enumerate(ar.cases()):
        mine, theirs = VLLM_NEW(c.handed(), c.n), hf(c.handed(), c.n)
        row = ar.random_row(c.n, seed=i)
        apart.append(
            engine_common.kl(ar.predicted_logp(proxy, row, theirs), ar.predicted_logp(proxy, row, mine))
            > ar.READINGS_KL
        )
    assert sum(apart) >= 3


def test_audit_needs_a_config_or_readings():
    with pytest.raises(ValueError, match="config is missing"):
        AuditConfig()


def test_readings_with_no_engine_to_check_is_refused_not_passed(monkeypatch):
    monkeypatch.setattr(vllm_engine, "unavailable", lambda: "vLLM is not installed (test)")
    with pytest.raises(ValueError, match=r"no reading was checked.*not installed"):
        run_audit(AuditConfig(readings=True, engines=("transformers", "vllm")))


@pytest.mark.engines
def test_every_reading_is_confirmed_in_the_installed_vllm():
    """Opt-in: the readings of vLLM's installed version against vLLM itself."""
    result = run_audit(AuditConfig(readings=True, engines=("vllm",)))
    rows = result.readings["vllm"].get("rows")
    if rows is None:
        pytest.fail(f"{result.readings['vllm']['reason']} (opt-in: bash scripts/build_vllm_cpu.sh first)")
    assert all(r["confirmed"] for r in rows), [r for r in rows if not r["confirmed"]]


# ----------------------------------------------------------------------------- llama.cpp
def test_llamacpps_cases_each_read_otherwise_than_transformers(proxy):
    """Every llama.cpp case is one where its reading and transformers' part (so the check can fail):
    dynamic runs plain RoPE, yarn's attention_factor and the --yarn-attn-factor flag are dropped for
    (0.1 ln 2 + 1)^2, rope_freqs apply under L0 too."""
    from attntemp.ship.readings.in_llamacpp import llama_cases
    from attntemp.ship.readings.of_llamacpp import LLAMACPP

    hf = readers_of("transformers")[0]
    yarn_m = (0.1 * math.log(2) + 1) ** 2
    for case in llama_cases():
        mine, theirs = LLAMACPP(case.handed(), case.n), hf(case.meant(), case.n)
        assert not mine.breaks, case.name
        if "yarn s = 2" in case.name:  # the GGUF factor multiplies YaRN's own on cos/sin; the rest is dropped
            own = yarn_m * (case.gguf_factor or 1.0) ** 2
            assert mine.multiplier == pytest.approx(own) and theirs.multiplier == pytest.approx(1.44)
        row = random_row_for(case.n)
        assert (
            engine_common.kl(ar.predicted_logp(proxy, row, theirs), ar.predicted_logp(proxy, row, mine))
            > ar.READINGS_KL
        ), case


def random_row_for(n: int) -> list[int]:
    return ar.random_row(n, seed=3)


@pytest.mark.engines
def test_every_reading_is_confirmed_in_the_installed_llamacpp():
    """Opt-in: llama.cpp's reading against llama.cpp itself (bash scripts/build_llama_cpp.sh first)."""
    result = run_audit(AuditConfig(readings=True, engines=("llama.cpp",)))
    rows = result.readings["llama.cpp"]["rows"]
    assert all(r["confirmed"] for r in rows), [r for r in rows if not r["confirmed"]]


def test_a_break_with_one_row_matching_by_chance_is_still_confirmed(proxy):
    """Memory read past a table can match the reading's RoPE on a row by chance (seen in vLLM 0.32)."""
    c = case("dynamic s = 2, request past")
    reading = VLLM_NEW(c.handed(), c.n)
    mine = ar.predicted_logp(proxy, ar.random_row(c.n), reading)  # [n-1, V]
    got = _engine(mine, 256, "garbage")
    got[300] = mine[300]
    assert ar.reading_verdict(c, reading, mine, got, 0.0)["confirmed"] is True
