// The loop the JavaScript tokenizer references share: reads JSON lines {"text": ...} from stdin,
// calls encode(text) per document (timed), writes format(text, ids) per document to stdout and
// "js_encode_seconds=S js_bytes=B" to stderr (bench/tokenizer_throughput.sh reads it).
const readline = require('readline');

module.exports = function encodeLines(encode, format) {
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
    out.push(format(text, ids));
  });
  rl.on('close', () => {
    process.stdout.write(out.join('\n') + '\n');
    process.stderr.write(`js_encode_seconds=${seconds.toFixed(3)} js_bytes=${bytes}\n`);
  });
};
