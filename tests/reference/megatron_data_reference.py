"""Independent NumPy implementations of Megatron's data formats and indices, written from the
spec (docs/reference/megatron-reference.md §2) for the data tests.

usage:
  megatron_data_reference.py write-idx JSONL PREFIX VOCAB_SIZE APPEND_EOD
      JSON lines whose "text" is space-separated ids (or a list of such sentences) ->
      PREFIX.bin/.idx (uint16 if VOCAB_SIZE < 65500 else int32); EOD = VOCAB_SIZE - 1.
  megatron_data_reference.py gpt-indices PREFIX BEGIN END SEQ_LEN NUM_SAMPLES SEED OUT_PREFIX
      document / sample / shuffle indices of sequences [BEGIN, END) of PREFIX.idx ->
      OUT_PREFIX{document_index,sample_index,shuffle_index}.npy
  megatron_data_reference.py blend N W1 W2 ...   -> dataset_index and sample index, one pair a line
  megatron_data_reference.py blend-size N W1 W2 ...  -> the samples a weighted blend asked for N
      holds: the sum over datasets of ceil(N * w_i), w normalized (the builder's per-split sizing)
"""
import json
import math
import struct
import sys

import numpy as np


def write_idx(jsonl, prefix, vocab_size, append_eod):
    dtype, code = (np.uint16, 8) if vocab_size < 65500 else (np.int32, 4)
    lengths, docs = [], [0]
    with open(prefix + ".bin", "wb") as bin_f:
        for line in open(jsonl, encoding="utf-8"):
            if not line.strip():
                continue
            text = json.loads(line)["text"]
            sentences = text if isinstance(text, list) else [text]
            ids = [[int(t) for t in s.split()] for s in sentences]
            ids = [s for s in ids if s]
            if ids and append_eod:
                ids[-1].append(vocab_size - 1)
            for s in ids:
                bin_f.write(np.array(s, dtype=dtype).tobytes())
                lengths.append(len(s))
            docs.append(len(lengths))
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if lengths:
        pointers[1:] = np.cumsum(np.array(lengths[:-1], dtype=np.int64) * itemsize)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(docs)))
        f.write(np.array(lengths, dtype=np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.array(docs, dtype=np.int64).tobytes())


def read_lengths(prefix):
    raw = open(prefix + ".idx", "rb").read()
    n = struct.unpack("<Q", raw[18:26])[0]
    return np.frombuffer(raw[34:34 + 4 * n], dtype=np.int32)


def gpt_indices(prefix, begin, end, S, num_samples, seed, out):
    sizes = read_lengths(prefix)
    documents = np.arange(begin, end, dtype=np.int32)
    X = 1
    tokens_per_epoch = int(sizes[documents].sum())
    epochs = 1
    while epochs * tokens_per_epoch < num_samples * S + X:
        epochs += 1
    separate = False
    if epochs > 1:
        before = ((epochs - 1) * tokens_per_epoch - X) // S
        per_epoch = (tokens_per_epoch - X) // S
        separate = (num_samples - before) < int(0.80 * per_epoch)
    rng = np.random.RandomState(seed)

    def doc_index(n_epochs):
        d = np.tile(documents, n_epochs).astype(np.int32)
        rng.shuffle(d)
        return d

    document_index = (np.concatenate([doc_index(epochs - 1), doc_index(1)]) if separate
                      else doc_index(epochs))
    # Sample k starts at token k*S of the concatenated document stream; record it as
    # (position in the document index, offset inside that document).
    M = (epochs * tokens_per_epoch - X) // S
    doc_lens = sizes[document_index].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(doc_lens)])
    sample_index = np.zeros((M + 1, 2), dtype=np.int64)
    for k in range(1, M + 1):
        tok = k * S
        pos = min(int(np.searchsorted(starts, tok, side="right") - 1), len(doc_lens) - 1)
        sample_index[k] = (pos, tok - starts[pos])
    first = ((epochs - 1) * tokens_per_epoch - X) // S if separate else M
    head = np.arange(first, dtype=np.uint32)
    rng.shuffle(head)
    tail = np.arange(first, M, dtype=np.uint32)
    rng.shuffle(tail)
    np.save(out + "document_index.npy", document_index)
    np.save(out + "sample_index.npy", sample_index)
    np.save(out + "shuffle_index.npy", np.concatenate([head, tail]))


def blend(n, weights):
    w = np.array(weights, dtype=np.float64)
    w /= w.sum()
    count = np.zeros(len(w), dtype=np.int64)
    for t in range(n):
        err = w * max(t, 1) - count
        i = int(np.argmax(err))  # first maximum
        print(i, count[i])
        count[i] += 1


def blend_size(n, weights):
    w = np.array(weights, dtype=np.float64)
    w = w / w.sum()
    print(sum(int(math.ceil(n * float(x))) for x in w))


if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "write-idx":
        write_idx(a[0], a[1], int(a[2]), a[3] == "1")
    elif cmd == "gpt-indices":
        gpt_indices(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]), a[6])
    elif cmd == "blend-size":
        blend_size(int(a[0]), [float(x) for x in a[1:]])
    elif cmd == "blend":
        blend(int(a[0]), [float(x) for x in a[1:]])
