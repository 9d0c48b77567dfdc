"""Megatron-LM's pipeline order, restated from reading megatron/core/pipeline_parallel/schedules.py
(get_pp_rank_microbatches, get_schedule_table, forward_backward_pipelining_with_interleaving /
_without_interleaving / forward_backward_no_pipelining): it replays the schedule loops with
per-chunk FIFO queues of pending forwards, the way upstream pops input/output tensors, and
records which (chunk, micro-batch) each step touches.

usage: megatron_schedule_reference.py P v M [group]   (group 0 or absent: P)
prints one line per pipeline rank: "<warm-up forwards> <step> <step> ...", a step being
F<chunk>.<micro-batch> or B<chunk>.<micro-batch>.
"""
import sys
from collections import deque


def virtual_microbatch_table(M, v, group):
    # Micro-batches walk the chunks in runs of `group`; the final run takes what is left.
    table = []
    start = 0
    while start < M:
        stop = M if start + group >= M else start + group
        for chunk in range(v):
            table += [(chunk, mb) for mb in range(start, stop)]
        start += group
    return table


def warmup_count(P, v, M, group, rank):
    total = M * v
    if P == 1:
        n = 0
    elif v == 1:
        n = P - rank - 1
    else:
        n = (P - rank - 1) * 2 + (v - 1) * group
    return total if n >= total else n


def rank_steps(P, v, M, group, rank):
    steps = []
    pending = [deque() for _ in range(v)]  # forwards waiting for their backward, per chunk
    if P == 1:  # no pipelining: each micro-batch forward then backward
        for mb in range(M):
            steps += [("F", 0, mb), ("B", 0, mb)]
        return 0, steps
    if v == 1:
        table = [(0, mb) for mb in range(M)]
    else:
        table = virtual_microbatch_table(M, v, group)
    total = len(table)
    warmup = warmup_count(P, v, M, group, rank)

    def forward(k):
        chunk, mb = table[k]
        pending[chunk].append(mb)
        steps.append(("F", chunk, mb))

    def backward(k):
        # The chunk of virtual step k, counted from the last one; the micro-batch is the oldest
        # forward of that chunk still waiting.
        chunk = v - 1 - table[k][0]
        steps.append(("B", chunk, pending[chunk].popleft()))

    for k in range(warmup):
        forward(k)
    for k in range(total - warmup):
        forward(k + warmup)
        backward(k)
    for k in range(total - warmup, total):
        backward(k)
    assert all(len(q) == 0 for q in pending)
    return warmup, steps


def main():
    P, v, M = (int(a) for a in sys.argv[1:4])
    group = int(sys.argv[4]) if len(sys.argv) > 4 and int(sys.argv[4]) > 0 else P
    for rank in range(P):
        warmup, steps = rank_steps(P, v, M, group, rank)
        print(warmup, " ".join(f"{d}{c}.{mb}" for d, c, mb in steps))


if __name__ == "__main__":
    main()
