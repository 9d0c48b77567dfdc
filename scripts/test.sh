#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the whole test suite with ctest.
# Arguments pass through to ctest, e.g. ./scripts/test.sh -L unit  or  -R GPT2Parity.
# Without arguments three more stages follow, each in a build of its own:
#  - the gpu tests on the CUDA emulator (tests/cuda_emu/README.md): build-emu/ (preset cuda-emu),
#    label cuda-emu; MG_SKIP_CUDA_EMU=1 skips it;
#  - the unit and reference labels under AddressSanitizer + UndefinedBehaviorSanitizer, every
#    report fatal: build-debug/ (presets debug); MG_SKIP_SANITIZERS=1 skips it;
#  - the libFuzzer targets (tests/fuzz), $MG_FUZZ_SECONDS (default 60) each, and a replay of
#    every committed input: build-fuzz/ (preset fuzz, clang), label fuzz; MG_SKIP_FUZZ=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
./scripts/setup.sh
./scripts/build.sh
(cd build && ctest --output-on-failure -j2 "$@")
[ $# -eq 0 ] || exit 0
echo "test.sh: main stage passed in $((SECONDS - start)) s"

# Configures build dir $1 with preset $2 once; the log stays in the build dir.
configure() {
  mkdir -p "$1"
  [ -f "$1/build.ninja" ] || cmake --preset "$2" >"$1/configure.log" 2>&1 ||
    { cat "$1/configure.log" >&2; exit 1; }
}

if [ "${MG_SKIP_CUDA_EMU:-0}" != 1 ]; then
  start=$SECONDS
  configure build-emu cuda-emu
  cmake --build --preset cuda-emu
  (cd build-emu && ctest --output-on-failure -j2 -L cuda-emu)
  echo "test.sh: cuda-emu stage passed in $((SECONDS - start)) s"
fi
if [ "${MG_SKIP_SANITIZERS:-0}" != 1 ]; then
  start=$SECONDS
  configure build-debug debug
  cmake --build --preset debug --target megatron unit_tests reference_tests
  ctest --preset debug
  echo "test.sh: sanitizer stage passed in $((SECONDS - start)) s"
fi
if [ "${MG_SKIP_FUZZ:-0}" != 1 ]; then
  start=$SECONDS
  configure build-fuzz fuzz
  cmake --build --preset fuzz
  ctest --preset fuzz
  echo "test.sh: fuzz stage passed in $((SECONDS - start)) s"
fi
