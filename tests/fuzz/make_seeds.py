#!/usr/bin/python3
"""Writes the synthetic seed inputs of tests/fuzz/corpus/ (small valid inputs per target; the
formats are in each target's opening comment). Seeds made by the binaries themselves (a real
`megatron preprocess` dataset, a real checkpoint's metadata.json) are described in
docs/reliability.md. Usage: tests/fuzz/make_seeds.py [CORPUS_DIR]"""
import json
import os
import struct
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


# index_reader: u32 idx length, P.idx (Megatron's MMIDIDX version 1), P.bin.
def idx_pair(dtype_code, np_dtype, docs):
    lengths, pointers, doc_idx, tokens, at = [], [], [0], [], 0
    for doc in docs:
        for seq in doc:
            lengths.append(len(seq))
            pointers.append(at)
            at += len(seq) * np.dtype(np_dtype).itemsize
            tokens += seq
        doc_idx.append(len(lengths))
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, dtype_code, len(lengths), len(doc_idx))
    idx += np.array(lengths, "<i4").tobytes() + np.array(pointers, "<i8").tobytes()
    idx += np.array(doc_idx, "<i8").tobytes()
    return struct.pack("<I", len(idx)) + idx + np.array(tokens, np_dtype).tobytes()


write("index_reader", "seed-u16-sentences", idx_pair(8, "<u2", [[[15496, 995], [50256]], [[1, 2, 3]]]))
write("index_reader", "seed-i32-empty-doc", idx_pair(4, "<i4", [[[70000, 5, 6, 7]], [], [[8]]]))
write("index_reader", "seed-u8-one", idx_pair(1, "u1", [[[255, 0, 7]]]))
write("index_reader", "seed-i64-two", idx_pair(5, "<i8", [[[1 << 20, 3]], [[4, 5, 6, 7, 8]]]))
write("index_reader", "seed-no-sequences", idx_pair(8, "<u2", []))


# safetensors: u64 header length, JSON header, raw tensors.
def safetensors(tensors, metadata={"format": "pt"}, pad=True):
    header, data = {"__metadata__": metadata} if metadata else {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


f32 = np.arange(6, dtype="<f4") - 2.5
write("safetensors", "seed-f32", safetensors({"wte.weight": ("F32", [2, 3], f32.tobytes()),
                                              "ln_f.bias": ("F32", [3], f32[:3].tobytes())}))
write("safetensors", "seed-f16-bf16", safetensors({
    "h.0.attn.c_attn.weight": ("F16", [2, 2], np.array([1, -2, 0.5, 65504], "<f2").tobytes()),
    "h.0.mlp.c_fc.bias": ("BF16", [4], (f32[:4].view("<u4") >> 16).astype("<u2").tobytes())}))
write("safetensors", "seed-scalar-empty", safetensors({"s": ("F32", [], b"\0\0\x80\x3f"),
                                                       "e": ("F32", [0, 4], b"")}, metadata=None,
                                                      pad=False))

# tokenizer: text, with UTF-8 edge cases.
for name, text in {
    "seed-english": "Hello world! It's 4:30pm; they'll've done 12,345.67 things... I'm sure we'd "
                    "re-run it. \"Quotes\" & (parens) [brackets] {braces} #hash @at $5 100%",
    "seed-whitespace": "a  b\t\tc\n\nd \r\n e   \u00a0\u2003nbsp\u3000ideographic   ",
    "seed-unicode": "na\u00efve caf\u00e9 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0627\u0644\u0639"
                    "\u0631\u0628\u064a\u0629 \u0928\u092e\u0938\u094d\u0924\u0947 e\u0301 "
                    "\U0001F600\U0001F44D\U0001F3FD \u0663\u0664 \u00bd \u2167",
    "seed-endoftext": "first doc<|endoftext|>second doc <|endoftext|> ",
    "seed-code": "def f(x):\n    return x**2  # comment\n\tif (a<=b) { c->d[0] = 'e'; }\n",
}.items():
    write("tokenizer", name, text)
write("tokenizer", "seed-malformed-utf8",
      b"ok \x80 lone \xc3 trunc \xe2\x82 trunc3 \xf0\x9f\x98 trunc4 \xc0\xaf overlong "
      b"\xed\xa0\x80 surrogate \xf4\x90\x80\x80 too-big \xff\xfe \x00 nul \x7f del")
write("tokenizer", "seed-latin1", bytes(range(256)))


# tokenizer_files: vocab.json NUL merges.txt [NUL text]: a tiny byte-level vocabulary.
def byte_symbols():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


sym = byte_symbols()
merges = ["\u0120 t", "h e", "\u0120t he", "l l", "he ll", "o \u0120"]
vocab = {s: i for i, s in enumerate(sym)}
for m in merges:
    vocab[m.replace(" ", "")] = len(vocab)
vocab["<|endoftext|>"] = len(vocab)
files = json.dumps(vocab, ensure_ascii=False) + "\0#version: 0.2\n" + "\n".join(merges) + "\n"
write("tokenizer_files", "seed-tiny", files)
write("tokenizer_files", "seed-tiny-text", files + "\0hello the hell\u00f8 \U0001F600<|endoftext|>")

# cli: "<subcommand> [world size]", then one argv entry per line.
tiny = ("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 500 "
        "--micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 2e-3")
for name, line in {
    "seed-train-mock": "train 1 --mock-data " + tiny + " --lr-warmup-iters 2 --lr-decay-style cosine",
    "seed-train-tp-pp": "train 8 --mock-data " + tiny.replace("--num-layers 2", "--num-layers 4") +
                        " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
                        " --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce",
    "seed-train-llama": "train 2 --mock-data " + tiny + " --normalization RMSNorm --swiglu"
                        " --position-embedding-type rope --group-query-attention --num-query-groups 2"
                        " --disable-bias-linear --untie-embeddings-and-output-weights --bf16",
    "seed-train-data": "train 1 --data-path 0.3 a/b 0.7 c/d --tokenizer-type NullTokenizer " + tiny +
                       " --split 90,5,5 --eval-interval 5 --eval-iters 2 --save ck --save-interval 5"
                       " --lr-decay-style WSD --lr-wsd-decay-iters 4 --lr-warmup-fraction 0.1",
    "seed-train-fp16": "train 1 --mock-data " + tiny + " --fp16 --initial-loss-scale 1024"
                       " --loss-scale-window 3 --hysteresis 2 --inject-grad-overflow 3 5"
                       " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
    "seed-preprocess": "preprocess --input docs.jsonl --output-prefix out --tokenizer-type "
                       "GPT2BPETokenizer --vocab-file v.json --merge-file m.txt --json-keys text --workers 2",
    "seed-merge": "merge-datasets --input dir --output-prefix merged",
    "seed-generate": "generate --load ck --prompt hello --max-new-tokens 8 --top-k 1 " + tiny.split(" --micro")[0],
    "seed-convert": "convert --direction hf-to-megatron --load hf --save ck --make-vocab-size-divisible-by 64",
}.items():
    cmd, rest = line.split(" --", 1) if " --" in line else (line, "")
    write("cli", name, "\n".join([cmd] + ("--" + rest).split(" ")) + "\n")
