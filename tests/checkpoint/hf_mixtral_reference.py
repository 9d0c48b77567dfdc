"""Writes a random tiny Hugging Face Mixtral (MixtralForCausalLM) and its float64 logits on a batch.

Usage: hf_mixtral_reference.py DIR
The model: 2 layers, hidden 32, 4 query heads in 2 KV groups (GQA), 4 experts of width 48 in
every layer, 2 per token, untied output. For each dtype (f32, bf16), in DIR/mixtral_<dtype>/:
  hf/          config.json, model.safetensors, tokenizer/generation files (as save_pretrained)
  hf_sharded/  the same weights in model-0000i-of-0000n.safetensors + model.safetensors.index.json
  tokens.bin   int32 [B, S];  logits.bin float64 [B, S, vocab]
The forward is transformers' MixtralForCausalLM, written here for the test by HF's tensor names:
RMSNorm, rotate-half RoPE, repeat_kv, causal softmax attention, and MixtralSparseMoeBlock: the
router's softmax over all experts, the top k, their weights renormalised to sum to 1, each chosen
expert w2(silu(w1 x) * w3 x) scaled by its weight. The seed is chosen so that no token's k-th and
(k+1)-th router logits are closer than 1e-3, so float32 picks the same experts as float64.
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from safetensors_file import write_safetensors  # noqa: E402

L, H, NH, KV, HD, F, E, K, V, P = 2, 32, 4, 2, 8, 48, 4, 2, 100, 64
B, S, EPS, THETA = 2, 16, 1e-5, 1000000.0
DTYPES = {"f32": (torch.float32, "float32"), "bf16": (torch.bfloat16, "bfloat16")}
MARGIN = 1e-3


def params(gen, dtype):
    def n(*shape, std=0.2, mean=0.0):
        # Rounded to the file's dtype before the reference runs: it sees what the file holds.
        t = torch.randn(*shape, generator=gen, dtype=torch.float64) * std + mean
        return t.to(dtype).double()
    t = {"model.embed_tokens.weight": n(V, H, std=0.5)}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = n(H, mean=1.0)
        t[p + "self_attn.q_proj.weight"] = n(NH * HD, H)
        t[p + "self_attn.k_proj.weight"] = n(KV * HD, H)
        t[p + "self_attn.v_proj.weight"] = n(KV * HD, H)
        t[p + "self_attn.o_proj.weight"] = n(H, NH * HD)
        t[p + "post_attention_layernorm.weight"] = n(H, mean=1.0)
        t[p + "block_sparse_moe.gate.weight"] = n(E, H, std=0.5)
        for e in range(E):
            x = p + "block_sparse_moe.experts.%d." % e
            t[x + "w1.weight"] = n(F, H)
            t[x + "w2.weight"] = n(H, F)
            t[x + "w3.weight"] = n(F, H)
    t["model.norm.weight"] = n(H, mean=1.0)
    t["lm_head.weight"] = n(V, H, std=0.5)
    return t


def rms_norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


def sparse_moe(x, p):
    """MixtralSparseMoeBlock; returns the output and the smallest top-k margin of the logits."""
    h = x.reshape(-1, H)
    logits = h @ p("block_sparse_moe.gate.weight").T  # [T, E]
    w = logits.softmax(-1)
    w, chosen = torch.topk(w, K, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    srt = logits.sort(-1, descending=True).values
    margin = (srt[:, K - 1] - srt[:, K]).min().item()
    out = torch.zeros_like(h)
    for e in range(E):
        w1, w2, w3 = (p("block_sparse_moe.experts.%d.%s.weight" % (e, n)) for n in ("w1", "w2", "w3"))
        for j in range(K):
            rows = chosen[:, j] == e
            a = h[rows]
            y = (torch.nn.functional.silu(a @ w1.T) * (a @ w3.T)) @ w2.T
            out[rows] += w[rows, j, None] * y
    return out.view(x.shape), margin


def forward(t, tokens):
    inv_freq = 1.0 / THETA ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    x = t["model.embed_tokens.weight"][tokens]
    margin = math.inf
    for i in range(L):
        p = lambda name: t["model.layers.%d.%s" % (i, name)]  # noqa: E731
        h = rms_norm(x, p("input_layernorm.weight"))

        def proj(w, heads):
            return (h @ p("self_attn.%s_proj.weight" % w).T).view(B, S, heads, HD).transpose(1, 2)
        q, k, v = proj("q", NH), proj("k", KV), proj("v", KV)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (z.repeat_interleave(NH // KV, dim=1) for z in (k, v))  # repeat_kv
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, NH * HD)
        x = x + y @ p("self_attn.o_proj.weight").T
        y, m = sparse_moe(rms_norm(x, p("post_attention_layernorm.weight")), p)
        x = x + y
        margin = min(margin, m)
    x = rms_norm(x, t["model.norm.weight"])
    return x @ t["lm_head.weight"].T, margin


def write_model(d, t, dtype, torch_name, shards):
    os.makedirs(d, exist_ok=True)
    config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
              "hidden_act": "silu", "hidden_size": H, "intermediate_size": F,
              "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": KV,
              "num_local_experts": E, "num_experts_per_tok": K, "rms_norm_eps": EPS,
              "rope_theta": THETA, "tie_word_embeddings": False, "max_position_embeddings": P,
              "vocab_size": V, "initializer_range": 0.02, "torch_dtype": torch_name,
              "sliding_window": None, "attention_dropout": 0.0, "output_router_logits": False,
              "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0, "bos_token_id": 1,
              "eos_token_id": 2, "transformers_version": "4.46.0", "use_cache": True}
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}},
              open(os.path.join(d, "tokenizer.json"), "w"))
    json.dump({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    json.dump({"bos_token_id": 1, "eos_token_id": 2}, open(os.path.join(d, "generation_config.json"), "w"))
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
    for di, (dname, (dtype, torch_name)) in enumerate(DTYPES.items()):
        for seed in range(20261206 + 100 * di, 20261206 + 100 * di + 100):
            gen = torch.Generator().manual_seed(seed)
            t = params(gen, dtype)
            tokens = torch.randint(0, V, (B, S), generator=gen)
            logits, margin = forward(t, tokens)
            if margin > MARGIN:
                break
        assert margin > MARGIN, "no seed gives distinct top-k router logits"
        d = os.path.join(root, "mixtral_" + dname)
        write_model(os.path.join(d, "hf"), t, dtype, torch_name, 1)
        write_model(os.path.join(d, "hf_sharded"), t, dtype, torch_name, 3)
        tokens.int().numpy().tofile(os.path.join(d, "tokens.bin"))
        logits.numpy().astype(np.float64).tofile(os.path.join(d, "logits.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
