"""Writes a random bf16 Llama with Llama 3.2 1B's shapes (16 layers, hidden 2048, 32 heads, 8
K/V heads, FFN 8192, vocab 128256, tied: 1.24 B parameters, 2.47 GB) as HF's save_pretrained
would (config.json + one model.safetensors), or checks that two HF directories hold the same
tensors bit for bit (whatever their sharding and tensor order).

Usage: convert_llama_model.py write DIR | same DIR_A DIR_B
"""
import json
import mmap
import os
import struct
import sys

import torch

L, H, NH, NG, HD, F, V = 16, 2048, 32, 8, 64, 8192, 128256


def shapes():
    s = {"model.embed_tokens.weight": [V, H]}
    for i in range(L):
        p = "model.layers.%d." % i
        s.update({p + "input_layernorm.weight": [H], p + "self_attn.q_proj.weight": [NH * HD, H],
                  p + "self_attn.k_proj.weight": [NG * HD, H], p + "self_attn.v_proj.weight": [NG * HD, H],
                  p + "self_attn.o_proj.weight": [H, NH * HD], p + "post_attention_layernorm.weight": [H],
                  p + "mlp.gate_proj.weight": [F, H], p + "mlp.up_proj.weight": [F, H],
                  p + "mlp.down_proj.weight": [H, F]})
    s["model.norm.weight"] = [H]
    return s


def write(d):
    os.makedirs(d, exist_ok=True)
    s = shapes()
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in s.items():
        n = 2
        for x in shape:
            n *= x
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    gen = torch.Generator().manual_seed(1)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape in s.items():
            t = torch.randn(*shape, generator=gen, dtype=torch.float32).mul_(0.02).to(torch.bfloat16)
            f.write(t.view(torch.int16).numpy().tobytes())
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
               "hidden_size": H, "intermediate_size": F, "num_attention_heads": NH,
               "num_hidden_layers": L, "num_key_value_heads": NG, "head_dim": HD,
               "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
               "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
               "tie_word_embeddings": True, "max_position_embeddings": 131072, "vocab_size": V,
               "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"},
              open(os.path.join(d, "config.json"), "w"), indent=2)
    print("wrote %s: %d tensors, %d bytes of weights" % (d, len(s), off))


def tensors(d):
    """name -> (mmap, begin, end) over every safetensors file of d."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        f = open(os.path.join(d, fn), "rb")
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n = struct.unpack("<Q", m[:8])[0]
        for name, e in json.loads(m[8:8 + n]).items():
            if name != "__metadata__":
                b, end = e["data_offsets"]
                out[name] = (m, 8 + n + b, 8 + n + end, e["dtype"], e["shape"])
    return out


def same(a, b):
    x, y = tensors(a), tensors(b)
    assert sorted(x) == sorted(y), "tensor names differ"
    for name, (m, b0, e0, dt, sh) in x.items():
        m2, b1, e1, dt2, sh2 = y[name]
        assert (dt, sh) == (dt2, sh2), name
        for s in range(0, e0 - b0, 1 << 26):  # 64 MB at a time
            n = min(1 << 26, e0 - b0 - s)
            assert m[b0 + s:b0 + s + n] == m2[b1 + s:b1 + s + n], name + " differs"
    print("same: %d tensors bit-identical" % len(x))


if __name__ == "__main__":
    {"write": lambda: write(sys.argv[2]), "same": lambda: same(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
