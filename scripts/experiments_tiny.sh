#!/usr/bin/env bash
# The tiny-model figures quoted in the README (about 20 minutes on 2 cores):
#   bash scripts/experiments_tiny.sh [OUT]
# 1. the multiplier sweep (16 documents per point, intervals and paired comparisons in its table);
# 2. every tuning method tuned at 4x, checked on other documents and at 1x and 8x (scripts/trust_table.py).
case "${1:-}" in -h | --help) sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
OUT=${1:-runs/tiny}
AT=${ATTNTEMP:-attntemp}
PY=${PYTHON:-python}
$AT sweep --model tiny --lengths 1024,2048 --rope none,linear,yarn --multipliers 0.7:1.8:0.1 \
    --tasks perplexity --docs 16 --quiet --out "$OUT/sweep"
$AT report "$OUT/sweep"
$PY scripts/trust_table.py --out "$OUT/trust" --length 1024 --checks 256,2048
