// The JavaScript GPT-2 reference for the tokenizer parity test and benchmark: reads JSON lines
// {"text": ...} and writes one line of space-separated token ids per document, using the npm
// package gpt-3-encoder (installed by scripts/setup.sh). Usage: node gpt2_encode.js MODULE_DIR
// < docs.jsonl > ids.txt. Prints the encoding time to stderr.
const { encode } = require(process.argv[2]);
require('./jsonl_encode.js')(encode, (text, ids) => ids.join(' '));
