#!/usr/bin/env bash
# The tiny-model figures quoted in the README and the closing notes (about 15 minutes on 2 cores).
#   bash scripts/experiments_tiny.sh [OUT]        then: python scripts/summarize.py OUT
set -euo pipefail
OUT=${1:-runs/tiny}
AT=${ATTNTEMP:-attntemp}
$AT sweep --model tiny --lengths 1024,2048 --rope none,linear,yarn --multipliers 0.7:1.8:0.1 \
    --tasks perplexity,passkey --docs 4 --trials 20 --out "$OUT"
for L in 1024 2048; do
  for ROPE in none yarn; do
    $AT tune --model tiny --length $L --rope $ROPE --granularity global --objective perplexity \
        --tasks perplexity,passkey --out "$OUT/L$L-$ROPE-global"
    $AT tune --model tiny --length $L --rope $ROPE --granularity head --objective entropy \
        --tasks perplexity,passkey --out "$OUT/L$L-$ROPE-entropy"
    $AT tune --model tiny --length $L --rope $ROPE --granularity head --method gradient --steps 120 \
        --tasks perplexity,passkey --out "$OUT/L$L-$ROPE-gradient"
  done
done
$AT report "$OUT"
