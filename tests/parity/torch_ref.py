#!/usr/bin/python3
"""PyTorch reference models for the PyTorch-parity tests.

Each model is written by hand in PyTorch from the DSL sample it mirrors
(samples/mlp.shard, samples/gpt.shard, samples/llama.shard), with the same
parameter names as shardc's checkpoints, so the weights shardc saves load
here unchanged.  The training loop uses torch.optim.AdamW / SGD, the same
learning-rate schedule and global-norm clipping as the generated program.

Usage (see tests/parity.sh):
  torch_ref.py --model gpt --init init.safetensors --batches batches.i32 \
      --steps 20 --micro 4 --seq 64 --mb 1 --lr 1e-3 ... --losses out.txt \
      --final final.safetensors
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "U16": np.uint16}


def read_safetensors(path):
    """A minimal safetensors reader (torch 1.13 has none)."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(data[base + lo:base + hi], dtype=DTYPES[info["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


# ---- models: functional, parameters looked up by their shardc names ----

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layernorm(p, name, x, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), p[name + ".weight"], p[name + ".bias"], eps)


def rmsnorm(p, name, x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * p[name + ".weight"]


def linear(p, name, x, bias=True):
    y = x @ p[name + ".weight"].t()
    return y + p[name + ".bias"] if bias else y


def rope(x, theta=10000.0):
    # x: (B, T, H, D); GPT-NeoX / HF Llama convention: rotate the two halves.
    B, T, H, D = x.shape
    inv = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2.0 / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)[None, :, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    rot = torch.cat([-x2, x1], -1)
    return x * cos + rot * sin


def attention(p, name, x, heads, kv_heads, causal=True, bias=True, use_rope=False):
    B, T, C = x.shape
    D = C // heads
    qkv = linear(p, name + ".qkv", x, bias)
    q = qkv[..., : heads * D].reshape(B, T, heads, D)
    k = qkv[..., heads * D:(heads + kv_heads) * D].reshape(B, T, kv_heads, D)
    v = qkv[..., (heads + kv_heads) * D:].reshape(B, T, kv_heads, D)
    if use_rope:
        q, k = rope(q), rope(k)
    rep = heads // kv_heads
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
    y = att.softmax(-1) @ v
    y = y.transpose(1, 2).reshape(B, T, heads * D)
    return linear(p, name + ".proj", y, bias)


def gpt(p, cfg, tokens, targets):
    T = tokens.shape[1]
    x = p["embed.weight"][tokens] + p["pos.weight"][:T]
    for i in range(cfg["layers"]):
        b = f"blocks.{i}"
        x = x + attention(p, b + ".attn", layernorm(p, b + ".ln_1", x), cfg["heads"], cfg["heads"])
        h = linear(p, b + ".mlp.fc", layernorm(p, b + ".ln_2", x))
        x = x + linear(p, b + ".mlp.proj", gelu_tanh(h))
    logits = layernorm(p, "ln", x) @ p["embed.weight"].t()
    if "classes" in cfg:  # a padded vocabulary: the first `classes` columns only
        logits = logits[..., :cfg["classes"]]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def llama(p, cfg, tokens, targets):
    x = p["embed.weight"][tokens]
    for i in range(cfg["layers"]):
        b = f"blocks.{i}"
        x = x + attention(p, b + ".attn", rmsnorm(p, b + ".norm_1", x), cfg["heads"],
                          cfg["kv_heads"], bias=False, use_rope=True)
        h = rmsnorm(p, b + ".norm_2", x)
        g = F.silu(linear(p, b + ".mlp.gate", h, False)) * linear(p, b + ".mlp.up", h, False)
        x = x + linear(p, b + ".mlp.down", g, False)
    logits = linear(p, "lm_head", rmsnorm(p, "norm", x), False)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def mlp(p, cfg, x, labels):
    h = F.relu(linear(p, "dense_1.linear", x))
    h = F.relu(linear(p, "dense_2.linear", h))
    return F.cross_entropy(linear(p, "linear", h), labels.long())


MODELS = {"gpt": gpt, "llama": llama, "mlp": mlp}


class Shampoo:
    """shardc's shampoo(...) (docs/language.md), written independently of the
    C kernels: per parameter, blocks of at most block x block of the full
    tensor (2-D tensors with both dims > 1; others use the grafting method
    alone), factors L = b2 L + (1-b2) G G^T and R = b2 R + (1-b2) G^T G
    every step, roots (L + eps I)^-1/4 in float64 at steps start, start +
    every, ... (0-based) from the factors before that step's update (with
    stagger: every block's at start, then each block's at the steps of its
    phase), the
    direction L^-1/4 G R^-1/4 rescaled per block
    to the grafting direction's norm, momentum (beta1, bias-corrected) and
    decoupled weight decay."""

    def __init__(self, params, decay, a):
        self.params, self.decay, self.a = params, decay, a
        self.state = {}
        self.phase = self.phases(params, a) if a.stagger else None

    @staticmethod
    def phases(params, a):
        """stagger = true: each block's phase in [0, precondition_every), a
        function of the block alone (docs/language.md): every block of every
        preconditioned tensor, ordered by r^3 + c^3 (largest first), then the
        parameter name, then the block number b = i * ceil(C / block) + j;
        each to the phase with the least sum so far (the lowest on a tie)."""
        B, k = a.block, a.precondition_every
        blocks = []
        for name, p in params.items():
            if p.dim() == 2 and p.shape[0] > 1 and p.shape[1] > 1:
                R, C = p.shape
                nbc = (C + B - 1) // B
                for i in range(0, R, B):
                    for j in range(0, C, B):
                        r, c = min(B, R - i), min(B, C - j)
                        blocks.append((-(r ** 3 + c ** 3), name.encode(), (i // B) * nbc + j // B, (i, j)))
        blocks.sort()
        load, phase = [0] * k, {}
        for cost, name, _, key in blocks:
            ph = min(range(k), key=lambda x: (load[x], x))
            phase[(name.decode(), key)] = ph
            load[ph] -= cost
        return phase

    def due(self, s0, name, key):
        """Whether block `key` of `name` recomputes its roots at 0-based step s0."""
        a = self.a
        o = s0 - a.start_preconditioning
        if o < 0:
            return False
        if o == 0:
            return True
        if self.phase is None or a.precondition_every == 1:
            return o % a.precondition_every == 0
        return o % a.precondition_every == self.phase[(name, key)]

    @staticmethod
    def root_eigh(L, eps):
        lam, Q = torch.linalg.eigh(L.double())
        s = 1.0 / torch.sqrt(torch.sqrt(lam.clamp(min=0) + eps))
        return ((Q * s) @ Q.T).float()

    @staticmethod
    def root_newton(L, eps):
        A = L.double() + eps * torch.eye(L.shape[0], dtype=torch.float64)
        k = A.shape[0]
        eye = torch.eye(k, dtype=torch.float64)
        z = 5.0 / (2.0 * float(torch.sqrt((A * A).sum())))
        X = eye * z ** 0.25
        M = z * A
        err = float((M - eye).abs().max())
        it = 0
        while it < 100 and err > 1e-6:
            T = 1.25 * eye - 0.25 * M
            S2 = (T @ T) @ (T @ T)
            Mn = S2 @ M
            nerr = float((Mn - eye).abs().max())
            if nerr > err * 1.2:
                break
            X, M, err = X @ T, Mn, nerr
            it += 1
        return X.float()

    def graft_dir(self, g, v, t):
        a = self.a
        if a.graft == "adam":
            bc2 = 1 - a.beta2 ** t
            return g / ((v / bc2).sqrt() + a.graft_eps)
        if a.graft == "adagrad":
            return g / (v.sqrt() + a.graft_eps)
        return g

    @torch.no_grad()
    def step(self, lr, t):
        a = self.a
        s0 = t - 1
        pre = s0 >= a.start_preconditioning
        for name, p in self.params.items():
            g = p.grad
            st = self.state.setdefault(name, {})
            if a.graft != "sgd":
                v = st.setdefault("graft", torch.zeros_like(p))
                if a.graft == "adam":
                    v.mul_(a.beta2).addcmul_(g, g, value=1 - a.beta2)
                else:
                    v.addcmul_(g, g, value=1)
            else:
                v = None
            d = self.graft_dir(g, v, t)
            if p.dim() == 2 and p.shape[0] > 1 and p.shape[1] > 1:
                B = a.block
                R, C = p.shape
                d = d.clone()
                for i in range(0, R, B):
                    for j in range(0, C, B):
                        key = (i, j)
                        G = g[i:i + B, j:j + B]
                        r, c = G.shape
                        if key not in st:
                            st[key] = [torch.zeros(r, r), torch.zeros(c, c),
                                       torch.zeros(r, r), torch.zeros(c, c)]
                        f = st[key]
                        if self.due(s0, name, key):  # from the factors the steps before left
                            root = self.root_newton if a.root == "newton" else self.root_eigh
                            f[2], f[3] = root(f[0], a.eps), root(f[1], a.eps)
                        f[0] = torch.addmm(f[0], G, G.T, beta=a.beta2, alpha=1 - a.beta2)
                        f[1] = torch.addmm(f[1], G.T, G, beta=a.beta2, alpha=1 - a.beta2)
                        if pre:
                            D = (f[2] @ G) @ f[3]
                            ng = float(d[i:i + B, j:j + B].double().pow(2).sum())
                            nd = float(D.double().pow(2).sum())
                            sc = math.sqrt(ng) / math.sqrt(nd) if nd > 0 else 0.0
                            d[i:i + B, j:j + B] = D * sc
            if a.beta1 > 0:
                m = st.setdefault("momentum", torch.zeros_like(p))
                m.mul_(a.beta1).add_(d, alpha=1 - a.beta1)
                u = m / (1 - a.beta1 ** t)
            else:
                u = d
            wd = a.weight_decay if name in self.decay else 0.0
            p.mul_(1 - lr * wd)
            p.add_(u, alpha=-lr)


class Adafactor:
    """shardc's adafactor(...) (docs/language.md; Shazeer & Stern 2018):
    factored second moments for 2-D tensors, beta2(t) = 1 - t^-decay_rate,
    the update's RMS clipped to clip_threshold, optional momentum beta1,
    decoupled weight decay, the schedule's learning rate."""

    def __init__(self, params, decay, a):
        self.params, self.decay, self.a = params, decay, a
        self.state = {}

    @torch.no_grad()
    def step(self, lr, t):
        a = self.a
        rho = 1 - t ** (-a.decay_rate)
        for name, p in self.params.items():
            g = p.grad
            st = self.state.setdefault(name, {})
            g2 = g * g + a.eps
            if p.dim() == 2:
                R, C = p.shape
                r = st.setdefault("row", torch.zeros(R))
                c = st.setdefault("col", torch.zeros(C))
                r.mul_(rho).add_((g2.double().sum(1) / C).float(), alpha=1 - rho)
                c.mul_(rho).add_((g2.double().sum(0) / R).float(), alpha=1 - rho)
                rmean = float((r.double().sum() / R).float())
                rmean_t = torch.tensor(rmean, dtype=torch.float32)
                u = g * ((1 / torch.sqrt(r / rmean_t))[:, None] * (1 / torch.sqrt(c))[None, :])
            else:
                v = st.setdefault("v", torch.zeros_like(p))
                v.mul_(rho).add_(g2, alpha=1 - rho)
                u = g / torch.sqrt(v)
            rms = math.sqrt(float(u.double().pow(2).sum()) / u.numel())
            u = u / max(rms / a.clip_threshold, 1.0)
            if a.beta1 > 0:
                m = st.setdefault("momentum", torch.zeros_like(p))
                m.mul_(a.beta1).add_(u, alpha=1 - a.beta1)
                u = m
            wd = a.weight_decay if name in self.decay else 0.0
            p.mul_(1 - lr * wd)
            p.add_(u, alpha=-lr)


def lr_at(step, a):
    """0-based step; linear warmup then cosine to min_lr_ratio (or constant)."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.schedule == "constant" or a.steps <= a.warmup:
        return a.lr
    ratio = (step - a.warmup) / (a.steps - a.warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return a.lr * (a.min_lr_ratio + coeff * (1.0 - a.min_lr_ratio))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--config", default="{}", help="JSON: layers, heads, kv_heads")
    ap.add_argument("--init", required=True)
    ap.add_argument("--batches", required=True, help="int32 LE: per step, per microbatch: inputs then targets")
    ap.add_argument("--input-shape", required=True, help="e.g. 4,64 (per microbatch)")
    ap.add_argument("--input-float", type=int, default=0, help="inputs are f32 features of this width")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--mb", type=int, default=1)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--schedule", default="cosine")
    ap.add_argument("--min-lr-ratio", type=float, default=0.0)
    ap.add_argument("--total-steps", type=int, default=0, help="schedule length (train block steps)")
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--precondition-every", type=int, default=10)
    ap.add_argument("--start-preconditioning", type=int, default=20)
    ap.add_argument("--graft", default="adam")
    ap.add_argument("--root", default="eigh")
    ap.add_argument("--graft-eps", type=float, default=1e-8)
    ap.add_argument("--stagger", type=int, default=1, help="shampoo: roots staggered over the steps")
    ap.add_argument("--decay-rate", type=float, default=0.8)
    ap.add_argument("--clip-threshold", type=float, default=1.0)
    ap.add_argument("--losses", required=True)
    ap.add_argument("--final", default="")
    a = ap.parse_args(argv)
    a.steps_run = a.steps
    if a.total_steps:
        a.steps = a.total_steps
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    cfg = json.loads(a.config)
    params = {k: v.float().requires_grad_(True) for k, v in read_safetensors(a.init).items()
              if not k.startswith("optimizer.")}
    decay = [v for k, v in sorted(params.items()) if v.dim() >= 2]
    nodecay = [v for k, v in sorted(params.items()) if v.dim() < 2]
    blocked = a.optimizer in ("shampoo", "adafactor")
    if blocked:
        cls = Shampoo if a.optimizer == "shampoo" else Adafactor
        opt = cls(params, {k for k, v in params.items() if v.dim() >= 2}, a)
    elif a.optimizer == "adamw":
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                 {"params": nodecay, "weight_decay": 0.0}],
                                lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    else:
        opt = torch.optim.SGD([{"params": decay, "weight_decay": a.weight_decay},
                               {"params": nodecay, "weight_decay": 0.0}],
                              lr=a.lr, momentum=a.momentum)
    shape = [int(s) for s in a.input_shape.split(",")]
    n_in = int(np.prod(shape)) * (a.input_float or 1)
    n_tg = int(np.prod(shape))
    raw = np.fromfile(a.batches, dtype="<i4")
    per_mb = n_in + n_tg
    need = a.steps_run * a.mb * per_mb
    if raw.size < need:
        sys.exit(f"torch_ref: {a.batches} holds {raw.size} ints, need {need}")
    f = MODELS[a.model]
    losses = []
    pos = 0
    for step in range(a.steps_run):
        if blocked:
            for v in params.values():
                if v.grad is not None:
                    v.grad.zero_()
        else:
            for g in opt.param_groups:
                g["lr"] = lr_at(step, a)
            opt.zero_grad(set_to_none=False)
        total = 0.0
        for _ in range(a.mb):
            chunk = raw[pos:pos + per_mb]
            pos += per_mb
            if a.input_float:
                inp = torch.from_numpy(chunk[:n_in].copy().view(np.float32).reshape(shape + [a.input_float]))
            else:
                inp = torch.from_numpy(chunk[:n_in].astype(np.int64).reshape(shape))
            tgt = torch.from_numpy(chunk[n_in:].astype(np.int64).reshape(shape))
            loss = f(params, cfg, inp, tgt)
            (loss / a.mb).backward()
            total += loss.item() / a.mb
        if a.clip > 0:
            gn = torch.nn.utils.clip_grad_norm_(list(params.values()), a.clip)
            if os.environ.get("PARITY_DEBUG"): print("grad norm", step + 1, float(gn))
        if blocked:
            opt.step(lr_at(step, a), step + 1)
        else:
            opt.step()
        losses.append(total)
    with open(a.losses, "w") as out:
        for l in losses:
            out.write(f"{l:.9g}\n")
    if a.final:
        np.savez(a.final, **{k: v.detach().numpy() for k, v in params.items()})


if __name__ == "__main__":
    main()
