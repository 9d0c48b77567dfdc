"""Writes random small Hugging Face Llama-family models and their float64 logits on a batch.

Usage: hf_llama_reference.py DIR
For each family (llama3: untied, GQA, Llama 3.1 RoPE scaling; llama_tied: tied, MHA; mistral:
GQA; qwen2: GQA with q/k/v biases) and each dtype (f32, bf16, f16), in DIR/<family>_<dtype>/:
  hf/          config.json, model.safetensors, tokenizer/generation files (as save_pretrained)
  hf_sharded/  the same weights in model-0000i-of-0000n.safetensors + model.safetensors.index.json
  tokens.bin   int32 [B, S];  logits.bin float64 [B, S, vocab]
The forward is HF's (LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM: RMSNorm,
rotate-half RoPE on positions 0..S-1 with llama3 frequency scaling, repeat_kv for GQA, causal
softmax attention, SwiGLU, Qwen2's q/k/v biases), written here for the test by HF's tensor
names; the safetensors writer follows the published format (8-byte header length, JSON, bytes).
"""
import json
import math
import os
import sys

import numpy as np
import torch

from safetensors_file import write_safetensors

L, H, NH, HD, F, V, P = 2, 64, 4, 16, 96, 100, 64
B, S, EPS = 2, 16, 1e-5

FAMILIES = {
    "llama3": dict(arch="LlamaForCausalLM", model_type="llama", kv=2, tied=False, theta=500000.0,
                   scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                   extra={"attention_bias": False, "mlp_bias": False, "bos_token_id": 128000,
                          "eos_token_id": [128001, 128009], "pretraining_tp": 1}),
    "llama_tied": dict(arch="LlamaForCausalLM", model_type="llama", kv=NH, tied=True,
                       theta=10000.0, scaling=None,
                       extra={"attention_bias": False, "mlp_bias": False, "bos_token_id": 1,
                              "eos_token_id": 2}),
    "mistral": dict(arch="MistralForCausalLM", model_type="mistral", kv=2, tied=False,
                    theta=1000000.0, scaling=None,
                    extra={"sliding_window": None, "bos_token_id": 1, "eos_token_id": 2}),
    "qwen2": dict(arch="Qwen2ForCausalLM", model_type="qwen2", kv=2, tied=False, theta=1000000.0,
                  scaling=None, bias=True,
                  extra={"use_sliding_window": False, "max_window_layers": 28,
                         "sliding_window": 4096, "bos_token_id": 151643, "eos_token_id": 151645}),
}
DTYPES = {"f32": (torch.float32, "float32"), "bf16": (torch.bfloat16, "bfloat16"),
          "f16": (torch.float16, "float16")}


def params(fam, gen, dtype):
    kv = fam["kv"]

    def n(*shape, std=0.1, mean=0.0):
        # Round to the file's dtype before computing the reference: it sees what the file holds.
        t = torch.randn(*shape, generator=gen, dtype=torch.float64) * std + mean
        return t.to(dtype).double()
    t = {"model.embed_tokens.weight": n(V, H, std=0.5)}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = n(H, mean=1.0)
        t[p + "self_attn.q_proj.weight"] = n(NH * HD, H)
        t[p + "self_attn.k_proj.weight"] = n(kv * HD, H)
        t[p + "self_attn.v_proj.weight"] = n(kv * HD, H)
        if fam.get("bias"):
            t[p + "self_attn.q_proj.bias"] = n(NH * HD)
            t[p + "self_attn.k_proj.bias"] = n(kv * HD)
            t[p + "self_attn.v_proj.bias"] = n(kv * HD)
        t[p + "self_attn.o_proj.weight"] = n(H, NH * HD)
        t[p + "post_attention_layernorm.weight"] = n(H, mean=1.0)
        t[p + "mlp.gate_proj.weight"] = n(F, H)
        t[p + "mlp.up_proj.weight"] = n(F, H)
        t[p + "mlp.down_proj.weight"] = n(H, F)
    t["model.norm.weight"] = n(H, mean=1.0)
    if not fam["tied"]:
        t["lm_head.weight"] = n(V, H, std=0.5)
    return t


