"""PyTorch reference Llama for the parity test (float64, written for this test).

The file protocol and the AdamW steps are parity_harness.py's; this file is the model.
The architecture is Megatron-Core's GPT with the Llama options: RMSNorm, rotary embeddings on the
sequence index (rotate-half, or interleaved pairs; a rotated fraction of each head; Llama 3.1
frequency scaling), grouped-query attention with QKV rows per group [its queries, k, v], SwiGLU
(fc1 = [gate; up]), optional biases, output layer tied or untied, softmax over the padded vocab.
Before running it checks the parameter names and shapes and the initial values against
Megatron's rules (norms 1, biases 0, N(0, std) weights, std/sqrt(2L) for the output projections).
"""
import math
import sys

import torch
import torch.nn.functional as F

import parity_harness


class Dims:
    """Megatron's derived sizes, read from the config fields by their Megatron names."""

    def __init__(self, m, batch):
        assert m["normalization"] == "RMSNorm" and m["position_embedding_type"] == "rope" and m["swiglu"], \
            "this reference is the Llama family only"
        self.L, self.H, self.NH = m["num_layers"], m["hidden_size"], m["num_attention_heads"]
        self.HD = m["kv_channels"] or self.H // self.NH
        self.NG = m["num_query_groups"] if m["group_query_attention"] else self.NH
        self.F = m["ffn_hidden_size"] or 4 * self.H
        k = m["make_vocab_size_divisible_by"]
        self.V = (m["vocab_size"] + k - 1) // k * k
        self.S, self.B, self.eps = m["seq_length"], batch, m["norm_epsilon"]
        self.bias = m["add_bias_linear"]
        self.qkv_bias = m["add_bias_linear"] or m["add_qkv_bias"]
        self.untied = m["untie_embeddings_and_output_weights"]
        self.qk_norm = m["qk_layernorm"]
        self.std = m["init_method_std"]
        self.rot_dim = int(self.HD * m["rotary_percent"])
        self.m = m

    def param_shapes(self):
        """name -> (shape, init std or the constant it starts at)."""
        H, HD, NH, NG, F, V = self.H, self.HD, self.NH, self.NG, self.F, self.V
        out_std = self.std / math.sqrt(2.0 * self.L)
        p = {"embedding.word_embeddings.weight": ([V, H], ("normal", self.std))}
        for i in range(self.L):
            n = "decoder.layers.%d." % i
            p[n + "input_layernorm.weight"] = ([H], ("const", 1.0))
            p[n + "self_attention.linear_qkv.weight"] = ([(NH + 2 * NG) * HD, H], ("normal", self.std))
            if self.qkv_bias:
                p[n + "self_attention.linear_qkv.bias"] = ([(NH + 2 * NG) * HD], ("const", 0.0))
            p[n + "self_attention.linear_proj.weight"] = ([H, NH * HD], ("normal", out_std))
            if self.qk_norm:
                p[n + "self_attention.q_layernorm.weight"] = ([HD], ("const", 1.0))
                p[n + "self_attention.k_layernorm.weight"] = ([HD], ("const", 1.0))
            p[n + "pre_mlp_layernorm.weight"] = ([H], ("const", 1.0))
            p[n + "mlp.linear_fc1.weight"] = ([2 * F, H], ("normal", self.std))
            p[n + "mlp.linear_fc2.weight"] = ([H, F], ("normal", out_std))
            if self.bias:
                p[n + "self_attention.linear_proj.bias"] = ([H], ("const", 0.0))
                p[n + "mlp.linear_fc1.bias"] = ([2 * F], ("const", 0.0))
                p[n + "mlp.linear_fc2.bias"] = ([H], ("const", 0.0))
        p["decoder.final_layernorm.weight"] = ([H], ("const", 1.0))
        if self.untied:
            p["output_layer.weight"] = ([V, H], ("normal", self.std))
        return p


def inv_frequencies(d):
    """Megatron's RotaryEmbedding: base^(-2j/dim) in fp32; Llama 3.1's scaling when asked."""
    m = d.m
    j = torch.arange(0, d.rot_dim, 2, dtype=torch.float32)
    inv = (1.0 / (torch.tensor(m["rotary_base"], dtype=torch.float32) ** (j / d.rot_dim))).double()
    if not m["use_rope_scaling"]:
        return inv
    factor, low, high, old_len = m["rope_scaling_factor"], 1.0, 4.0, 8192.0
    wavelen = 2 * math.pi / inv
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv / factor + smooth * inv
    return torch.where(wavelen < old_len / high, inv, torch.where(wavelen > old_len / low, inv / factor, blended))


