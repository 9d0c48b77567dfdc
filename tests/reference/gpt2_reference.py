"""PyTorch reference GPT-2 for the parity test (float64, written for this test).

Reads what the C++ test wrote into DIR and writes the reference results back:
  in:  config.json ({"model": Megatron's config fields by name, "batch", "steps", optimizer
       settings}), params.bin (f32, flat, our layout), manifest.json (name, shape, offset),
       batches.bin (i32: STEPS x [tokens, positions, labels] of B*S each), masks.bin (f32)
  out: loss.txt (first batch), logits.bin (f64, B*S*V), grads.bin (f64, flat, our layout),
       step_losses.txt (loss before each of STEPS AdamW steps)
The architecture is Megatron-Core's GPT-2: learned positions, pre-LayerNorm, QKV rows
interleaved per head [q, k, v], tanh GELU, final LayerNorm, output tied to the word embedding,
softmax over the padded vocabulary.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


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


def main(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype=np.float32).astype(np.float64)
    P = {}
    for e in manifest:
        n = int(np.prod(e["shape"]))
        P[e["name"]] = torch.tensor(flat[e["offset"]:e["offset"] + n].reshape(e["shape"]), requires_grad=True)
    B, S, steps = cfg["batch"], cfg["model"]["seq_length"], cfg["steps"]
    raw = torch.from_numpy(np.fromfile(os.path.join(d, "batches.bin"), dtype=np.int32).astype(np.int64))
    raw = raw.view(steps, 3, B, S)
    masks = torch.from_numpy(np.fromfile(os.path.join(d, "masks.bin"), dtype=np.float32).astype(np.float64))
    masks = masks.view(steps, B, S)

    loss, logits = forward(P, cfg, raw[0, 0], raw[0, 1], raw[0, 2], masks[0])
    loss.backward()
    open(os.path.join(d, "loss.txt"), "w").write("%.17g\n" % loss.item())
    logits.detach().numpy().astype(np.float64).tofile(os.path.join(d, "logits.bin"))
    grads = np.zeros_like(flat)
    for e in manifest:
        n = int(np.prod(e["shape"]))
        grads[e["offset"]:e["offset"] + n] = P[e["name"]].grad.numpy().reshape(-1)
    grads.tofile(os.path.join(d, "grads.bin"))

    # AdamW steps: decay on 2-D weights only (Megatron's rule), global-norm clipping, constant lr.
    for t in P.values():
        t.grad = None
    decay = [P[e["name"]] for e in manifest if len(e["shape"]) > 1 and not e["name"].endswith(".bias")]
    no_decay = [P[e["name"]] for e in manifest if not (len(e["shape"]) > 1 and not e["name"].endswith(".bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    out = []
    for s in range(steps):
        opt.zero_grad()
        loss, _ = forward(P, cfg, raw[s, 0], raw[s, 1], raw[s, 2], masks[s])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), cfg["clip_grad"])
        opt.step()
        out.append("%.17g" % loss.item())
    open(os.path.join(d, "step_losses.txt"), "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main(sys.argv[1])
