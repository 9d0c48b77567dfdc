#!/usr/bin/env bash
# Reformats the C++ sources (.h, .cpp) in place with .clang-format, from any folder; the CUDA
# sources keep their hand layout (scripts/check-format.sh says why).
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
find src tests bench -type f \( -name '*.h' -o -name '*.cpp' \) \
  -not -path 'tests/fuzz/corpus/*' -not -path '*/third_party/*' -print0 |
  xargs -0 -r -P2 -n 16 "$CLANG_FORMAT" --style=file -i
