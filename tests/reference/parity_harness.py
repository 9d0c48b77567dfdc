"""The file protocol of the PyTorch parity tests (tests/testing/pytorch_parity.h), shared by the
float64 references (gpt2_reference.py, llama_reference.py), which differ only in their model.

Reads from DIR: config.json, params.bin (f32, flat, our layout), manifest.json (name, shape,
offset), batches.bin (i32: STEPS x [tokens, positions, labels] of B*S each), masks.bin (f32).
Writes: loss.txt (first batch), logits.bin (f64), grads.bin (f64, flat, our layout),
step_losses.txt (the loss before each of STEPS AdamW steps: decay on 2-D weights only, Megatron's
rule; global-norm clipping; constant lr).
"""
import json
import os

import numpy as np
import torch


def run(dirname, make_model):
    """make_model(cfg, manifest, P) -> loss_of(tokens, positions, labels, mask) = (loss, logits)."""
    torch.set_default_dtype(torch.float64)
    path = lambda name: os.path.join(dirname, name)
    cfg = json.load(open(path("config.json")))
    manifest = json.load(open(path("manifest.json")))
    flat = np.fromfile(path("params.bin"), dtype=np.float32).astype(np.float64)
    P = {}
    for e in manifest:
        n = int(np.prod(e["shape"]))
        P[e["name"]] = torch.tensor(flat[e["offset"]:e["offset"] + n].reshape(e["shape"]), requires_grad=True)
    loss_of = make_model(cfg, manifest, P)
    B, S, steps = cfg["batch"], cfg["model"]["seq_length"], cfg["steps"]
    raw = torch.from_numpy(np.fromfile(path("batches.bin"), dtype=np.int32).astype(np.int64))
    raw = raw.view(steps, 3, B, S)  # [tokens, position ids, labels]
    masks = torch.from_numpy(np.fromfile(path("masks.bin"), dtype=np.float32).astype(np.float64))
    masks = masks.view(steps, B, S)

    loss, logits = loss_of(raw[0, 0], raw[0, 1], raw[0, 2], masks[0])
    loss.backward()
    open(path("loss.txt"), "w").write("%.17g\n" % loss.item())
    logits.detach().numpy().astype(np.float64).tofile(path("logits.bin"))
    grads = np.zeros_like(flat)
    for e in manifest:
        n = int(np.prod(e["shape"]))
        grads[e["offset"]:e["offset"] + n] = P[e["name"]].grad.numpy().reshape(-1)
    grads.tofile(path("grads.bin"))

    for t in P.values():
        t.grad = None
    decayed = lambda e: len(e["shape"]) > 1 and not e["name"].endswith(".bias")
    opt = torch.optim.AdamW([{"params": [P[e["name"]] for e in manifest if decayed(e)],
                              "weight_decay": cfg["weight_decay"]},
                             {"params": [P[e["name"]] for e in manifest if not decayed(e)],
                              "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    out = []
    for s in range(steps):
        opt.zero_grad()
        loss, _ = loss_of(raw[s, 0], raw[s, 1], raw[s, 2], masks[s])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), cfg["clip_grad"])
        opt.step()
        out.append("%.17g" % loss.item())
    open(path("step_losses.txt"), "w").write("\n".join(out) + "\n")
