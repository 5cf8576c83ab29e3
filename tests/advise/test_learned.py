"""advise's learned and added candidates (:mod:`attntemp.advise.learned`): per-head m and LongRoPE
factors learned on windows the race never scores, raced beside the built-in candidates with how
every engine carries them; a rerun reads the finished learning instead of training again; a spec
file from ``attntemp tune`` raced as given."""

import pytest
import torch

from attntemp.advise import learned
from attntemp.advise.config import LEARN_WINDOWS, SPARE, AdviseConfig
from attntemp.advise.run import run_advise
from attntemp.evaluate.corpus import heldout_windows
from attntemp.evaluate.task_base import eval_context, tuning_context
from attntemp.ops.rope.factors import init_factors
from attntemp.ops.spec import TemperatureSpec

SMALL = {"length": 512, "race_windows": 4, "block": 2, "min_windows": 2, "n_docs": 3, "tune_m": False,
         "check_lengths": (), "heldout_text": "none", "threads": 1, "progress": False, "retrieval_per_window": 1,
         "trials": 4, "learn_steps": 6}  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One small run's settings with the learned candidates and one added spec file (m = 0.95 everywhere)."""
    w = tmp_path_factory.mktemp("learned")
    TemperatureSpec(multiplier=0.95).save(w / "soft95.json")
    out = w / "out"
    return w, out, {**SMALL, "add_spec": (str(w / "soft95.json"),), "out": str(out)}


def _advise(settings: dict) -> dict:
    return run_advise(AdviseConfig(**settings)).to_dict()


def test_the_learned_and_added_candidates_are_raced_with_each_engines_route(run):
    w, out, settings = run
    doc = _advise(settings)
    by_key = {c["key"]: c for c in doc["candidates"]}
    head, rope, added = by_key["per-head"], by_key["longrope-learned"], by_key["added-1"]
    heads = TemperatureSpec.from_dict(head["spec"]).heads
    assert heads is not None and len({round(m, 6) for row in heads for m in row}) > 1  # the heads moved apart
    assert all(head["engines"][e]["how"] == "bake" for e in ("vllm", "llama.cpp"))  # m in q_proj
    r = dict(TemperatureSpec.from_dict(rope["spec"]).rope)
    assert r["rope_type"] == "longrope" and set(r["short_factor"]) == {1.0} and r["attention_factor"] == 1.0
    start = init_factors("yarn", 16, 10000.0, 2.0, 256)  # the tiny model: head_dim 16, theta 1e4, L0 256
    assert not torch.allclose(torch.tensor(r["long_factor"]), start.float())  # learned away from YaRN's
    past = by_key["per-head-past-l0"]
    assert past["spec"]["schedule"] == "log_length" and past["gated"]  # ln m = b ln(n / L0), a = 0
    assert past["engines"]["transformers"]["how"] == "remote code"  # a position schedule on a Llama
    assert rope["gated"] and not head["gated"]
    assert added["name"] == f"added: {w / 'soft95.json'}" and added["spec"]["multiplier"] == 0.95
    for c in (head, rope, added):
        assert c["retrieval"] is not None and set(c["engines"]) == {"transformers", "vllm", "llama.cpp"}
    assert doc["forwards"] > 0
    for key in ("per-head", "per-head-past-l0", "longrope-learned"):
        assert learned.finished(learned.checkpoint_of(out, key, 6), 6)


def test_a_rerun_reads_the_finished_learning_instead_of_training_again(run):
    _, out, settings = run
    first = {c["key"]: c["spec"] for c in _advise({**settings, "overwrite": True})["candidates"]}
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("learned_*.pt")}
    again = {c["key"]: c["spec"] for c in _advise({**settings, "overwrite": True})["candidates"]}
    assert again == first and {p: p.stat().st_mtime_ns for p in out.glob("learned_*.pt")} == stamps


def test_the_learning_windows_are_past_the_race_and_the_spare_ones(tiny):
    """Rows race_windows + SPARE .. of the tuning pool: none of them is raced or searched on."""
    _, tok = tiny
    cfg = AdviseConfig(model="tiny", length=512, race_windows=4)
    tctx = tuning_context(eval_context(cfg, 256, tuning=True))
    first = 4 + SPARE
    ids, mask = learned.learning_windows("key_tokens", tok, tctx, 512, first, 256)
    every = heldout_windows(tok, 512, n=first + LEARN_WINDOWS, docs=tctx.docs)  # [n, 512]
    assert 0 < ids.shape[0] <= LEARN_WINDOWS and mask.shape == (ids.shape[0], 511)
    raced = {tuple(r.tolist()) for r in every[:first]}
    assert all(tuple(r.tolist()) not in raced for r in ids)
    tail_ids, tail = learned.learning_windows("perplexity", tok, tctx, 512, first, 256)
    assert torch.equal(tail_ids, every[first:]) and tail[:, :255].sum() == 0 and bool(tail[:, 255:].all())


JOB = learned.LearnJob("key_tokens", 512, 256, 6, 2)


def test_status_reads_only_finished_learning(tmp_path, tiny):
    model, tok = tiny
    cfg = AdviseConfig(model="tiny", length=512, race_windows=4)
    tctx = tuning_context(eval_context(cfg, 256, tuning=True))
    none = learned.learned_candidates(model, tok, tctx, tmp_path, JOB, read_only=True)
    assert none == [] and not list(tmp_path.iterdir())
    made = learned.learned_candidates(model, tok, tctx, tmp_path, JOB)
    again = learned.learned_candidates(model, tok, tctx, tmp_path, JOB, read_only=True)
    assert [c.spec for c in again] == [c.spec for c in made] and len(made) == 3


def test_an_added_spec_is_gated_only_when_nothing_changes_up_to_l0(tmp_path):
    longrope = {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 256,
                "short_factor": [1.0] * 8, "long_factor": [2.0] * 8, "attention_factor": 1.0}  # fmt: skip
    specs = (
        TemperatureSpec(rope=longrope),
        TemperatureSpec(rope={**longrope, "attention_factor": 1.2}),
        TemperatureSpec(multiplier=0.9, rope=longrope),
        TemperatureSpec(rope={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256}),
    )
    cands = learned.added_candidates(("a", "b", "c", "d"), specs)
    assert [c.gated for c in cands] == [True, False, False, False]
    assert [c.family for c in cands] == ["rope", "rope", "rope + temperature", "rope"]
    assert [c.key for c in cands] == ["added-1", "added-2", "added-3", "added-4"]
