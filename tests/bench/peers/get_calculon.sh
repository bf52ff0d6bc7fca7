#!/usr/bin/env bash
# tests/bench/peers/get_calculon.sh - puts Calculon (calculon-ai/calculon, Apache 2.0) at the
# commit the peer benchmarks were measured with into build-peers/calculon (ignored by git),
# and finds a Python that imports it: Debian's /usr/bin/python3 with python3-numpy,
# python3-psutil and python3-pandas (scripts/setup installs them; a python3 earlier on PATH,
# e.g. pyenv's, may not see Debian's packages). Prints the interpreter's path.
#
#   tests/bench/peers/get_calculon.sh
#     CALCULON_GIT_DIR  a local git directory holding the commit (else: git clone from GitHub)
#     CALCULON_DIR      where to put it (default build-peers/calculon)
set -euo pipefail
cd "$(dirname "$0")/../../.."
COMMIT=caa4b11f8fe1fee3ba57adaacb7590d7deabd053 # 2024-02-22, "Add inputs/output to stats"
DIR=${CALCULON_DIR:-build-peers/calculon}
if [ ! -f "$DIR/.commit" ] || [ "$(cat "$DIR/.commit")" != "$COMMIT" ]; then
  rm -rf "$DIR" && mkdir -p "$DIR"
  if [ -n "${CALCULON_GIT_DIR:-}" ]; then
    git --git-dir="$CALCULON_GIT_DIR" archive "$COMMIT" | tar -x -C "$DIR"
  else
    tmp=$(mktemp -d)
    git clone -q https://github.com/calculon-ai/calculon "$tmp/c" >&2
    git -C "$tmp/c" archive "$COMMIT" | tar -x -C "$DIR"
    rm -rf "$tmp"
  fi
  echo "$COMMIT" >"$DIR/.commit"
fi
for py in /usr/bin/python3 python3; do
  if PYTHONPATH=$DIR "$py" -c 'import calculon.llm, numpy, psutil' 2>/dev/null; then
    command -v "$py"
    exit 0
  fi
done
echo "get_calculon.sh: no python3 imports Calculon (install python3-numpy python3-psutil" \
  "python3-pandas: scripts/setup)" >&2
exit 1
