"""PyTorch's fused causal attention (scaled_dot_product_attention, bf16) at the shapes of
bench/gpu_attention.cpp, timed the same way (median of 10 after 3 warm-ups), for
bench/gpu_attention.sh.  Usage: torch_attention.py [B S NH HD ...]"""
import sys
import time

import torch
import torch.nn.functional as F


def median_ms(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    ms = []
    for _ in range(10):
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    return sorted(ms)[len(ms) // 2]


def run(B, S, NH, HD):
    q, k, v = (torch.randn(B, NH, S, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(B, NH, S, HD, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * B * NH * S * S * HD  # causal: half of 4 B NH S^2 HD
    f = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    b = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    print(f"B={B} S={S} NH={NH} HD={HD}")
    print(f"  {'torch sdpa bf16':<17} forward {f:8.3f} ms {flops / f / 1e9:7.1f} TFLOP/s   "
          f"backward {b:8.3f} ms {2.5 * flops / b / 1e9:7.1f} TFLOP/s")


if __name__ == "__main__":
    a = [int(x) for x in sys.argv[1:]] or [8, 1024, 12, 64, 4, 1024, 20, 64]
    for i in range(0, len(a), 4):
        run(*a[i:i + 4])
