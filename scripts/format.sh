#!/usr/bin/env bash
# Reformats the C++/CUDA sources in place with .clang-format. (Any folder: it works on the repository it is in.)
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
find src tests bench -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) \
  -not -path 'tests/fuzz/corpus/*' -not -path '*/third_party/*' -print0 |
  xargs -0 -r -P2 -n 16 "$CLANG_FORMAT" --style=file -i
