#!/usr/bin/env bash
# Runs one libFuzzer target for ctest (tests/fuzz/CMakeLists.txt, label fuzz):
#   run_fuzzer.sh fuzz   BINARY CORPUS ARTIFACTS  fuzzes for $MG_FUZZ_SECONDS (default 60)
#     starting from CORPUS; new inputs go to a temporary directory (CORPUS is only read), a
#     crashing input to ARTIFACTS/ (commit it as CORPUS/regress-<what> once fixed). With
#     $MG_FUZZ_SEED set (CI sets 1) libFuzzer's random choices are that seed's, so a CI run
#     explores the same inputs whatever changed; unset, each run draws its own seed.
#   run_fuzzer.sh replay BINARY CORPUS ARTIFACTS  runs every committed input once; fails on any
#     crash, sanitizer report, leak of an exception other than UsageError, hang or OOM.
set -euo pipefail
mode=$1 binary=$2 corpus=$3 artifacts=$4
limits=(-timeout=10 -rss_limit_mb=2048)
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# The targets' scratch files (in memory where possible) and new inputs, removed on exit even
# after a crash.
work=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/tmp" "$work/new"
export TMPDIR=$work/tmp
case $mode in
  fuzz)
    mkdir -p "$artifacts"
    seconds=${MG_FUZZ_SECONDS:-60}
    [ -z "${MG_FUZZ_SEED:-}" ] || limits+=(-seed="$MG_FUZZ_SEED")
    # libFuzzer writes new inputs to the first directory only.
    timeout $((seconds + 120)) "$binary" "${limits[@]}" -max_total_time="$seconds" \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$work/new" "$corpus"
    ;;
  replay)
    mapfile -t inputs < <(find "$corpus" -type f | sort)
    [ ${#inputs[@]} -gt 0 ] || { echo "no inputs in $corpus" >&2; exit 1; }
    timeout 600 "$binary" "${limits[@]}" "${inputs[@]}"
    ;;
  *) echo "usage: $0 fuzz|replay BINARY CORPUS ARTIFACTS" >&2; exit 2 ;;
esac
