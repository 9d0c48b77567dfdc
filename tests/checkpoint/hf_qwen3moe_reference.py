"""Writes random tiny Hugging Face Qwen3-MoE (Qwen3MoeForCausalLM) and Qwen3 (Qwen3ForCausalLM)
models and their float64 logits on a batch.

Usage: hf_qwen3moe_reference.py DIR
Every model: 3 layers, hidden 32, 4 query heads in 2 KV groups (GQA) of head_dim 16 (not
32 / 4), per-head RMSNorm of q and k (q_norm, k_norm). The cases, each in DIR/<case>/:
  qwen3moe_norm_f32, _bf16  4 experts of width 24, 2 per token, norm_topk_prob true; layer 0
                            dense (mlp_only_layers [0]) with width 64; untied output
  qwen3moe_nonorm_f32       norm_topk_prob false; decoder_sparse_step 2: layer 1 alone MoE
  qwen3_f32                 Qwen3ForCausalLM: every layer dense, tied output
each with hf/ (config.json, model.safetensors, tokenizer/generation files), hf_sharded/ (the
weights in 3 files + model.safetensors.index.json), tokens.bin (int32 [B, S]) and logits.bin
(float64 [B, S, vocab]).
The forward is transformers' Qwen3MoeForCausalLM, written here for the test by HF's tensor
names: RMSNorm; q/k projections viewed as heads, each RMS-normalised over head_dim (q_norm,
k_norm), then rotate-half RoPE; repeat_kv; causal softmax attention scaled by head_dim^-0.5;
layer i's MLP is Qwen3MoeSparseMoeBlock when i is not in mlp_only_layers and
(i + 1) % decoder_sparse_step == 0 (router softmax over all experts, the top k, renormalised to
sum 1 only under norm_topk_prob; each chosen expert down(silu(gate x) * up x) scaled by its
weight), else the dense SwiGLU MLP. The seed is chosen so that no token's k-th and (k+1)-th
router logits are closer than 1e-3, so float32 picks the same experts as float64.
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from safetensors_file import write_safetensors  # noqa: E402

L, H, NH, KV, HD, F, FE, E, K, V, P = 3, 32, 4, 2, 16, 64, 24, 4, 2, 100, 64
B, S, EPS, THETA = 2, 16, 1e-6, 1000000.0
MARGIN = 1e-3
# case: (architecture, dtype, torch_dtype name, norm_topk_prob, decoder_sparse_step,
#        mlp_only_layers, tied output)
CASES = {
    "qwen3moe_norm_f32": ("Qwen3MoeForCausalLM", torch.float32, "float32", True, 1, [0], False),
    "qwen3moe_norm_bf16": ("Qwen3MoeForCausalLM", torch.bfloat16, "bfloat16", True, 1, [0], False),
    "qwen3moe_nonorm_f32": ("Qwen3MoeForCausalLM", torch.float32, "float32", False, 2, [], False),
    "qwen3_f32": ("Qwen3ForCausalLM", torch.float32, "float32", None, None, None, True),
}


def sparse(case, i):
    arch, _, _, _, step, dense, _ = CASES[case]
    return arch == "Qwen3MoeForCausalLM" and i not in dense and (i + 1) % step == 0


def params(gen, case):
    dtype, tied = CASES[case][1], CASES[case][6]

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
        t[p + "self_attn.q_norm.weight"] = n(HD, mean=1.0)
        t[p + "self_attn.k_norm.weight"] = n(HD, mean=1.0)
        t[p + "post_attention_layernorm.weight"] = n(H, mean=1.0)
        if sparse(case, i):
            t[p + "mlp.gate.weight"] = n(E, H, std=0.5)
            for e in range(E):
                x = p + "mlp.experts.%d." % e
                t[x + "gate_proj.weight"] = n(FE, H)
                t[x + "up_proj.weight"] = n(FE, H)
                t[x + "down_proj.weight"] = n(H, FE)
        else:
            t[p + "mlp.gate_proj.weight"] = n(F, H)
            t[p + "mlp.up_proj.weight"] = n(F, H)
            t[p + "mlp.down_proj.weight"] = n(H, F)
    t["model.norm.weight"] = n(H, mean=1.0)
    if not tied:
        t["lm_head.weight"] = n(V, H, std=0.5)
    return t


def rms_norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


def swiglu(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


def sparse_moe(x, p, norm_topk_prob):
    """Qwen3MoeSparseMoeBlock; returns the output and the smallest top-k margin of the logits."""
    h = x.reshape(-1, H)
    logits = h @ p("mlp.gate.weight").T  # [T, E]
    w, chosen = torch.topk(logits.softmax(-1), K, dim=-1)
    if norm_topk_prob:
        w = w / w.sum(-1, keepdim=True)
    srt = logits.sort(-1, descending=True).values
    margin = (srt[:, K - 1] - srt[:, K]).min().item()
    out = torch.zeros_like(h)
    for e in range(E):
        g, u, d = (p("mlp.experts.%d.%s_proj.weight" % (e, n)) for n in ("gate", "up", "down"))
        for j in range(K):
            rows = chosen[:, j] == e
            out[rows] += w[rows, j, None] * swiglu(h[rows], g, u, d)
    return out.view(x.shape), margin


def forward(t, tokens, case):
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
            return (h @ p("self_attn.%s_proj.weight" % w).T).view(B, S, heads, HD)
        q = rms_norm(proj("q", NH), p("self_attn.q_norm.weight")).transpose(1, 2)
        k = rms_norm(proj("k", KV), p("self_attn.k_norm.weight")).transpose(1, 2)
        v = proj("v", KV).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (z.repeat_interleave(NH // KV, dim=1) for z in (k, v))  # repeat_kv
        att = (q @ k.transpose(-1, -2)) * HD ** -0.5
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, NH * HD)
        x = x + y @ p("self_attn.o_proj.weight").T
        h = rms_norm(x, p("post_attention_layernorm.weight"))
        if sparse(case, i):
            y, m = sparse_moe(h, p, CASES[case][3])
            margin = min(margin, m)
        else:
            y = swiglu(h, *(p("mlp.%s_proj.weight" % n) for n in ("gate", "up", "down")))
        x = x + y
    x = rms_norm(x, t["model.norm.weight"])
    head = t["model.embed_tokens.weight"] if CASES[case][6] else t["lm_head.weight"]
    return x @ head.T, margin


def config_of(case):
    arch, _, torch_name, norm_topk_prob, step, dense, tied = CASES[case]
    c = {"architectures": [arch], "attention_bias": False, "attention_dropout": 0.0,
         "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": HD, "hidden_act": "silu",
         "hidden_size": H, "initializer_range": 0.02, "intermediate_size": F,
         "max_position_embeddings": P, "max_window_layers": L, "num_attention_heads": NH,
         "num_hidden_layers": L, "num_key_value_heads": KV, "rms_norm_eps": EPS,
         "rope_scaling": None, "rope_theta": THETA, "sliding_window": None,
         "tie_word_embeddings": tied, "torch_dtype": torch_name, "transformers_version": "4.51.0",
         "use_cache": True, "use_sliding_window": False, "vocab_size": V}
    if arch == "Qwen3ForCausalLM":
        c["model_type"] = "qwen3"
        return c
    c.update({"model_type": "qwen3_moe", "decoder_sparse_step": step, "mlp_only_layers": dense,
              "moe_intermediate_size": FE, "norm_topk_prob": norm_topk_prob, "num_experts": E,
              "num_experts_per_tok": K, "output_router_logits": False,
              "router_aux_loss_coef": 0.001})
    return c


def write_model(d, t, case, shards):
    os.makedirs(d, exist_ok=True)
    dtype = CASES[case][1]
    json.dump(config_of(case), open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}},
              open(os.path.join(d, "tokenizer.json"), "w"))
    json.dump({"tokenizer_class": "Qwen2TokenizerFast", "eos_token": "<|im_end|>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    json.dump({"bos_token_id": 151643, "eos_token_id": 151645},
              open(os.path.join(d, "generation_config.json"), "w"))
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
    for ci, case in enumerate(CASES):
        for seed in range(20261207 + 100 * ci, 20261207 + 100 * ci + 100):
            gen = torch.Generator().manual_seed(seed)
            t = params(gen, case)
            tokens = torch.randint(0, V, (B, S), generator=gen)
            logits, margin = forward(t, tokens, case)
            if margin > MARGIN:
                break
        assert margin > MARGIN, "no seed gives distinct top-k router logits"
        d = os.path.join(root, case)
        write_model(os.path.join(d, "hf"), t, case, 1)
        write_model(os.path.join(d, "hf_sharded"), t, case, 3)
        tokens.int().numpy().tofile(os.path.join(d, "tokens.bin"))
        logits.numpy().astype(np.float64).tofile(os.path.join(d, "logits.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
