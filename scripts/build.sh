#!/usr/bin/env bash
# Configures (once) and builds megatron-cpp into build/ with the default preset: every target,
# or only the targets named (scripts/build.sh megatron fma_peak).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || cmake --preset default >build/configure.log 2>&1 ||
  { cat build/configure.log >&2; exit 1; }
cmake --build --preset default ${1:+--target "$@"}
