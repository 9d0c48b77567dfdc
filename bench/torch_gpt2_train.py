"""PyTorch reference trainer for bench/train_throughput.sh (CPU, fp32) and
bench/gpu_train_throughput.sh (--device cuda, optionally --bf16 autocast, --sdpa for PyTorch's
fused causal attention, --compile for torch.compile): the same GPT-2 architecture, AdamW,
random tokens (throughput does not depend on the data). Prints one line:
  torch_ms_per_iter=X torch_tokens_per_s=Y
Timing skips the first `--warmup` iterations and reports the mean of the rest.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, nh, ffn):
        super().__init__()
        self.nh = nh
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x, causal):
        B, S, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, self.nh, 3, H // self.nh).unbind(3)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(H // self.nh))
            y = att.masked_fill(causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, H))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab_size, a.hidden_size)
        self.wpe = nn.Embedding(a.seq_length, a.hidden_size)
        self.blocks = nn.ModuleList(Block(a.hidden_size, a.num_attention_heads, 4 * a.hidden_size)
                                    for _ in range(a.num_layers))
        self.lnf = nn.LayerNorm(a.hidden_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        self.register_buffer("causal", torch.ones(a.seq_length, a.seq_length).triu(1).bool())

    def forward(self, tokens, labels):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for b in self.blocks:
            x = b(x, self.causal)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.reshape(-1))


SDPA = False


def main():
    p = argparse.ArgumentParser()
    for flag in ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "vocab-size",
                 "micro-batch-size", "iters", "warmup"):
        p.add_argument("--" + flag, type=int, required=True)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 master weights)")
    p.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = p.parse_args()
    global SDPA
    SDPA = a.sdpa
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = GPT(a).to(dev)
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
    ms = 1e3 * sum(times) / len(times)
    tps = a.micro_batch_size * a.seq_length / (ms / 1e3)
    print("torch_ms_per_iter=%.1f torch_tokens_per_s=%.1f" % (ms, tps))


if __name__ == "__main__":
    main()
