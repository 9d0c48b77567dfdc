"""What the PyTorch reference trainers (bench/torch_gpt2_train.py, bench/torch_llama_train.py)
share: the command line, causal attention (manual softmax or PyTorch's fused SDPA; grouped K/V
heads repeated for their queries), and the timed AdamW loop on random tokens (throughput does
not depend on the data), fp32 or bf16 autocast with fp32 master weights. Prints one line:
  torch_params=N torch_ms_per_iter=X torch_tokens_per_s=Y
Timing skips the first `--warmup` iterations and reports the mean of the rest.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F


def parse_args(description, extra=()):
    """The shared flags (Megatron's names for the model's) plus `extra`: (flag, type, default)."""
    p = argparse.ArgumentParser(description=description)
    for flag in ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "vocab-size",
                 "micro-batch-size", "iters", "warmup"):
        p.add_argument("--" + flag, type=int, required=True)
    for flag, kind, default in extra:
        p.add_argument("--" + flag, type=kind, default=default)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 master weights)")
    p.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = p.parse_args()
    if a.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        p.error("--sdpa: this PyTorch (%s) has no F.scaled_dot_product_attention" % torch.__version__)
    return a


# F.scaled_dot_product_attention reads grouped K/V heads itself (enable_gqa) from PyTorch 2.5.
SDPA_GQA = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def causal_attention(q, k, v, causal, sdpa):
    """q (B, NH, S, HD), k and v (B, NG, S, HD) with NH a multiple of NG (query head i reads K/V
    head i // (NH / NG)); causal (S, S) bool, True above the diagonal. Returns (B, NH, S, HD)."""
    per_group = q.shape[1] // k.shape[1]
    if sdpa and per_group > 1 and SDPA_GQA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if per_group > 1:
        k, v = k.repeat_interleave(per_group, dim=1), v.repeat_interleave(per_group, dim=1)
    if sdpa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    return att.masked_fill(causal, float("-inf")).softmax(-1) @ v


def causal_mask(seq_length):
    return torch.ones(seq_length, seq_length).triu(1).bool()


def train(model, a):
    """model(tokens, labels) -> loss; AdamW with global-norm clipping 1.0, as megatron's
    defaults; prints the parameter count and the timing line."""
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    step_model = torch.compile(model) if a.compile else model
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for it in range(a.warmup + a.iters):
        tokens = torch.randint(0, a.vocab_size, (a.micro_batch_size, a.seq_length + 1), device=dev)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            loss = step_model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    params = sum(p.numel() for p in model.parameters())
    if not times:  # --iters 0: a validation run (parameter count, one untimed step)
        print("torch_params=%d" % params)
        return
    ms = 1e3 * sum(times) / len(times)
    tps = a.micro_batch_size * a.seq_length / (ms / 1e3)
    print("torch_params=%d torch_ms_per_iter=%.1f torch_tokens_per_s=%.1f" % (params, ms, tps))