def inv_freq(fam):
    f = 1.0 / fam["theta"] ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    sc = fam["scaling"]
    if sc is None:
        return f
    # transformers' _compute_llama3_parameters
    factor, lo, hi, old = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"], \
        sc["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    g = torch.where(wavelen > old / lo, f / factor, f)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * g / factor + smooth * g
    medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
    return torch.where(medium, smoothed, g)


def rms_norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


def forward(fam, t, tokens):
    kv = fam["kv"]
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv_freq(fam)[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    x = t["model.embed_tokens.weight"][tokens]
    for i in range(L):
        p = lambda name: t["model.layers.%d.%s" % (i, name)]
        h = rms_norm(x, p("input_layernorm.weight"))

        def proj(w, heads):
            y = h @ p("self_attn.%s_proj.weight" % w).T
            if fam.get("bias"):
                y = y + p("self_attn.%s_proj.bias" % w)
            return y.view(B, S, heads, HD).transpose(1, 2)
        q, k, v = proj("q", NH), proj("k", kv), proj("v", kv)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (z.repeat_interleave(NH // kv, dim=1) for z in (k, v))  # repeat_kv
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, NH * HD)
        x = x + y @ p("self_attn.o_proj.weight").T
        m = rms_norm(x, p("post_attention_layernorm.weight"))
        gate = torch.nn.functional.silu(m @ p("mlp.gate_proj.weight").T)
        x = x + (gate * (m @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
    x = rms_norm(x, t["model.norm.weight"])
    head = t["model.embed_tokens.weight"] if fam["tied"] else t["lm_head.weight"]
    return x @ head.T


def write_model(d, fam, t, dtype, torch_name, shards):
    os.makedirs(d, exist_ok=True)
    config = {"architectures": [fam["arch"]], "model_type": fam["model_type"], "hidden_act": "silu",
              "hidden_size": H, "intermediate_size": F, "num_attention_heads": NH,
              "num_hidden_layers": L, "num_key_value_heads": fam["kv"], "head_dim": HD,
              "rms_norm_eps": EPS, "rope_theta": fam["theta"], "rope_scaling": fam["scaling"],
              "tie_word_embeddings": fam["tied"], "max_position_embeddings": P, "vocab_size": V,
              "initializer_range": 0.02, "torch_dtype": torch_name,
              "transformers_version": "4.46.0", "use_cache": True, "attention_dropout": 0.0}
    config.update(fam["extra"])
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}},
              open(os.path.join(d, "tokenizer.json"), "w"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    json.dump({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
               "temperature": 0.6}, open(os.path.join(d, "generation_config.json"), "w"))
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), t, dtype)
        return
    names = list(t)
    weight_map, total = {}, 0
    for s in range(shards):
        part = {k: t[k] for k in names[s::shards]}  # interleaved: a layer's tensors span files
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        total += write_safetensors(os.path.join(d, fname), part, dtype)
        weight_map.update({k: fname for k in part})
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)


def main(root):
    for fi, (fname, fam) in enumerate(FAMILIES.items()):
        for di, (dname, (dtype, torch_name)) in enumerate(DTYPES.items()):
            gen = torch.Generator().manual_seed(20261205 + 10 * fi + di)
            t = params(fam, gen, dtype)
            d = os.path.join(root, "%s_%s" % (fname, dname))
            write_model(os.path.join(d, "hf"), fam, t, dtype, torch_name, 1)
            write_model(os.path.join(d, "hf_sharded"), fam, t, dtype, torch_name, 3)
            tokens = torch.randint(0, V, (B, S), generator=gen)
            tokens.int().numpy().tofile(os.path.join(d, "tokens.bin"))
            forward(fam, t, tokens).numpy().astype(np.float64).tofile(os.path.join(d, "logits.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
