"""advise --shared-prefill on the tiny model at 512: the race reads its objective (key-token
perplexity) off the retrieval haystacks' own rows (task ``multikey_keys``), so it scores one row per
haystack and candidate where it scored a key_tokens window besides; the report, the plan line and
``--status`` say so and read the same rows; a probe that keeps passkey prompts refuses the flag."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest

from attntemp.advise.config import SHARED_TASK, SHARED_WORDS, AdviseConfig
from attntemp.advise.plan import preflight_advise
from attntemp.advise.records.evidence import Evidence
from attntemp.advise.run import run_advise
from attntemp.advise.status import planned_rows

SMALL = {
    "length": 512, "race_windows": 4, "block": 2, "min_windows": 2, "n_docs": 3, "tune_m": False,
    "check_lengths": (), "heldout_text": "none", "threads": 1, "progress": False, "retrieval_per_window": 2,
    "retrieval_keys": 2, "trials": 4, "engine": "transformers",
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same small run without and with the flag, each in its own folder."""
    w = tmp_path_factory.mktemp("shared")
    plain = run_advise(AdviseConfig(out=str(w / "plain"), **SMALL))
    shared = run_advise(AdviseConfig(out=str(w / "shared"), shared_prefill=True, **SMALL))
    return w, plain, shared


def race_tasks(folder) -> dict[str, int]:
    """Stored scores per task at 512 tokens."""
    con = sqlite3.connect(folder / "scores.db")
    try:
        return dict(con.execute("SELECT task, COUNT(*) FROM scores WHERE length = 512 GROUP BY task").fetchall())
    finally:
        con.close()


def test_the_shared_race_scores_fewer_rows_and_both_axes_off_them(runs):
    w, plain, shared = runs
    assert shared.evidence.race.rows < plain.evidence.race.rows
    assert shared.evidence.forwards < plain.evidence.forwards
    got, before = race_tasks(w / "shared"), race_tasks(w / "plain")
    assert got[SHARED_TASK] > 0 and SHARED_TASK not in before
    for task in ("key_tokens", "multikey"):  # left: the diagnosis's and the confirmation's, one score a spec
        assert got[task] < before[task]
    for c in shared.evidence.candidates:  # every candidate's keys found come from the shared rows
        assert c.retrieval is not None and c.retrieval.prompts == (c.left_after or 4) * 2 * 2
    objective = [c.comparisons.objective_vs_leader for c in shared.evidence.candidates]
    assert any(o is not None and o.paired is not None for o in objective)  # the objective was compared


def test_the_report_says_which_windows_the_objective_was_scored_on(runs):
    _, plain, shared = runs
    assert SHARED_WORDS in shared.markdown() and SHARED_WORDS not in plain.markdown()
    doc = json.loads((shared.folder / "evidence.json").read_text())
    assert doc["question"]["shared_prefill"] is True and "shared_prefill" not in plain.evidence.to_dict()["question"]
    assert Evidence.from_dict(doc).to_dict() == doc


def test_status_replays_the_shared_race_from_its_rows(runs):
    w, _, shared = runs
    status = run_advise(AdviseConfig(out=str(w / "shared"), shared_prefill=True, status=True, **SMALL))
    rows = {r["name"]: r for r in status.to_dict()["candidates"]}
    assert status.to_dict()["race"]["rows"] == shared.evidence.race.rows
    assert all(r["value"] for r in rows.values())  # each candidate's objective read off the shared rows


def test_the_plan_counts_the_haystacks_alone(tmp_path):
    plain = preflight_advise(AdviseConfig(out=str(tmp_path / "a"), **SMALL))
    shared = preflight_advise(AdviseConfig(out=str(tmp_path / "b"), shared_prefill=True, **SMALL))
    assert planned_rows(plain, 10)[0] == 10 * 4 * (1 + 2) and planned_rows(shared, 10)[0] == 10 * 4 * 2
    assert planned_rows(plain, 10)[1] == planned_rows(shared, 10)[1]  # the confirmation as without it


def test_a_probe_that_keeps_passkey_prompts_refuses_the_flag(tmp_path):
    """The tiny model finds none of several keys at its trained length: its probe keeps passkey
    prompts, which have no text of their own to score, so the flag is refused naming itself."""
    cfg = AdviseConfig(out=str(tmp_path / "probe"), shared_prefill=True, **{**SMALL, "retrieval_keys": None})
    with pytest.raises(ValueError, match=r"shared_prefill=True is not allowed at length=512: .* the probe keeps"):
        run_advise(cfg)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"objective": "perplexity"}, "shared_prefill=True is not allowed with objective='perplexity'"),
        ({"retrieval_keys": 1}, "shared_prefill=True is not allowed with retrieval_keys=1"),
        ({"retrieval_per_window": 0}, "shared_prefill=True is not allowed with retrieval_per_window=0"),
        ({"key_evaluator": "tiny"}, "shared_prefill=True is not allowed with key_evaluator='tiny'"),
    ],
)
def test_the_flag_is_refused_where_nothing_can_be_shared(change, match):
    with pytest.raises(ValueError, match=match):
        replace(AdviseConfig(**SMALL), shared_prefill=True, **change)
