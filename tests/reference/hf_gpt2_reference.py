"""Writes a random GPT-2 in Hugging Face's layout and its float64 logits on a batch.

Usage: hf_gpt2_reference.py DIR
  DIR/hf/config.json, DIR/hf/model.safetensors: GPT2LMHeadModel names ("transformer.h.0...."),
    Conv1D weights stored [in, out], fused c_attn columns [q | k | v], float32, no lm_head
    (tied to wte), as transformers' save_pretrained writes them;
  DIR/tokens.bin (int32, B x S), DIR/logits.bin (float64, B x S x vocab).
The forward is HF's GPT2LMHeadModel (gelu_new, causal softmax attention, pre-LayerNorm),
written here for the test; the safetensors writer follows the published format.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from safetensors_file import write_safetensors

L, H, NH, P, V, EPS = 2, 64, 4, 32, 100, 1e-5
B, S = 2, 16


def params(gen):
    def n(*shape, std=0.02):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * std
    t = {"transformer.wte.weight": n(V, H, std=0.1), "transformer.wpe.weight": n(P, H, std=0.05)}
    for i in range(L):
        h = "transformer.h.%d." % i
        t[h + "ln_1.weight"] = 1 + n(H, std=0.1)
        t[h + "ln_1.bias"] = n(H, std=0.1)
        t[h + "attn.c_attn.weight"] = n(H, 3 * H, std=0.1)
        t[h + "attn.c_attn.bias"] = n(3 * H, std=0.1)
        t[h + "attn.c_proj.weight"] = n(H, H, std=0.1)
        t[h + "attn.c_proj.bias"] = n(H, std=0.1)
        t[h + "ln_2.weight"] = 1 + n(H, std=0.1)
        t[h + "ln_2.bias"] = n(H, std=0.1)
        t[h + "mlp.c_fc.weight"] = n(H, 4 * H, std=0.1)
        t[h + "mlp.c_fc.bias"] = n(4 * H, std=0.1)
        t[h + "mlp.c_proj.weight"] = n(4 * H, H, std=0.1)
        t[h + "mlp.c_proj.bias"] = n(H, std=0.1)
    t["transformer.ln_f.weight"] = 1 + n(H, std=0.1)
    t["transformer.ln_f.bias"] = n(H, std=0.1)
    # Round to float32 (what the file holds) before computing the reference.
    return {k: v.float().double() for k, v in t.items()}


def forward(t, tokens):
    pos = torch.arange(S).unsqueeze(0).expand(B, S)
    x = t["transformer.wte.weight"][tokens] + t["transformer.wpe.weight"][pos]
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    HD = H // NH
    for i in range(L):
        p = lambda n: t["transformer.h.%d.%s" % (i, n)]
        a = F.layer_norm(x, (H,), p("ln_1.weight"), p("ln_1.bias"), EPS)
        qkv = a @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (z.view(B, S, NH, HD).transpose(1, 2) for z in qkv.split(H, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, H)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = F.layer_norm(x, (H,), p("ln_2.weight"), p("ln_2.bias"), EPS)
        m = F.gelu(m @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + m @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (H,), t["transformer.ln_f.weight"], t["transformer.ln_f.bias"], EPS)
    return x @ t["transformer.wte.weight"].T


def main(d):
    gen = torch.Generator().manual_seed(20261202)
    t = params(gen)
    os.makedirs(os.path.join(d, "hf"), exist_ok=True)
    write_safetensors(os.path.join(d, "hf", "model.safetensors"), t)
    json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L,
               "n_embd": H, "n_head": NH, "n_positions": P, "n_ctx": P, "vocab_size": V,
               "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": EPS,
               "initializer_range": 0.02}, open(os.path.join(d, "hf", "config.json"), "w"))
    tokens = torch.randint(0, V, (B, S), generator=gen)
    tokens.int().numpy().tofile(os.path.join(d, "tokens.bin"))
    forward(t, tokens).numpy().astype(np.float64).tofile(os.path.join(d, "logits.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
