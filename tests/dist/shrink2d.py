#!/usr/bin/python3
"""shrink2d.py REF.ir TP2D.ir Q [REF.plan TP2D.plan]

Memory per rank under tp2d=QxQ, from the parameters' local shapes in the
IR: a tensor split over both grid axes (every matrix: SUMMA weights and the
vocabulary table) holds exactly 1/Q² of the single-rank tensor's elements,
one split over the grid row only (biases, norm weights, positions) 1/Q, and
no parameter is left whole.  With the two plans (--emit=plan), the peak
activation bytes per rank are reported too (and must shrink)."""
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
        out[m.group(1)] = (n, m.group(3).count("split("))
    return out


def activations(plan):
    """Peak activation bytes from the plan's memory line (MiB/KiB text)."""
    for line in open(plan):
        m = re.search(r"activations\+inputs ([\d.]+) (B|KiB|MiB|GiB)", line)
        if m:
            return int(float(m.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)])
    raise SystemExit(f"{plan}: no memory line")


def main():
    ref, loc, q = params(sys.argv[1]), params(sys.argv[2]), int(sys.argv[3])
    bad = 0
    count = {0: 0, 1: 0, 2: 0}
    total_ref = total_loc = 0
    for name, (n, _) in ref.items():
        ln, splits = loc[name]
        count[splits] += 1
        total_ref += n
        total_loc += ln
        want = n // q ** splits
        if ln != want:
            print(f"{name}: {ln} elements under tp2d={q}x{q}, expected {want}")
            bad += 1
        if splits == 0:
            print(f"{name}: whole on every grid rank")
            bad += 1
    print(f"tp2d={q}x{q}: {count[2]} matrices hold exactly 1/{q * q}, {count[1]} vectors 1/{q}, "
          f"{count[0]} whole; {total_loc:,} of {total_ref:,} parameter elements per rank "
          f"(1/{total_ref / total_loc:.2f})")
    if len(sys.argv) > 5:
        a_ref, a_loc = activations(sys.argv[4]), activations(sys.argv[5])
        print(f"  activations+inputs {a_loc:,} vs {a_ref:,} bytes per rank (1/{a_ref / a_loc:.2f})")
        bad += a_loc >= a_ref
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
