#!/usr/bin/python3
"""shrink.py REF.ir TP.ir TP REF_MODEL.c ZERO_MODEL.c FULL_MODEL.c DP [ZERO2_MODEL.c ZERO3_MODEL.c]

Memory per rank shrinks as theory says:
- under tp=TP every parameter the IR marks split holds exactly 1/TP of the
  single-rank tensor's elements, and the others are whole;
- under zero=1 at dp=DP each rank's optimizer state is 1/DP of the plain
  data-parallel program's (up to the 64-byte chunk padding);
- under zero=2 its gradients held across the step are 1/DP of the plain
  program's, and under zero=3 its parameters too (up to the padding of each
  bucket to 16·DP elements)."""
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


def persistent(model_c):
    """(params, grads, optimizer) bytes of the arena's persistent part."""
    text = open(model_c).read()
    m = re.search(r"\(params ([\d,]+), grads ([\d,]+), optimizer\s*\*?\s*([\d,]+)\)", text)
    return tuple(int(m.group(k).replace(",", "")) for k in (1, 2, 3))


def optimizer_bytes(model_c):
    return persistent(model_c)[2]


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
    msg = (f"tp={tp}: {nsplit} of {len(ref)} parameters split, each exactly 1/{tp}; "
           f"zero=1 at dp={dp}: optimizer state {zero_o:,} vs {full_o:,} bytes (1/{ratio:.3f})")
    if len(sys.argv) > 9:
        fp, fg, fo = persistent(sys.argv[6])
        for path, stage in ((sys.argv[8], 2), (sys.argv[9], 3)):
            p, g, o = persistent(path)
            checks = [("gradients", g, fg), ("optimizer state", o, fo)]
            if stage == 3:
                checks.append(("parameters", p, fp))
            for what, got, full in checks:
                r = full / got
                if abs(r - dp) > 0.01 * dp:
                    print(f"{what} {got} bytes under zero={stage}, {full} without: ratio {r:.3f}, expected {dp}")
                    bad += 1
            msg += f"; zero={stage}: " + ", ".join(f"{w} {got:,} (1/{full / got:.3f})" for w, got, full in checks)
    print(msg)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
