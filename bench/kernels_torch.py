#!/usr/bin/python3
"""The PyTorch side of bench/kernels.sh: the operations bench/kernels.c times,
written as a PyTorch 1.13 CPU training loop writes them (nanoGPT style), in
float32, with autograd for the backward.

usage: kernels_torch.py THREADS [B] [REPS] [median|min]
Prints one "name<TAB>ms" line per kernel, the median (or the fastest) of
REPS timed calls after two warm-up calls (BENCH_CLOCK=cpu: process CPU time, for
single-threaded runs on a busy machine). A forward runs with autograd recording, as in
training; a backward is torch.autograd.grad of that one operation.
"""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

D, HEADS, T, V, LAYERS = 512, 8, 256, 256, 8


USE_MIN = False
CLOCK = time.process_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter


def bench(name, fn, pre=None, reps=10):
    times = []
    for i in range(2 + reps):
        if pre:
            pre()
        t0 = CLOCK()
        fn()
        dt = (CLOCK() - t0) * 1e3
        if i >= 2:
            times.append(dt)
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    print(f"{name}\t{times[0] if USE_MIN else med:.4f}", flush=True)


def leaf(*shape, std=1.0):
    return (torch.randn(*shape) * std).requires_grad_(True)


def attention(q, k, v, mask):
    B, T_, H, Dh = q.shape
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # (B,H,T,Dh)
    att = (qh @ kh.transpose(-2, -1)) * (1.0 / math.sqrt(Dh))
    att = att.masked_fill(mask, float("-inf"))
    att = torch.softmax(att, dim=-1)
    return (att @ vh).transpose(1, 2).contiguous()


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    B = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    global USE_MIN
    USE_MIN = len(sys.argv) > 4 and sys.argv[4] == "min"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    N = B * T

    def run(name, fwd, inputs, dout=None, retain=True):
        box = {}

        def f():
            box["y"] = fwd()

        bench(name + " fwd", f, reps=reps)
        y = box["y"]
        g = dout if dout is not None else torch.randn_like(y)
        bench(name + " bwd",
              lambda: torch.autograd.grad(y, inputs, g, retain_graph=retain), reps=reps)

    for name, C, OC, bias in (("qkv", D, 3 * D, True), ("attn proj", D, D, True),
                              ("mlp fc", D, 4 * D, True), ("mlp proj", 4 * D, D, True),
                              ("lm head", D, V, False)):
        x, w = leaf(N, C), leaf(OC, C, std=0.02)
        b = leaf(OC, std=0.1) if bias else None
        ins = (x, w, b) if bias else (x, w)
        run("matmul " + name, lambda: F.linear(x, w, b), ins)

    Dh = D // HEADS
    q, k, v = leaf(B, T, HEADS, Dh), leaf(B, T, HEADS, Dh), leaf(B, T, HEADS, Dh)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    run("attention", lambda: attention(q, k, v, mask), (q, k, v))

    x, w, b = leaf(N, D), leaf(D), leaf(D)
    run("layernorm", lambda: F.layer_norm(x, (D,), w, b, eps=1e-5), (x, w, b))

    x = leaf(N, 4 * D)
    run("gelu", lambda: F.gelu(x, approximate="tanh"), (x,))

    logits = leaf(N, V, std=2.0)
    tgt = torch.randint(0, V, (N,))
    run("cross_entropy", lambda: F.cross_entropy(logits, tgt), (logits,),
        dout=torch.tensor(1.0))

    wte = leaf(V, D)
    tok = torch.randint(0, V, (N,))
    run("embedding", lambda: F.embedding(tok, wte), (wte,))

    per_layer = 12 * D * D + 3 * D + D + 4 * D + D + 4 * D
    n = LAYERS * per_layer + V * D + T * D + 2 * D
    p = torch.nn.Parameter(torch.randn(n) * 0.02)
    p.grad = torch.randn(n) * 0.01
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    bench("adamw (all params)", opt.step, reps=reps)


if __name__ == "__main__":
    main()
