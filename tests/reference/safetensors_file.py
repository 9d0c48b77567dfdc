"""The safetensors format, written by hand for the reference tests (no `safetensors` package):
an 8-byte little-endian header length, the JSON header {name: {dtype, shape, data_offsets}},
padded with spaces to 8 bytes, then the raw little-endian tensors in header order."""
import json
import struct

import torch

_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def tensor_bytes(v, dtype):
    t = v.to(dtype)
    if dtype == torch.bfloat16:  # numpy has no bfloat16: its bits as int16
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype("<f4" if dtype == torch.float32 else "<f2").tobytes()


def write_safetensors(path, tensors, dtype=torch.float32):
    """Writes {name: tensor} as `dtype`; returns the bytes of tensor data."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, v in tensors.items():
        b = tensor_bytes(v, dtype)
        header[name] = {"dtype": _NAMES[dtype], "shape": list(v.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return offset
