#!/usr/bin/env bash
# Lists the C++ sources (.h, .cpp) that do not follow .clang-format; exits 1 if any. The CUDA
# sources (.cu, .cuh) keep their hand layout: the emulator's translator (tests/cuda_emu/
# translate.pl) reads each kernel launch from one line.
# Needs clang-format 14 (CLANG_FORMAT=... to use another binary).
set -uo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
command -v "$CLANG_FORMAT" >/dev/null || { echo "check-format: $CLANG_FORMAT not found" >&2; exit 2; }
"$CLANG_FORMAT" --style=file --dump-config --assume-filename=src/x.cpp >/dev/null </dev/null ||
  { echo "check-format: clang-format cannot read .clang-format" >&2; exit 2; }
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
# Two clang-format processes, 64 files each; each batch writes the files it flags
# ("FILE:LINE:COL: error: code should be clang-formatted") to its own file under $tmp.
find src tests bench -type f \( -name '*.h' -o -name '*.cpp' \) \
    -not -path 'tests/fuzz/corpus/*' -not -path '*/third_party/*' -print0 |
  xargs -0 -r -P2 -n 64 sh -c '
    out=$(mktemp "$0/batch.XXXXXX"); cf=$1; shift
    "$cf" --style=file --dry-run -Werror "$@" 2>&1 >/dev/null |
      sed -n "s/^\(\(src\|tests\|bench\)\/[^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p" >"$out"
  ' "$tmp" "$CLANG_FORMAT"
bad=$(cat "$tmp"/batch.* 2>/dev/null | sort -u)
if [ -n "$bad" ]; then
  echo "$(echo "$bad" | wc -l) file(s) do not follow .clang-format:"
  echo "$bad" | sed 's/^/  /'
  echo "Run scripts/format.sh to reformat them."
  exit 1
fi
echo "All files follow .clang-format."
