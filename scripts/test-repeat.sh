#!/usr/bin/env bash
# Runs jest on the given test files again and again, one run after the other, and stops at
# the first failing run (its output is printed then, and kept).
#
#   npm run test:repeat -- <file> [<file>...] <times>
#
# Each run prints its number, whether it passed and how long it took; the end, the total.
# A flaky test is chased this way: run it until it fails, then read the kept output.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -lt 2 ] || ! [[ "${*: -1}" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: npm run test:repeat -- <test file> [<test file>...] <times>" >&2
  exit 2
fi
times="${*: -1}"
files=("${@:1:$#-1}")
for file in "${files[@]}"; do
  if [ ! -e "$file" ]; then
    echo "test:repeat: no such file: $file" >&2
    exit 2
  fi
done

logs="$(mktemp -d "${TMPDIR:-/tmp}/test-repeat.XXXXXX")"
seconds() { awk -v ms="$1" 'BEGIN { printf "%.1f", ms / 1000 }'; }
now_ms() { date +%s%3N; }

echo "test:repeat: ${files[*]}, ${times} runs (node $(node --version)); logs in ${logs}"
started="$(now_ms)"
for ((run = 1; run <= times; run++)); do
  log="${logs}/run-${run}.log"
  run_started="$(now_ms)"
  npx jest --runInBand --ci "${files[@]}" >"$log" 2>&1
  status=$?
  run_ms=$(($(now_ms) - run_started))
  total_ms=$(($(now_ms) - started))
  if [ "$status" -ne 0 ]; then
    cat "$log"
    echo "test:repeat: run ${run}/${times} FAILED (exit ${status}) after $(seconds "$run_ms") s; $(seconds "$total_ms") s in all; output kept in ${log}"
    exit "$status"
  fi
  summary="$(grep -E '^Tests:' "$log" | tail -n 1)"
  echo "test:repeat: run ${run}/${times} passed in $(seconds "$run_ms") s (${summary:-no summary}); $(seconds "$total_ms") s in all"
  rm -f "$log"
done
echo "test:repeat: ${times} of ${times} runs passed in $(seconds "$(($(now_ms) - started))") s"
rmdir "$logs" 2>/dev/null || true
