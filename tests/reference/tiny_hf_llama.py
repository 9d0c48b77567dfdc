"""Writes a tiny random Llama in Hugging Face's layout (config.json + model.safetensors, bf16,
LlamaForCausalLM names) with a given vocabulary size, for the walk-through
(scripts/llama-walkthrough.sh), or compares two such directories.

Usage: tiny_hf_llama.py write DIR VOCAB | compare DIR_A DIR_B
  compare: same tensor names, shapes and dtypes, and some weights changed (a fine-tuned copy).
"""
import json
import os
import struct
import sys

import torch

from safetensors_file import write_safetensors

L, H, NH, NG, HD, F = 2, 64, 4, 2, 16, 128


def write(d, vocab):
    gen = torch.Generator().manual_seed(1234)

    def n(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    t = {"model.embed_tokens.weight": n(vocab, H)}
    for i in range(L):
        p = "model.layers.%d." % i
        t.update({p + "input_layernorm.weight": torch.ones(H),
                  p + "self_attn.q_proj.weight": n(NH * HD, H),
                  p + "self_attn.k_proj.weight": n(NG * HD, H),
                  p + "self_attn.v_proj.weight": n(NG * HD, H),
                  p + "self_attn.o_proj.weight": n(H, NH * HD),
                  p + "post_attention_layernorm.weight": torch.ones(H),
                  p + "mlp.gate_proj.weight": n(F, H), p + "mlp.up_proj.weight": n(F, H),
                  p + "mlp.down_proj.weight": n(H, F)})
    t["model.norm.weight"] = torch.ones(H)
    t["lm_head.weight"] = n(vocab, H)
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), t, torch.bfloat16)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "hidden_size": H, "intermediate_size": F, "num_hidden_layers": L,
              "num_attention_heads": NH, "num_key_value_heads": NG, "head_dim": HD,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
              "tie_word_embeddings": False, "max_position_embeddings": 8192,
              "vocab_size": vocab, "bos_token_id": 128000, "eos_token_id": 128001,
              "initializer_range": 0.02, "torch_dtype": "bfloat16",
              "attention_bias": False, "mlp_bias": False}
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)


def header(d):
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    h.pop("__metadata__", None)
    return h, data


def compare(a, b):
    ha, da = header(a)
    hb, db = header(b)
    assert sorted(ha) == sorted(hb), "tensor names differ"
    for k in ha:
        assert ha[k]["dtype"] == hb[k]["dtype"] and ha[k]["shape"] == hb[k]["shape"], k
    changed = [k for k in ha if da[slice(*ha[k]["data_offsets"])] != db[slice(*hb[k]["data_offsets"])]]
    assert changed, "no weight changed"
    print("compare: %d tensors, same names/shapes/dtypes, %d changed by training" % (len(ha), len(changed)))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]))
    else:
        compare(sys.argv[2], sys.argv[3])
