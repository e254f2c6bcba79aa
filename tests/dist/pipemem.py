#!/usr/bin/python3
"""pipemem.py GPIPE_PLAN GPIPE_OUT ONEF1B_PLAN ONEF1B_OUT PP M

Pipeline memory as theory says, from the plans (`--emit=plan`) and the
first-step lines of two runs of the same model on PP stages with M
microbatches: GPipe keeps M microbatches' activations (stash slots) on
every stage; 1F1B keeps PP - s on stage s (at most PP on stage 0); the
measured peak of each stage equals its plan, so stage 0's measured peak
differs between the two by exactly (M - PP) slots."""
import re
import sys


def plan(path):
    slots, stash = [], []
    for line in open(path):
        m = re.search(r"stash (\d+) slots? x ([\d,]+) bytes", line)
        if m:
            slots.append(int(m.group(1)))
            stash.append(int(m.group(2).replace(",", "")))
    return slots, stash


def measured(path):
    text = open(path).read()
    m = re.search(r"planned peak per rank by stage ([\d,/ ]+) bytes, measured ([\d,/ ]+) \(", text)
    if not m:
        sys.exit("no pipeline memory line in " + path)
    nums = lambda s: [int(x.strip().replace(",", "")) for x in s.split("/")]
    return nums(m.group(1)), nums(m.group(2))


def main():
    gp, go, fp, fo, pp, mb = sys.argv[1:7]
    pp, mb = int(pp), int(mb)
    gslots, gstash = plan(gp)
    fslots, fstash = plan(fp)
    want_f = [min(pp - s, mb) for s in range(pp)]
    if gslots != [mb] * pp:
        sys.exit(f"GPipe stash slots {gslots}, expected {[mb] * pp}")
    if fslots != want_f:
        sys.exit(f"1F1B stash slots {fslots}, expected {want_f}")
    if gstash != fstash:
        sys.exit(f"slot sizes differ between the schedules: {gstash} vs {fstash}")
    gplan, gmeas = measured(go)
    fplan, fmeas = measured(fo)
    if gplan != gmeas or fplan != fmeas:
        sys.exit(f"measured peaks differ from the plans: GPipe {gmeas} vs {gplan}, 1F1B {fmeas} vs {fplan}")
    for s in range(pp):
        if gmeas[s] - fmeas[s] != (mb - want_f[s]) * gstash[s]:
            sys.exit(f"stage {s}: GPipe - 1F1B peak = {gmeas[s] - fmeas[s]}, expected "
                     f"{mb - want_f[s]} slots x {gstash[s]}")
    print(f"pp={pp}, {mb} microbatches: stash slots GPipe {gslots}, 1F1B {fslots}; stage 0 measured "
          f"peak {gmeas[0]:,} (GPipe) vs {fmeas[0]:,} (1F1B) bytes, {mb - pp} slots of {gstash[0]:,} apart")


main()
