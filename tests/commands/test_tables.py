"""`attntemp` with no argument prints the YaRN and temperature tables."""

import json

from attntemp.cli import main


def test_tables_command_prints_tables(capsys):
    assert main(["tables"]) == 0
    out = capsys.readouterr().out
    assert "| 4 | 1.1386 | 1.2965 |" in out  # s = 4: t and m = t^2
    assert "| 2 | 0.5 | 12.182 |" in out  # T = 2: gap of 5 -> ratio e^2.5


def test_tables_json(capsys):
    assert main(["tables", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = next(r for r in data["yarn"] if r["s"] == 128)
    assert round(row["attention_factor"], 4) == 1.4852 and round(row["sqrt_variant"], 4) == 1.2187
