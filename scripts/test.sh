#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the whole test suite with ctest (docs/testing.md maps it:
# labels, stages, times and the CI budget). Two stages, each one build:
#  - main: every test, build-emu/ (preset cuda-emu): the Release build with the CUDA backend on
#    the emulator (tests/cuda_emu/README.md), so the gpu tests run too (label cuda-emu), and with
#    nvcc present every .cu source is also compiled for the GPU. Arguments pass through to this
#    stage's ctest and skip the other, e.g. ./scripts/test.sh -L unit  or  -R GPT2Parity.
#  - sanitize: one clang build (build-sanitize/, preset sanitize) under AddressSanitizer +
#    UndefinedBehaviorSanitizer, every report fatal, with libFuzzer's coverage: the unit and
#    reference labels, then the libFuzzer targets (tests/fuzz), each fuzzed for $MG_FUZZ_SECONDS
#    (under CI=true 20 s from seed $MG_FUZZ_SEED = 1; else 60 s, a random seed) and every
#    committed input replayed. MG_SKIP_SANITIZERS=1 skips the unit and reference tests there,
#    MG_SKIP_FUZZ=1 the fuzz label; both skip the stage.
# First the sources' format is checked (scripts/check-format.sh). At the end: each stage's time
# and the 15 slowest tests of the run.
set -euo pipefail
cd "$(dirname "$0")/.."
times=()   # "stage seconds"
logs=()    # each ctest's output, for the slowest tests

# ctest in build dir $1 with its output kept there as ctest-$2.log; the rest are ctest's args.
# A failing test fails the pipeline, and set -e ends the script with it.
run_ctest() {
  local dir=$1 name=$2
  shift 2
  logs+=("$dir/ctest-$name.log")
  (cd "$dir" && ctest --output-on-failure "$@") 2>&1 | tee "$dir/ctest-$name.log"
}

summary() {
  echo "test.sh: stage times:"
  for t in "${times[@]}"; do printf '  %-10s %6s s\n' $t; done
  echo "test.sh: the 15 slowest tests:"
  # ctest's result lines: "  3/654 Test  #12: Name ......   Passed   12.34 sec"
  cat "${logs[@]}" 2>/dev/null |
    sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*  \([0-9.]*\) sec$/\2 \1/p' |
    sort -rn | head -15 | awk '{ printf "  %8.1f s  %s\n", $1, $2 }'
}

# Configures build dir $1 with preset $2 once; the log stays in the build dir.
configure() {
  mkdir -p "$1"
  [ -f "$1/build.ninja" ] || cmake --preset "$2" >"$1/configure.log" 2>&1 ||
    { cat "$1/configure.log" >&2; exit 1; }
}

start=$SECONDS
./scripts/setup.sh
./scripts/check-format.sh  # seconds: the sources follow .clang-format (scripts/format.sh fixes)
configure build-emu cuda-emu
cmake --build --preset cuda-emu
times+=("build $((SECONDS - start))")
if [ $# -gt 0 ]; then
  run_ctest build-emu main -j2 "$@"
  exit 0
fi
start=$SECONDS
run_ctest build-emu main -j2
times+=("main $((SECONDS - start))")
echo "test.sh: main stage passed"

labels=()
[ "${MG_SKIP_SANITIZERS:-0}" = 1 ] || labels+=("unit|reference")
[ "${MG_SKIP_FUZZ:-0}" = 1 ] || labels+=(fuzz)
if [ ${#labels[@]} -gt 0 ]; then
  start=$SECONDS
  if [ "${CI:-}" = true ]; then
    export MG_FUZZ_SECONDS=${MG_FUZZ_SECONDS:-20} MG_FUZZ_SEED=${MG_FUZZ_SEED:-1}
  fi
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
  configure build-sanitize sanitize
  cmake --build --preset sanitize
  pattern=$(IFS='|'; echo "${labels[*]}")
  run_ctest build-sanitize sanitize -j2 -L "$pattern" -E '^LlamaWalkthrough$'
  times+=("sanitize $((SECONDS - start))")
  echo "test.sh: sanitize stage passed"
fi
summary
