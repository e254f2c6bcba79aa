#!/usr/bin/python3
"""PyTorch reference values for the runtime kernels (test_torch.c).

usage: torch_ref.py IN.safetensors OUT.safetensors

IN holds the inputs test_torch.c generated (F64, I32) plus "__metadata__"
scalars; OUT gets the reference outputs and gradients, computed with autograd
in float64 (and a float32 run where bit-level parity matters: AdamW, RoPE).
Tensor names are "<case>.<what>". Reads and writes safetensors with the few
lines below, since torch 1.13 has no safetensors support.
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F64": np.float64, "F32": np.float32, "I32": np.int32, "I64": np.int64,
          "U16": np.uint16, "U8": np.uint8}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def st_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    meta = header.pop("__metadata__", {})
    data = raw[8 + hlen:]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().cpu().numpy())
        b = a.tobytes()
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def leaf(t):
    return t.clone().detach().requires_grad_(True)


def grads_of(out, dout, *leaves):
    """Backward of L = sum(out * dout); the gradients of the leaves."""
    (out * dout).sum().backward()
    return [x.grad for x in leaves]


def ref_attention(q, k, v, causal):
    B, T, H, D = q.shape
    rep = H // k.shape[2]
    qh = q.permute(0, 2, 1, 3)
    kh = k.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)  # HF repeat_kv order
    vh = v.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)
    s = qh @ kh.transpose(-1, -2) / math.sqrt(D)
    if causal:
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B,H,T)
    o = torch.softmax(s, dim=-1) @ vh
    return o.permute(0, 2, 1, 3).contiguous(), lse


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def ref_rope(x, theta, t0, dtype):
    """HF LlamaRotaryEmbedding + apply_rotary_pos_emb, x is (B,T,H,D)."""
    B, T, H, D = x.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2).to(dtype) / D))
    t = torch.arange(t0, t0 + T).to(dtype)
    freqs = torch.einsum("i,j->ij", t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    return x * cos + rotate_half(x) * sin


def main():
    inp, meta = st_read(sys.argv[1])
    m = lambda k: float(meta[k])
    out = {}

    # layernorm
    x, w, b = leaf(inp["ln.x"]), leaf(inp["ln.w"]), leaf(inp["ln.b"])
    y = F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)
    out["ln.out"] = y
    out["ln.dx"], out["ln.dw"], out["ln.db"] = grads_of(y, inp["ln.dout"], x, w, b)

    # rmsnorm (LLaMA: x * rsqrt(mean(x^2) + eps) * w)
    x, w = leaf(inp["rms.x"]), leaf(inp["rms.w"])
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m("rms.eps")) * w
    out["rms.out"] = y
    out["rms.dx"], out["rms.dw"] = grads_of(y, inp["rms.dout"], x, w)

    # activations
    for name, fn in (("gelu", lambda t: F.gelu(t, approximate="tanh")), ("silu", F.silu),
                     ("softmax", lambda t: torch.softmax(t, dim=-1))):
        x = leaf(inp[name + ".x"])
        y = fn(x)
        out[name + ".out"] = y
        (out[name + ".dx"],) = grads_of(y, inp[name + ".dout"], x)
    x = leaf(inp["swiglu.x"])
    C = x.shape[-1] // 2
    y = F.silu(x[:, :C]) * x[:, C:]
    out["swiglu.out"] = y
    (out["swiglu.dx"],) = grads_of(y, inp["swiglu.dout"], x)

    # linear
    x, w, b = leaf(inp["lin.x"]), leaf(inp["lin.w"]), leaf(inp["lin.b"])
    y = F.linear(x, w, b)
    out["lin.out"] = y
    out["lin.dx"], out["lin.dw"], out["lin.db"] = grads_of(y, inp["lin.dout"], x, w, b)

    # embedding with repeated tokens
    wte = leaf(inp["emb.wte"])
    y = F.embedding(inp["emb.tokens"].long(), wte)
    out["emb.out"] = y
    (out["emb.dwte"],) = grads_of(y, inp["emb.dout"], wte)

    # cross-entropy, mean over non-ignored rows, scaled by dloss
    logits = leaf(inp["ce.logits"])
    loss = F.cross_entropy(logits, inp["ce.targets"].long(), ignore_index=-1)
    (loss * m("ce.dloss")).backward()
    out["ce.loss"] = loss.detach().reshape(1)
    out["ce.dlogits"] = logits.grad

    # attention
    ncases = sum(1 for name in inp if name.startswith("attn") and name.endswith(".q"))
    for case in (f"attn{i}" for i in range(ncases)):
        q, k, v = leaf(inp[case + ".q"]), leaf(inp[case + ".k"]), leaf(inp[case + ".v"])
        o, lse = ref_attention(q, k, v, bool(m(case + ".causal")))
        out[case + ".out"], out[case + ".lse"] = o, lse
        out[case + ".dq"], out[case + ".dk"], out[case + ".dv"] = grads_of(
            o, inp[case + ".dout"], q, k, v)

    # rope, float64 and HF's float32 computation
    x = leaf(inp["rope.x"])
    theta, t0 = m("rope.theta"), int(m("rope.t0"))
    y = ref_rope(x, theta, t0, torch.float64)
    out["rope.out"] = y
    (out["rope.dx"],) = grads_of(y, inp["rope.dout"], x)
    out["rope.out32"] = ref_rope(inp["rope.x"].float(), theta, t0, torch.float32)

    # AdamW: several steps, float64 and float32
    for dt, sfx in ((torch.float64, "64"), (torch.float32, "32")):
        p = inp["adamw.p"].to(dt).clone().requires_grad_(True)
        opt = torch.optim.AdamW([p], lr=m("adamw.lr"), betas=(m("adamw.b1"), m("adamw.b2")),
                                eps=m("adamw.eps"), weight_decay=m("adamw.wd"))
        for g in inp["adamw.g"]:
            p.grad = g.to(dt).clone()
            opt.step()
        st = opt.state[p]
        out["adamw.p" + sfx] = p.detach()
        out["adamw.m" + sfx] = st["exp_avg"]
        out["adamw.v" + sfx] = st["exp_avg_sq"]

    # SGD with momentum and weight decay
    p = inp["sgd.p"].clone().requires_grad_(True)
    opt = torch.optim.SGD([p], lr=m("sgd.lr"), momentum=m("sgd.momentum"),
                          weight_decay=m("sgd.wd"))
    for g in inp["sgd.g"]:
        p.grad = g.clone()
        opt.step()
    out["sgd.p64"] = p.detach()

    # global grad-norm clipping over two buffers
    ps = [torch.zeros_like(inp["clip.g0"], requires_grad=True),
          torch.zeros_like(inp["clip.g1"], requires_grad=True)]
    ps[0].grad, ps[1].grad = inp["clip.g0"].clone(), inp["clip.g1"].clone()
    norm = torch.nn.utils.clip_grad_norm_(ps, m("clip.max_norm"))
    out["clip.norm"] = norm.detach().reshape(1).to(torch.float64)
    out["clip.g0c"], out["clip.g1c"] = ps[0].grad, ps[1].grad

    st_write(sys.argv[2], {k: v.detach() for k, v in out.items()})


if __name__ == "__main__":
    main()
