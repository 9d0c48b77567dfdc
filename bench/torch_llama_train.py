"""PyTorch reference trainer for bench/train_throughput.sh's Llama configs (CPU, fp32 or --bf16
autocast): the same architecture and parameter layout as megatron's Llama options
(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention
--disable-bias-linear --untie-embeddings-and-output-weights): RMSNorm, rotate-half rotary
embeddings on every head channel (base 10000), grouped-query attention with QKV rows per group
[its queries, k, v], SwiGLU (fc1 = [gate; up]), no biases, an untied output layer. The loop,
flags and the printed line are bench/torch_train_loop.py's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_train_loop import causal_attention, causal_mask, parse_args, train


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(h))

    def forward(self, x):  # in fp32 whatever autocast does, as Llama's reference code
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x, cos, sin):
    """x (B, heads, S, HD); cos and sin (S, HD) = the angles t * base^(-2j/HD), repeated twice."""
    a, b = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-b, a), dim=-1) * sin.to(x.dtype)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        H, self.NH, self.NG = a.hidden_size, a.num_attention_heads, a.num_query_groups
        self.HD, self.sdpa = H // self.NH, a.sdpa
        self.norm1, self.norm2 = RMSNorm(H), RMSNorm(H)
        self.qkv = nn.Linear(H, (self.NH + 2 * self.NG) * self.HD, bias=False)
        self.proj = nn.Linear(self.NH * self.HD, H, bias=False)
        self.fc1 = nn.Linear(H, 2 * a.ffn_hidden_size, bias=False)
        self.fc2 = nn.Linear(a.ffn_hidden_size, H, bias=False)

    def forward(self, x, causal, cos, sin):
        B, S, _ = x.shape
        per_group = self.NH // self.NG
        qkv = self.qkv(self.norm1(x)).view(B, S, self.NG, per_group + 2, self.HD)
        q = qkv[:, :, :, :per_group].reshape(B, S, self.NH, self.HD).transpose(1, 2)
        k, v = qkv[:, :, :, per_group].transpose(1, 2), qkv[:, :, :, per_group + 1].transpose(1, 2)
        q, k = rotate_half(q, cos, sin), rotate_half(k, cos, sin)
        y = causal_attention(q, k, v, causal, self.sdpa)
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, self.NH * self.HD))
        gate, up = self.fc1(self.norm2(x)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        H, S = a.hidden_size, a.seq_length
        self.embedding = nn.Embedding(a.vocab_size, H)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.num_layers))
        self.final_norm = RMSNorm(H)
        self.output = nn.Linear(H, a.vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        HD = H // a.num_attention_heads
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD)
        theta = torch.arange(S, dtype=torch.float32)[:, None] * inv_freq[None, :]
        angle = torch.cat((theta, theta), dim=-1)  # S, HD
        self.register_buffer("cos", angle.cos())
        self.register_buffer("sin", angle.sin())
        self.register_buffer("causal", causal_mask(S))

    def forward(self, tokens, labels):
        x = self.embedding(tokens)
        for b in self.blocks:
            x = b(x, self.causal, self.cos, self.sin)
        logits = self.output(self.final_norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.reshape(-1))


if __name__ == "__main__":
    a = parse_args(__doc__, extra=(("num-query-groups", int, None), ("ffn-hidden-size", int, None)))
    a.num_query_groups = a.num_query_groups or a.num_attention_heads
    a.ffn_hidden_size = a.ffn_hidden_size or 4 * a.hidden_size
    torch.manual_seed(0)
    train(Llama(a), a)
