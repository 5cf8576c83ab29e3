"""advise's records: what the race and the confirmation found, as frozen dataclasses.

Every comparison the run makes and every cell of the confirmation (:mod:`.comparisons`), the
headline, each engine's answer and its routes (:mod:`.answers`), the race's rows, the question and
the whole evidence (:mod:`.evidence`) are frozen dataclasses; the report
(:mod:`attntemp.advise.advice_page`), ``--status`` (:mod:`attntemp.advise.status`) and ``--json``
read these objects, never a dict. JSON is made and read at the edge only: each class's
``to_dict()`` writes today's keys of ``evidence.json`` (docs/advise.md, "The JSON keys") and
``from_dict()`` reads them back, so ``X.from_dict(d).to_dict() == d``.

Directions: a comparison's ``value`` is the first spec against the second on the same windows or
prompts, a ratio for perplexities (lower is better: below 1 the first spec is better) and a
difference for keys found and log-probabilities (higher is better: above 0 the first is better);
its ``verdict`` says which way it falls, in the metric's own direction.

The package imports none of its modules: :mod:`attntemp.advise.race` reads :mod:`.comparisons`
while :mod:`.evidence` reads the plan, which reads the race.
"""
