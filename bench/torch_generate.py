"""PyTorch reference for bench/generate.sh: the same GPT-2 124M / ~125M Llama shapes as
bench/generate.cpp, greedy generation with a KV cache (preallocated per layer, written in
place; attention as matmuls, softmax and a causal mask: Debian's torch 1.13 has no SDPA), under inference_mode on the CPU. Time to first token:
the prompts' forward (causal) and each first token; decode: NEW - 1 steps of one token per
sequence attending over its cache. Best of REPEAT runs. Prints the same line as generate.cpp.
Usage: torch_generate.py gpt2|llama BATCH PROMPT NEW [REPEAT] [--threads N]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):  # torch 1.13 has none
    def __init__(self, h, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(h)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):  # x (B, heads, S, HD); cos, sin (S, HD)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, llama, H, NH, NG, F_):
        super().__init__()
        self.llama, self.NH, self.NG, self.HD = llama, NH, NG, H // NH
        norm = (lambda: RMSNorm(H)) if llama else (lambda: nn.LayerNorm(H))
        self.norm1, self.norm2 = norm(), norm()
        self.qkv = nn.Linear(H, (NH + 2 * NG) * self.HD, bias=not llama)
        self.proj = nn.Linear(H, H, bias=not llama)
        self.fc1 = nn.Linear(H, 2 * F_ if llama else F_, bias=not llama)
        self.fc2 = nn.Linear(F_, H, bias=not llama)

    def forward(self, x, kcache, vcache, past, cos, sin):
        B, S, H = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [self.NH * self.HD, self.NG * self.HD, self.NG * self.HD], dim=-1)
        q = q.view(B, S, self.NH, self.HD).transpose(1, 2)
        k = k.view(B, S, self.NG, self.HD).transpose(1, 2)
        v = v.view(B, S, self.NG, self.HD).transpose(1, 2)
        if self.llama:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        kcache[:, :, past:past + S] = k
        vcache[:, :, past:past + S] = v
        K, V = kcache[:, :, :past + S], vcache[:, :, :past + S]
        if self.NG != self.NH:
            K = K.repeat_interleave(self.NH // self.NG, dim=1)
            V = V.repeat_interleave(self.NH // self.NG, dim=1)
        att = (q @ K.transpose(-1, -2)) * (self.HD ** -0.5)
        if S > 1:  # prefill (past 0): causal; a decode row sees its whole cache
            att = att.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        y = att.softmax(-1) @ V
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, H))
        h = self.fc1(self.norm2(x))
        if self.llama:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.fc2(h)


class Model(nn.Module):
    def __init__(self, name, max_len):
        super().__init__()
        self.llama = name == "llama"
        L, H, NH = 12, 768, 12
        self.V = 32000 if self.llama else 50304
        NG, F_ = (4, 2048) if self.llama else (12, 4 * H)
        self.wte = nn.Embedding(self.V, H)
        self.wpe = None if self.llama else nn.Embedding(1024, H)
        self.blocks = nn.ModuleList(Block(self.llama, H, NH, NG, F_) for _ in range(L))
        self.norm = RMSNorm(H) if self.llama else nn.LayerNorm(H)
        self.out = nn.Linear(H, self.V, bias=False) if self.llama else None
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        HD = H // NH
        inv = 1.0 / 10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD)
        angle = torch.arange(max_len, dtype=torch.float32)[:, None] * inv[None, :]
        angle = torch.cat((angle, angle), dim=-1)
        self.cos, self.sin, self.NG, self.HD = angle.cos(), angle.sin(), NG, HD

    def params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens, caches, past):
        B, S = tokens.shape
        x = self.wte(tokens)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(past, past + S))
        cos, sin = self.cos[past:past + S], self.sin[past:past + S]
        for b, (kc, vc) in zip(self.blocks, caches):
            x = b(x, kc, vc, past, cos, sin)
        x = self.norm(x[:, -1])  # the last row of each sequence samples
        return x @ (self.out.weight if self.out is not None else self.wte.weight).t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["gpt2", "llama"])
    p.add_argument("batch", type=int)
    p.add_argument("prompt", type=int)
    p.add_argument("new", type=int)
    p.add_argument("repeat", type=int, nargs="?", default=3)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Model(a.model, a.prompt + a.new).eval()
    B, P = a.batch, a.prompt
    prompts = torch.tensor([[(b * 7919 + i * 104729) % 32000 for i in range(P)] for b in range(B)])
    ttft = decode = float("inf")
    with torch.inference_mode():
        for _ in range(a.repeat):
            caches = [(torch.empty(B, m.NG, P + a.new, m.HD), torch.empty(B, m.NG, P + a.new, m.HD))
                      for _ in m.blocks]
            t0 = time.perf_counter()
            nxt = m(prompts, caches, 0).argmax(-1, keepdim=True)
            t1 = time.perf_counter()
            for step in range(a.new - 1):
                nxt = m(nxt, caches, P + step).argmax(-1, keepdim=True)
            t2 = time.perf_counter()
            ttft, decode = min(ttft, t1 - t0), min(decode, t2 - t1)
    print(f"torch: model={a.model} params={m.params()} batch={B} prompt={P} new={a.new} "
          f"ttft_ms={ttft * 1e3:.1f} decode_tokens_per_s={B * (a.new - 1) / decode:.1f}")


if __name__ == "__main__":
    main()
