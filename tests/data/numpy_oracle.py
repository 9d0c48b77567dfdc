"""NumPy oracle for the data tests: prints what numpy's generators produce, one value per line.

usage:
  numpy_oracle.py integers SEED LOW HIGH N        default_rng(SEED).integers(LOW, HIGH, N, int32)
  numpy_oracle.py shuffle SEED N [N2 ...]          RandomState(SEED): shuffle arange(N), then N2, ...
  numpy_oracle.py docshuffle SEED BEGIN END EPOCHS M FIRST SEPARATE
      Megatron's document index (epochs of arange(BEGIN, END), int32, shuffled; a separate last
      epoch if SEPARATE) followed by its shuffle index (arange(FIRST), arange(FIRST, M)).
"""
import sys

import numpy as np


def main(argv):
    cmd = argv[0]
    if cmd == "integers":
        seed, low, high, n = map(int, argv[1:5])
        out = np.random.default_rng(seed).integers(low, high, size=n, dtype=np.int32)
    elif cmd == "shuffle":
        rs = np.random.RandomState(int(argv[1]))
        parts = []
        for n in map(int, argv[2:]):
            a = np.arange(n, dtype=np.uint32)
            rs.shuffle(a)
            parts.append(a)
        out = np.concatenate(parts)
    elif cmd == "docshuffle":
        seed, begin, end, epochs, m, first, separate = map(int, argv[1:8])
        rs = np.random.RandomState(seed)

        def doc_index(n_epochs):
            d = np.mgrid[0:n_epochs, begin:end][1].reshape(-1).astype(np.int32)
            rs.shuffle(d)
            return d

        docs = (np.concatenate([doc_index(epochs - 1), doc_index(1)]) if separate
                else doc_index(epochs))
        head = np.arange(first, dtype=np.uint32)
        rs.shuffle(head)
        tail = np.arange(first, m, dtype=np.uint32)
        rs.shuffle(tail)
        out = np.concatenate([docs.astype(np.int64), head, tail])
    else:
        raise SystemExit("unknown command " + cmd)
    sys.stdout.write("\n".join(str(int(v)) for v in out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
