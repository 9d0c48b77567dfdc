"""PyTorch reference trainer for bench/train_throughput.sh (CPU, fp32 or --bf16 autocast) and
bench/gpu_train_throughput.sh (--device cuda, --bf16, --sdpa for PyTorch's fused causal
attention, --compile for torch.compile): the same GPT-2 architecture as megatron's (learned
positions, LayerNorm, GELU MLP, biases, output tied to the embedding); the loop, flags and the
printed line are bench/torch_train_loop.py's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_train_loop import causal_attention, causal_mask, parse_args, train


class Block(nn.Module):
    def __init__(self, h, nh, ffn, sdpa):
        super().__init__()
        self.nh, self.sdpa = nh, sdpa
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x, causal):
        B, S, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, self.nh, 3, H // self.nh).unbind(3)
        y = causal_attention(*(t.transpose(1, 2) for t in (q, k, v)), causal, self.sdpa)
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, H))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab_size, a.hidden_size)
        self.wpe = nn.Embedding(a.seq_length, a.hidden_size)
        self.blocks = nn.ModuleList(Block(a.hidden_size, a.num_attention_heads, 4 * a.hidden_size,
                                          a.sdpa) for _ in range(a.num_layers))
        self.lnf = nn.LayerNorm(a.hidden_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        self.register_buffer("causal", causal_mask(a.seq_length))

    def forward(self, tokens, labels):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for b in self.blocks:
            x = b(x, self.causal)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.reshape(-1))


if __name__ == "__main__":
    a = parse_args(__doc__)
    torch.manual_seed(0)
    train(GPT(a), a)
