#!/usr/bin/python3
"""compare_params.py REF.jsonl RUN.jsonl REF.safetensors RUN.safetensors

Shampoo's and Adafactor's distributed runs (tests/dist/shampoo_lib.sh):
per-step losses within 1e-4 relative and every parameter within 1e-4
absolute of the reference run (the optimizer state is not compared: its
layout follows the placement)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import losses, tensors  # noqa: E402


def main():
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    if len(a) != len(b) or not a:
        print(f"loss logs have {len(a)} and {len(b)} steps")
        return 1
    rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    A, B = tensors(sys.argv[3]), tensors(sys.argv[4])
    if A.keys() != B.keys():
        print("checkpoints hold different tensors:", sorted(A.keys() ^ B.keys())[:4])
        return 1
    w = max(float(abs(A[k] - B[k]).max()) for k in A if not k.startswith("optimizer."))
    print(f"loss rel {rel:.2e}, parameters {w:.2e}")
    return 0 if rel <= 1e-4 and w <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
