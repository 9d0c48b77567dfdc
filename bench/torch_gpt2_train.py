"""PyTorch reference trainer for bench/train_throughput.sh: the same GPT-2 architecture, fp32,
AdamW, random tokens (throughput does not depend on the data). Prints one line:
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
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(H // self.nh))
        att = att.masked_fill(causal, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, S, H))
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
        pos = torch.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(pos)
        for b in self.blocks:
            x = b(x, self.causal)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    for flag in ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "vocab-size",
                 "micro-batch-size", "iters", "warmup", "threads"):
        p.add_argument("--" + flag, type=int, required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    times = []
    for it in range(a.warmup + a.iters):
        tokens = torch.randint(0, a.vocab_size, (a.micro_batch_size, a.seq_length + 1))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1e3 * sum(times) / len(times)
    tps = a.micro_batch_size * a.seq_length / (ms / 1e3)
    print("torch_ms_per_iter=%.1f torch_tokens_per_s=%.1f" % (ms, tps))


if __name__ == "__main__":
    main()
