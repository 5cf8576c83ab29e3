"""One table of every tuning run under a folder: held-out tail perplexity and passkey per spec.

    python scripts/summarize.py runs/tiny
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: str) -> None:
    rows = ["| length | rope | method | spec | tail ppl | ppl | passkey acc | key log-prob | tune s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for ev_path in sorted(Path(folder).rglob("evidence.json")):
        ev = json.loads(ev_path.read_text())
        cfg = ev["config"]
        method = f"{cfg['granularity']} {cfg['method'] if cfg['method'] == 'gradient' else cfg['objective']}"
        for name, res in ev["results"].items():
            ppl, pk = res.get("perplexity", {}), res.get("passkey", {})
            nan = float("nan")
            rows.append(f"| {cfg['length']} | {cfg['rope']} | {method} | {name} | {ppl.get('tail_ppl', nan):.3f} "
                        f"| {ppl.get('ppl', nan):.3f} | {pk.get('acc', nan):.2f} "
                        f"| {pk.get('logp', nan):.3f} | {ev['tune_seconds']:.0f} |")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/tiny")
