#!/usr/bin/env bash
# Chat-template rendering with serve's bound (64 MiB of text): bench/chat_template_bounds.cpp's
# cases (real templates over a 4000-turn conversation with 20 tools; hostile templates the work
# budget stops), each in its own process with its peak memory; then the real ones rendered by
# Jinja2 itself (tests/text/jinja_reference.py, Debian's python3-jinja2) in the same run,
# with the text lengths to compare. BIN=path skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
  ./scripts/build.sh chat_template_bounds >/dev/null
  BIN=./build/chat_template_bounds
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BIN"
echo
echo "Jinja2 (python3-jinja2 $(/usr/bin/python3 -c 'import jinja2; print(jinja2.__version__)')) on the real cases:"
for i in 0 1; do
  "$BIN" --dump $i "$WORK/case.json"
  start=$(date +%s.%N)
  /usr/bin/python3 tests/text/jinja_reference.py "$WORK/case.json" > "$WORK/out.json"
  end=$(date +%s.%N)
  /usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print('$i', '%.3f s' % ($end - $start), 'rendered %d bytes' % len(r['text'].encode()) if 'text' in r else r['error'])" "$WORK/out.json"
done
