// The JavaScript GPT-2 reference for the tokenizer parity test and benchmark: reads JSON lines
// {"text": ...} and writes one line of space-separated token ids per document, using the npm
// package gpt-3-encoder (installed by scripts/setup.sh). Usage: node gpt2_encode.js MODULE_DIR
// < docs.jsonl > ids.txt. Prints the encoding time to stderr.
const readline = require('readline');
const { encode } = require(process.argv[2]);
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
let seconds = 0, bytes = 0;
rl.on('line', (line) => {
  if (!line) return;
  const text = JSON.parse(line).text;
  const t0 = process.hrtime.bigint();
  const ids = encode(text);
  seconds += Number(process.hrtime.bigint() - t0) / 1e9;
  bytes += Buffer.byteLength(text, 'utf8');
  out.push(ids.join(' '));
});
rl.on('close', () => {
  process.stdout.write(out.join('\n') + '\n');
  process.stderr.write(`js_encode_seconds=${seconds.toFixed(3)} js_bytes=${bytes}\n`);
});
