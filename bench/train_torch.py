#!/usr/bin/python3
"""The PyTorch side of bench/train.sh: the GPT of bench/gpt.shard as a
PyTorch 1.13 CPU training loop (nanoGPT style: pre-norm blocks, causal
attention written out, tanh GELU, tied embedding, AdamW), float32.

usage: train_torch.py THREADS STEPS [B]
Prints "step_ms<TAB>X" for each step after the first (warm-up).
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, D, HEADS, LAYERS = 256, 256, 512, 8, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def attn(self, x):
        B, T_, _ = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (t.view(B, T_, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // HEADS))
        att = torch.softmax(att.masked_fill(self.mask[:T_, :T_], float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T_, D))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def main():
    threads, steps = int(sys.argv[1]), int(sys.argv[2])
    B = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    data = torch.randint(0, V, (steps + 1, B, T + 1))
    for s in range(steps + 1):
        t0 = time.perf_counter()
        loss = model(data[s, :, :-1], data[s, :, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        if s > 0:
            print(f"step_ms\t{dt:.2f}", flush=True)


if __name__ == "__main__":
    main()
