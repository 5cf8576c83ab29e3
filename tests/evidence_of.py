"""An advise :class:`~attntemp.advise.records.evidence.Evidence` around a made-up race and the real
confirmation of it: what the report reads, built as the run builds it (``run.race_rows``)."""

from attntemp.advise.plan import Retrieval
from attntemp.advise.race import RaceResult
from attntemp.advise.records.answers import EngineAdvice
from attntemp.advise.records.comparisons import Confirmation
from attntemp.advise.records.evidence import Diagnosis, Evidence, HeadShift, Question, RaceSummary, RetrievalPrompts
from attntemp.advise.run import race_rows


def evidence_of(
    race: RaceResult, confirmed: Confirmation, recs: dict[str, EngineAdvice], objective: str = "key_tokens"
) -> Evidence:
    """The evidence of a tiny-model run at 512 tokens (trained to 256) whose race is ``race``, its
    confirmation ``confirmed`` and its answers ``recs`` (the first engine's the headline)."""
    engines = tuple(recs)
    question = Question(
        "tiny", 512, 256, engines[0], engines, objective, "stdlib", None, (64,), (), 0.01, None,
        RetrievalPrompts(16, 40), Retrieval("passkey", 1, 4, "one passkey prompt per prefill"), 1,
    )  # fmt: skip
    heads = HeadShift(((0, 1),), (), (), 2, [[0.0, 0.01]], [[0.0, 0.2]])
    diagnosis = Diagnosis({}, heads, "Distant-token perplexity moves.")
    summary = RaceSummary(race.status, race.windows, race.rows, race.leader)
    return Evidence(
        question, diagnosis, race_rows(race, {}), summary, confirmed, recs[engines[0]], recs, 10, 0, {}, 1.0, 1.0
    )
