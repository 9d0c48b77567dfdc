#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the whole test suite with ctest.
# Arguments pass through to ctest, e.g. ./scripts/test.sh -L unit  or  -R GPT2Parity.
# Without arguments the gpu tests also run on the CUDA emulator (tests/cuda_emu/README.md): a
# second build in build-emu/ (preset cuda-emu), label cuda-emu; MG_SKIP_CUDA_EMU=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
(cd build && ctest --output-on-failure -j2 "$@")
if [ $# -eq 0 ] && [ "${MG_SKIP_CUDA_EMU:-0}" != 1 ]; then
  mkdir -p build-emu
  [ -f build-emu/build.ninja ] || cmake --preset cuda-emu >build-emu/configure.log 2>&1 ||
    { cat build-emu/configure.log >&2; exit 1; }
  cmake --build --preset cuda-emu
  (cd build-emu && ctest --output-on-failure -j2 -L cuda-emu)
fi
