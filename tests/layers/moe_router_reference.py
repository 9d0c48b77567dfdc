# PyTorch oracle for tests/layers/moe_router_test.cpp: Megatron-Core's MoE routing rules
# (moe_utils.py: topk_routing_with_score_function, compute_routing_scores_for_aux_loss,
# switch_load_balancing_loss_func, z_loss_func), restated in float64 with autograd for the
# gradient of sum(weights * G) + aux + z, the token counts detached as upstream.
# usage: moe_router_reference.py DIR; DIR/cases.txt has one case a line:
#   T E k softmax|sigmoid pre(0|1) scale aux_coeff z_coeff
# case i reads DIR/i.logits.f32 (T, E), DIR/i.grad.f64 (T, k); writes DIR/i.{experts,weights,losses,dlogits}.f64
# (one interpreter for every case: importing torch is most of the cost)
import sys

import torch


def run_case(d, fields):
    T, E, k = (int(a) for a in fields[0:3])
    score, pre = fields[3], fields[4] == "1"
    scale, aux_coeff, z_coeff = (float(a) for a in fields[5:8])
    logits32 = torch.frombuffer(bytearray(open(f"{d}.logits.f32", "rb").read()), dtype=torch.float32)
    logits = logits32.to(torch.float64).reshape(T, E).requires_grad_(True)
    g = torch.frombuffer(bytearray(open(f"{d}.grad.f64", "rb").read()), dtype=torch.float64)
    g = g.reshape(T, k)

    if score == "softmax":
        if pre:
            probs_all = torch.softmax(logits, dim=-1)
            weights, experts = torch.topk(probs_all, k, dim=1)
        else:
            top, experts = torch.topk(logits, k, dim=1)
            weights = torch.softmax(top, dim=-1)
        aux_scores = torch.softmax(logits, dim=-1)
    else:
        sig = torch.sigmoid(logits)
        top, experts = torch.topk(sig, k, dim=1)
        weights = top / (top.sum(dim=-1, keepdim=True) + 1e-20) if k > 1 else top
        aux_scores = sig / (sig.sum(dim=-1, keepdim=True) + 1e-20)
    weights = weights * scale

    _, aux_top = torch.topk(aux_scores.detach(), k, dim=1)
    routing_map = torch.zeros(T, E, dtype=torch.float64).scatter(1, aux_top, 1.0)
    tokens_per_expert = routing_map.sum(dim=0)  # a constant: no graph through the top-k
    aux = (aux_scores.sum(dim=0) * tokens_per_expert).sum() * (E * aux_coeff / (k * T * T))
    z = z_coeff * torch.logsumexp(logits, dim=-1).square().mean()

    objective = (weights * g).sum() + aux + z
    objective.backward()

    def dump(name, t):
        t.detach().to(torch.float64).contiguous().numpy().tofile(f"{d}.{name}.f64")

    dump("experts", experts)
    dump("weights", weights)
    dump("losses", torch.stack([aux.detach(), z.detach()]))
    dump("dlogits", logits.grad)


def main():
    d = sys.argv[1]
    with open(f"{d}/cases.txt") as f:
        for i, line in enumerate(f):
            run_case(f"{d}/{i}", line.split())


if __name__ == "__main__":
    main()
