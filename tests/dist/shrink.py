#!/usr/bin/python3
"""shrink.py REF.ir TP.ir TP REF_MODEL.c ZERO_MODEL.c FULL_MODEL.c DP

Memory per rank shrinks as theory says:
- under tp=TP every parameter the IR marks split holds exactly 1/TP of the
  single-rank tensor's elements, and the others are whole;
- under zero=1 at dp=DP each rank's optimizer state is 1/DP of the plain
  data-parallel program's (up to the 64-byte chunk padding)."""
import re
import sys


def params(path):
    out = {}
    for line in open(path):
        m = re.match(r"\s*param @(\S+) : \w+\[([^\]]*)\](.*)", line)
        if not m:
            continue
        n = 1
        for d in m.group(2).split(","):
            n *= int(d.split("=")[-1])
        out[m.group(1)] = (n, "split(" in m.group(3))
    return out


def optimizer_bytes(model_c):
    text = open(model_c).read()
    m = re.search(r"\(params ([\d,]+), grads ([\d,]+), optimizer\s*\*?\s*([\d,]+)\)", text)
    return int(m.group(3).replace(",", ""))


def main():
    ref, tp_ir, tp = params(sys.argv[1]), params(sys.argv[2]), int(sys.argv[3])
    bad = 0
    nsplit = 0
    for name, (n, _) in ref.items():
        ln, split = tp_ir[name]
        want = n // tp if split else n
        nsplit += split
        if ln != want:
            print(f"{name}: {ln} elements under tp={tp}, expected {want}")
            bad += 1
    full_o, zero_o, dp = optimizer_bytes(sys.argv[6]), optimizer_bytes(sys.argv[5]), int(sys.argv[7])
    ratio = full_o / zero_o
    if abs(ratio - dp) > 0.01 * dp:
        print(f"optimizer state {zero_o} bytes under zero=1, {full_o} without: ratio {ratio:.3f}, expected {dp}")
        bad += 1
    print(f"tp={tp}: {nsplit} of {len(ref)} parameters split, each exactly 1/{tp}; "
          f"zero=1 at dp={dp}: optimizer state {zero_o:,} vs {full_o:,} bytes (1/{ratio:.3f})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