def rope(x, d):
    """x (B, S, heads, HD): the first rot_dim channels of each head turned by angle t * inv_freq."""
    theta = torch.arange(d.S, dtype=torch.float64)[:, None] * inv_frequencies(d)[None, :]  # S, dim/2
    rot, rest = x[..., :d.rot_dim], x[..., d.rot_dim:]
    if d.m["rotary_interleaved"]:
        angle = theta.repeat_interleave(2, dim=-1)  # θ0 θ0 θ1 θ1 ...
        a, b = rot[..., 0::2], rot[..., 1::2]
        turned = torch.stack((-b, a), dim=-1).flatten(-2)
    else:
        angle = torch.cat((theta, theta), dim=-1)  # θ0 .. θ(n-1) θ0 .. θ(n-1)
        a, b = rot.chunk(2, dim=-1)
        turned = torch.cat((-b, a), dim=-1)
    cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]
    return torch.cat((rot * cos + turned * sin, rest), dim=-1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def linear(x, P, name):
    y = x @ P[name + ".weight"].T
    return y + P[name + ".bias"] if name + ".bias" in P else y


def forward(P, d, tokens, labels, mask):
    B, S, NH, NG, HD = d.B, d.S, d.NH, d.NG, d.HD
    per_group = NH // NG
    x = P["embedding.word_embeddings.weight"][tokens]  # B, S, H
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    for i in range(d.L):
        n = "decoder.layers.%d." % i
        h = rms_norm(x, P[n + "input_layernorm.weight"], d.eps)
        qkv = linear(h, P, n + "self_attention.linear_qkv").view(B, S, NG, per_group + 2, HD)
        q = qkv[:, :, :, :per_group].reshape(B, S, NH, HD)  # head g*per_group + r
        k, v = qkv[:, :, :, per_group], qkv[:, :, :, per_group + 1]  # B, S, NG, HD
        if d.qk_norm:  # each head normalized over its HD channels, before RoPE
            q = rms_norm(q, P[n + "self_attention.q_layernorm.weight"], d.eps)
            k = rms_norm(k, P[n + "self_attention.k_layernorm.weight"], d.eps)
        q, k = rope(q, d), rope(k, d)
        k, v = k.repeat_interleave(per_group, dim=2), v.repeat_interleave(per_group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # B, NH, S, HD
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, NH * HD)
        x = x + linear(y, P, n + "self_attention.linear_proj")
        h = rms_norm(x, P[n + "pre_mlp_layernorm.weight"], d.eps)
        gate, up = linear(h, P, n + "mlp.linear_fc1").chunk(2, dim=-1)
        x = x + linear(F.silu(gate) * up, P, n + "mlp.linear_fc2")
    x = rms_norm(x, P["decoder.final_layernorm.weight"], d.eps)
    out = P["output_layer.weight"] if d.untied else P["embedding.word_embeddings.weight"]
    logits = x @ out.T
    losses = F.cross_entropy(logits.reshape(B * S, -1), labels.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return (losses * m).sum() / m.sum(), logits


def check_layout_and_init(d, manifest, P):
    want = d.param_shapes()
    got = {e["name"]: list(e["shape"]) for e in manifest}
    assert set(got) == set(want), "parameter names differ: missing %s, unexpected %s" % (
        sorted(set(want) - set(got)), sorted(set(got) - set(want)))
    for name, (shape, (kind, value)) in want.items():
        assert got[name] == shape, "%s: shape %s, expected %s" % (name, got[name], shape)
        t = P[name].detach()
        if kind == "const":
            assert bool((t == value).all()), "%s should start at %g" % (name, value)
        else:
            assert abs(t.mean().item()) < 0.1 * value and abs(t.std().item() / value - 1) < 0.1, \
                "%s: mean %g std %g, expected N(0, %g)" % (name, t.mean().item(), t.std().item(), value)


def make_model(cfg, manifest, P):
    d = Dims(cfg["model"], cfg["batch"])
    check_layout_and_init(d, manifest, P)
    # Position ids are unused: Megatron's RoPE runs on the sequence index t.
    return lambda tokens, positions, labels, mask: forward(P, d, tokens, labels, mask)


if __name__ == "__main__":
    parity_harness.run(sys.argv[1], make_model)
