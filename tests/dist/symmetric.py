#!/usr/bin/python3
"""symmetric.py CHECKPOINT.safetensors

Shampoo's factors in a checkpoint (optimizer.NAME.shampoo.L.<b> and .R.<b>)
are whole and symmetric: the cpu steps update only their upper triangles
and the save fills the lower ones (runtime rt_shampoo_symmetrize).  Each
factor must equal its transpose exactly, and some factor must have nonzero
entries below the diagonal (a lower triangle left at zero would pass the
first test only if the whole factor were diagonal)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import tensors  # noqa: E402


def main():
    T = tensors(sys.argv[1])
    names = [k for k in T if ".shampoo.L." in k or ".shampoo.R." in k]
    if not names:
        print("no Shampoo factors in the checkpoint")
        return 1
    lower = 0
    for k in names:
        M = T[k]
        if M.ndim != 2 or M.shape[0] != M.shape[1]:
            print(f"{k}: shape {M.shape}, not square")
            return 1
        if not np.array_equal(M, M.T):
            i, j = np.unravel_index(np.argmax(np.abs(M - M.T)), M.shape)
            print(f"{k}: not symmetric: [{i},{j}] = {M[i, j]!r}, [{j},{i}] = {M[j, i]!r}")
            return 1
        lower += int(np.count_nonzero(np.tril(M, -1)))
    if lower == 0:
        print("every factor is zero below the diagonal")
        return 1
    print(f"{len(names)} factors symmetric, {lower} nonzero entries below their diagonals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
