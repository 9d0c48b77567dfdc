#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the whole test suite with ctest.
# Arguments pass through to ctest, e.g. ./scripts/test.sh -L unit  or  -R GPT2Parity.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd build
ctest --output-on-failure -j2 "$@"
