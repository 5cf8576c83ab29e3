"""``attntemp advise`` end to end on the tiny model at 2x its trained length: the --json document
holds the diagnosis, every candidate with why it left, and a recommendation with its engine
settings; a run killed with SIGKILL resumes from its scores and ends with the same result."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attntemp.advise.carry import AS_MEANT
from attntemp.cli import main

SMALL = ["advise", "--length", "512", "--race-windows", "4", "--block", "2", "--min-windows", "2", "--docs", "3",
         "--no-tune", "--check-lengths", "0", "--heldout-text", "none", "--threads", "1", "--quiet"]  # fmt: skip


def _advise(out: Path, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main([*SMALL, "--out", str(out), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """One small run, shared by the checks below (each test reads it)."""
    out = tmp_path_factory.mktemp("advise")
    proc = subprocess.run(
        [sys.executable, "-m", "attntemp", *SMALL, "--out", str(out), "--json"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


def test_json_has_the_diagnosis_every_candidate_and_a_recommendation(first):
    out, doc = first
    assert set(doc) >= {"diagnosis", "candidates", "recommendation", "forwards"}
    assert doc["diagnosis"]["heads"]["heads"] == 32 and "Distant-token perplexity" in doc["diagnosis"]["summary"]
    names = [c["name"] for c in doc["candidates"]]
    assert names[0] == "no change" and any(n.startswith("YaRN s = 2") for n in names)
    for c in doc["candidates"]:
        assert c["kept"] == (c["reason"] is None) and set(c["engines"]) == {"transformers", "vllm", "llama.cpp"}
    left = [c for c in doc["candidates"] if not c["kept"]]
    assert left and all(any(w in c["reason"] for w in ("worse than", "costs", "fewer passkeys")) for c in left)
    rec = doc["recommendation"]
    chosen = next(c for c in doc["candidates"] if c["name"] == rec["name"])
    assert rec["engines"] == chosen["engines"] and rec["engines"]["transformers"]["how"] != "not carried"
    assert rec["status"] in ("recommended", "nothing beats the baseline")
    assert doc["forwards"] > 0 and doc["race"]["status"] in ("decided", "tied", "undecided")
    for name in ("report.md", "report.html", "tradeoff.png", "diagnosis.png", "evidence.json", "scores.db"):
        assert (out / name).is_file(), name


def test_json_has_each_candidates_retrieval_by_generation_with_its_paired_interval(first):
    """Every candidate the race scored carries its passkeys found by greedy generation, paired
    against no change (and YaRN's default) on the same prompts; the headline reads the confirmation."""
    _, doc = first
    by_key = {c["key"]: c for c in doc["candidates"]}
    base, default = by_key["baseline"]["retrieval"], by_key["yarn+m"]["retrieval"]
    assert base["prompts"] in (8, 16) and "vs_no_change" not in base  # blocks of 2 windows, 4 prompts a window
    assert 0 <= default["found"] <= default["prompts"] and default["vs_no_change"]["method"] == "Newcombe paired score"
    for c in doc["candidates"]:
        r = c["retrieval"]
        assert r["prompts"] % 8 == 0 and r["share"]["low"] <= r["found"] / r["prompts"] <= r["share"]["high"]
        if c["key"] not in ("baseline", "yarn+m"):
            vs = r["vs_default"]
            assert vs["low"] <= vs["value"] <= vs["high"]
            assert vs["verdict"] in ("better", "worse", "not distinguishable")
    axes = doc["recommendation"]["headline"]["axes"]
    assert [a["task"] for a in axes[:2]] == ["key_tokens", "passkey"]
    assert "passkey" in json.dumps(doc["recommendation"]["headline"]) and axes[1]["label"].startswith("passkeys found")


def test_one_recommendation_per_engine_each_one_that_engine_computes_as_meant(first):
    """Without --engine, advise recommends for every engine, each only a candidate that engine
    computes as the spec means (no nearest, nothing it reads otherwise); an engine that computes no
    survivor of the race gets its own race among the candidates it does (issue 51)."""
    _, doc = first
    by_name = {c["name"]: c for c in doc["candidates"]}
    assert list(doc["by_engine"]) == ["transformers", "llama.cpp", "vllm"] == doc["question"]["engines"]
    assert doc["by_engine"]["transformers"] == doc["recommendation"]
    for engine, rec in doc["by_engine"].items():
        if rec["name"] is None:
            continue
        assert by_name[rec["name"]]["engines"][engine]["how"] in AS_MEANT, (engine, rec["name"])
        for name in (rec.get("race") or {}).get("survivors", []):
            assert by_name[name]["engines"][engine]["how"] in AS_MEANT
    for c in doc["candidates"]:
        for route in c["engines"].values():
            if route["how"] == "nearest":  # named, with why, and linked to the raced candidate reading alike
                assert (
                    route["why"]
                    and route["spec"]
                    and (route["as"] is None or route["as"] in {o["key"] for o in doc["candidates"]})
                )


def test_a_rerun_reads_every_score_and_a_second_run_is_refused_without_overwrite(first, capsys):
    out, doc = first
    rows = sqlite3.connect(out / "scores.db").execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    made = json.loads((out / "evidence.json").read_text())["scored_seconds"]
    code = main([*SMALL, "--out", str(out)])
    assert code == 2 and "already holds results" in capsys.readouterr().err
    again = _advise(out, capsys, "--overwrite")
    assert sqlite3.connect(out / "scores.db").execute("SELECT COUNT(*) FROM scores").fetchone()[0] == rows
    assert again["recommendation"]["name"] == doc["recommendation"]["name"]
    assert [c["reason"] for c in again["candidates"]] == [c["reason"] for c in doc["candidates"]]
    read = json.loads((out / "evidence.json").read_text())
    assert made > 0 and read["scored_seconds"] == pytest.approx(made)  # what the scores took, read back
    assert read["seconds"] < made and f"the scores took {made:.0f} s to make" in (out / "report.md").read_text()


def test_sigkill_then_rerun_finishes_with_the_same_result(first, tmp_path):
    _, doc = first
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "attntemp", *SMALL, "--out", str(out), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db, t0 = out / "scores.db", time.time()
    while time.time() - t0 < 300:  # kill it once some, not all, scores are in
        try:
            if sqlite3.connect(db).execute("SELECT COUNT(*) FROM scores").fetchone()[0] >= 6:
                break
        except sqlite3.Error:
            pass
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "evidence.json").exists()
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["recommendation"]["name"] == doc["recommendation"]["name"]
    assert [(c["kept"], c["reason"]) for c in again["candidates"]] == [
        (c["kept"], c["reason"]) for c in doc["candidates"]
    ]
    assert again["forwards"] == doc["forwards"]


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def test_status_replays_a_finished_run_from_its_store_and_writes_nothing(first, capsys):
    out, doc = first
    before = _files(out)
    status = _advise(out, capsys, "--status")
    assert _files(out) == before
    assert status["race"]["status"] == doc["race"]["status"] and status["race"]["leader"] == doc["race"]["leader"]
    assert [(c["name"], c["reason"]) for c in status["candidates"]] == [
        (c["name"], c["reason"]) for c in doc["candidates"]
    ]
    assert all(c["value"] and c["windows"] >= 2 for c in status["candidates"])
    base, *rest = status["candidates"]
    assert base["vs_no_change"] is None and all(c["vs_no_change"]["verdict"] for c in rest)
    with_m = [c["name"] for c in rest if c["vs_yarn_m1"] is not None]  # what a temperature adds on YaRN
    assert with_m and all(n.startswith("YaRN s = 2") and n != "YaRN s = 2, m = 1" for n in with_m)
    assert status["confirmation"] == json.loads((out / "evidence.json").read_text())["confirmation"]


