#!/usr/bin/python3
"""compare.py REF.jsonl RUN.jsonl REF.safetensors RUN.safetensors [TOL [TENSOR_TOL]]

Per-step loss (relative) and every tensor of two checkpoints (absolute,
parameters and optimizer state) of a reference single-rank run and a
distributed run.  Prints the worst differences; exit 1 above TOL (1e-5),
for the tensors above TENSOR_TOL when given."""
import json
import struct
import sys

import numpy as np


def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if l.strip()]


def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(data[s:e], dtype=np.float32).reshape(v["shape"])
    return out


def main():
    tol = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-5
    ttol = float(sys.argv[6]) if len(sys.argv) > 6 else tol
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    if len(a) != len(b) or not a:
        print(f"loss logs have {len(a)} and {len(b)} steps")
        return 1
    rel = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
    A, B = tensors(sys.argv[3]), tensors(sys.argv[4])
    if A.keys() != B.keys():
        print("checkpoints differ in tensors:", sorted(set(A) ^ set(B))[:5])
        return 1
    worst, wk = 0.0, ""
    for k in A:
        if A[k].shape != B[k].shape:
            print(f"{k}: shapes {A[k].shape} and {B[k].shape}")
            return 1
        d = float(np.max(np.abs(A[k] - B[k]))) if A[k].size else 0.0
        if d > worst:
            worst, wk = d, k
    ok = rel <= tol and worst <= ttol
    print(f"{len(a)} steps: loss rel diff {rel:.2e}, tensors max abs diff {worst:.2e} ({wk})"
          f"{'' if ok else '  FAIL (tolerance %g, tensors %g)' % (tol, ttol)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
