"""``attntemp advise``: diagnose, race, confirm, recommend (above report: the demo is advise)."""