def test_status_of_a_store_cut_short_is_in_progress_with_what_it_holds(first, tmp_path, capsys):
    out, _ = first
    part = tmp_path / "part"
    part.mkdir()
    db = sqlite3.connect(part / "scores.db")
    sqlite3.connect(out / "scores.db").backup(db)
    db.execute("DELETE FROM scores WHERE created > (SELECT created FROM scores ORDER BY created LIMIT 1 OFFSET 9)")
    db.commit()
    status = _advise(part, capsys, "--status")
    assert status["race"]["status"] == "in progress" and status["confirmation"] is None
    assert status["stored_scores"] == 10 and sorted(p.name for p in part.iterdir()) == ["scores.db"]
    capsys.readouterr()
    assert main([*SMALL, "--out", str(part), "--status"]) == 0
    assert "**in progress**" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no Chromium binary found (apt-get install chromium)")
def test_the_report_fits_a_1280px_window_headline_first(first, tmp_path):
    """advise's report in headless Chromium at 1280 px: nothing sticks out past the window (wide
    tables scroll inside their box), and the page opens on what to run."""
    from report.browser import overflow

    out, doc = first
    found = overflow(out / "report.html", 1280, screenshot=tmp_path / "report.png")
    assert not found["overflows"], found["offenders"][:5]
    assert (tmp_path / "report.png").stat().st_size > 10_000
    text = (out / "report.md").read_text()
    first_section = text.split("\n## ", 1)[0]
    assert doc["recommendation"]["name"] in first_section and "passkeys found at 512" in first_section
    assert "key_tokens key_ppl" not in text  # plain labels, not internal names


def test_the_json_says_which_retrieval_it_ran_and_no_recommended_engine_is_refuted_by_its_own_evidence(first):
    """The tiny model finds no key of several hidden in one haystack at its trained length (its
    probe): the retrieval axis falls back to one passkey prompt per prefill and says so. Every
    engine's route serves the length asked; an engine entry "recommended" is never below YaRN's
    default on retrieval nor over the cost limit for certain (issue 60's "Done when")."""
    _, doc = first
    q = doc["question"]
    assert q["retrieval"]["task"] == "passkey" and "cannot do several keys" in q["retrieval"]["why"]
    for engine, rec in doc["by_engine"].items():
        if rec["status"] != "recommended":
            assert rec["status"] != "trade-off" or rec["trade_off"]["sentence"].startswith(f"Nothing {engine}")
            continue
        h = rec["headline"]
        found = next(a for a in h["axes"] if a["task"] == "passkey")
        assert (found["vs_default"] or {}).get("verdict") != "worse", engine
        assert h["cost"] is None or h["cost"]["low"] <= 1 + q["max_short_cost"], engine
        route = rec["engines"][engine]
        if engine != "transformers" and route["how"] == "settings":
            assert str(q["length"]) in route["settings"], route["settings"]
