"""PyTorch reference trainer for bench/train_throughput.sh's Llama configs (CPU, fp32 or --bf16
autocast): the same architecture and parameter layout as megatron's Llama options
(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention
--disable-bias-linear --untie-embeddings-and-output-weights; with --num-experts, Megatron's MoE
MLP in every layer, as --num-experts/--moe-router-topk/--moe-ffn-hidden-size/--moe-aux-loss-coeff
make ours): RMSNorm, rotate-half rotary
embeddings on every head channel (base 10000), grouped-query attention with QKV rows per group
[its queries, k, v], SwiGLU (fc1 = [gate; up]), no biases, an untied output layer. The loop,
flags and the printed line are bench/torch_train_loop.py's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_train_loop import causal_attention, causal_mask, parse_args, train


class MoE(nn.Module):
    """Megatron's MoE MLP as one writes it in eager PyTorch: a router (E x H), softmax over the
    top-k logits, the switch load-balancing loss (coeff E sum_e f_e p_e), tokens sorted by
    expert (a stable argsort), each expert a SwiGLU MLP on its contiguous rows, and the weighted
    outputs added back with index_add_. `aux` collects the micro-batch's load-balancing loss."""

    def __init__(self, H, F, E, k, coeff):
        super().__init__()
        self.E, self.k, self.coeff = E, k, coeff
        self.router = nn.Linear(H, E, bias=False)
        self.fc1 = nn.ModuleList(nn.Linear(H, 2 * F, bias=False) for _ in range(E))
        self.fc2 = nn.ModuleList(nn.Linear(F, H, bias=False) for _ in range(E))
        self.aux = []

    def forward(self, x):
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        logits = self.router(t).float()
        top, idx = logits.topk(self.k, dim=-1)
        weights = top.softmax(-1)
        flat = idx.flatten()
        counts = torch.bincount(flat, minlength=self.E)
        if self.coeff > 0:
            p = logits.softmax(-1).mean(0)
            f = counts.float() / flat.numel()
            self.aux.append(self.coeff * self.E * (f * p).sum())
        order = flat.argsort(stable=True)
        token = order // self.k
        rows = t[token]
        outs = []
        for e, xe in enumerate(rows.split(counts.tolist())):
            gate, up = self.fc1[e](xe).chunk(2, dim=-1)
            outs.append(self.fc2[e](F.silu(gate) * up))
        y = torch.cat(outs) * weights.flatten()[order].unsqueeze(1).to(t.dtype)
        return torch.zeros_like(t).index_add_(0, token, y.to(t.dtype)).view(shape)


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
        if a.num_experts:
            self.moe = MoE(H, a.moe_ffn_hidden_size or a.ffn_hidden_size, a.num_experts,
                           a.moe_router_topk, a.moe_aux_loss_coeff)
        else:
            self.moe = None
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
        if self.moe is not None:
            return x + self.moe(self.norm2(x))
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
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.reshape(-1))
        for b in self.blocks:
            if b.moe is not None:
                loss = loss + sum(b.moe.aux)
                b.moe.aux.clear()
        return loss


if __name__ == "__main__":
    a = parse_args(__doc__, extra=(("num-query-groups", int, None), ("ffn-hidden-size", int, None),
                                   ("num-experts", int, 0), ("moe-router-topk", int, 2),
                                   ("moe-ffn-hidden-size", int, 0),
                                   ("moe-aux-loss-coeff", float, 0.0)))
    a.num_query_groups = a.num_query_groups or a.num_attention_heads
    a.ffn_hidden_size = a.ffn_hidden_size or 4 * a.hidden_size
    torch.manual_seed(0)
    train(Llama(a), a)
