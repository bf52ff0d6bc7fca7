#!/usr/bin/env bash
# tests/bench/peers/run.sh - the peer cross-check of issue 23 (docs/search.md, "Peer
# cross-check"); run by hand, not in CI: about 5-10 minutes of one core per case.
#
#   tests/bench/peers/run.sh [OUTDIR [CASE-SUBSTRING]]     (default /tmp/peers, every case)
#     PEERS_BUDGET_S      each search's budget in seconds (default 60: plansim --budget 60s,
#                         Calculon 60 s of CPU)
#     PEERS_ALPA_LIMIT_S  wall limit of plansim's alpa search (SIGTERM: best plan so far)
#     CALCULON_GIT_DIR    see get_calculon.sh
# A finished search is reused when OUTDIR holds it: delete OUTDIR/CASE to search again.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=$(tests/bench/peers/get_calculon.sh)
export CALCULON_DIR=${CALCULON_DIR:-$PWD/build-peers/calculon}
exec nice -n 10 "$PY" tests/bench/peers/peers.py "$@"
