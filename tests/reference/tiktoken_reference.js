// The JavaScript reference for TikTokenizer (tests/reference/tiktoken_parity_test.cpp), from the npm
// package js-tiktoken (installed by scripts/setup.sh).
//   node tiktoken_reference.js vocab ENCODING > vocab.json
//     writes ENCODING's ranks in Megatron's TikTokenizer format: a JSON list of {"rank",
//     "token_bytes" (base64), "token_str"}. Megatron wants rank i = byte i for i < 256;
//     tiktoken's encodings list the 256 single bytes first in another order, so those ranks are
//     renumbered (merges always make tokens of rank >= 256, whose order is kept).
//   node tiktoken_reference.js encode ENCODING v1|v2 < docs.jsonl > ids.txt
//     encodes each {"text": ...} with ENCODING's ranks and Megatron's pattern (encode_ordinary:
//     no special tokens) and writes the ids in the renumbered ranks, one line per document.
// Megatron's patterns in JavaScript syntax: v1 drops PATTERN_TIKTOKEN's possessive quantifiers
// (`?+`, `++`), which match the same here (the classes they guard cannot start what follows).
const { Tiktoken } = require('js-tiktoken/lite');
const [mode, encoding, patternName] = process.argv.slice(2);
const ranks = require(`js-tiktoken/ranks/${encoding}`);
const PATTERNS = {
  v1: String.raw`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`,
  v2: String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|` +
      String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|` +
      String.raw` ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
};
const enc = new Tiktoken({ ...ranks, pat_str: PATTERNS[patternName] || ranks.pat_str,
                           special_tokens: {} });
const renumber = (rank) => {
  if (rank >= 256) return rank;
  const bytes = enc.textMap.get(rank);
  if (bytes.length !== 1) throw new Error(`rank ${rank} is not a single byte`);
  return bytes[0];
};
if (mode === 'vocab') {
  const n = enc.textMap.size;
  const byRank = new Array(n);
  for (const [rank, bytes] of enc.textMap) {
    if (rank >= n) throw new Error(`ranks are not 0..${n - 1}`);
    byRank[renumber(rank)] = bytes;
  }
  const entries = byRank.map((bytes, i) => JSON.stringify({
    rank: i, token_bytes: Buffer.from(bytes).toString('base64'),
    token_str: Buffer.from(bytes).toString('utf8') }));
  process.stdout.write('[' + entries.join(',\n') + ']\n');
} else {
  require('./jsonl_encode.js')((text) => enc.encode(text), (text, ids) => ids.map(renumber).join(' '));
}
