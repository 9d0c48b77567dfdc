"""PyTorch reference GPT-2 for the parity test (float64, written for this test).

Reads what the C++ test wrote into DIR and writes the reference results back through
parity_harness.py (the file protocol and the AdamW steps); this file is the model.
The architecture is Megatron-Core's GPT-2: learned positions, pre-LayerNorm, QKV rows
interleaved per head [q, k, v], tanh GELU, final LayerNorm, output tied to the word embedding,
softmax over the padded vocabulary.
"""
import math
import sys

import torch
import torch.nn.functional as F

import parity_harness


def forward(P, cfg, tokens, positions, labels, mask):
    m = cfg["model"]
    L, H, NH = m["num_layers"], m["hidden_size"], m["num_attention_heads"]
    B, S, eps = cfg["batch"], m["seq_length"], m["norm_epsilon"]
    HD = H // NH
    x = P["embedding.word_embeddings.weight"][tokens] + P["embedding.position_embeddings.weight"][positions]
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    for i in range(L):
        p = lambda n: P["decoder.layers.%d.%s" % (i, n)]
        h = F.layer_norm(x, (H,), p("input_layernorm.weight"), p("input_layernorm.bias"), eps)
        qkv = h @ p("self_attention.linear_qkv.weight").T + p("self_attention.linear_qkv.bias")
        q, k, v = qkv.view(B, S, NH, 3, HD).unbind(3)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # B, NH, S, HD
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, H)
        x = x + y @ p("self_attention.linear_proj.weight").T + p("self_attention.linear_proj.bias")
        h = F.layer_norm(x, (H,), p("pre_mlp_layernorm.weight"), p("pre_mlp_layernorm.bias"), eps)
        h = F.gelu(h @ p("mlp.linear_fc1.weight").T + p("mlp.linear_fc1.bias"), approximate="tanh")
        x = x + h @ p("mlp.linear_fc2.weight").T + p("mlp.linear_fc2.bias")
    x = F.layer_norm(x, (H,), P["decoder.final_layernorm.weight"], P["decoder.final_layernorm.bias"], eps)
    logits = x @ P["embedding.word_embeddings.weight"].T
    losses = F.cross_entropy(logits.reshape(B * S, -1), labels.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return (losses * m).sum() / m.sum(), logits


def make_model(cfg, manifest, P):
    return lambda tokens, positions, labels, mask: forward(P, cfg, tokens, positions, labels, mask)


if __name__ == "__main__":
    parity_harness.run(sys.argv[1], make_model)
