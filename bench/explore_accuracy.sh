#!/usr/bin/env bash
# Cost-model accuracy on this machine: for plans of bench/models/gpt-bench.shard
# on 4 and 8 MPI ranks (dp, tp, tp2d, sp, pp with each schedule, ZeRO), the
# predicted step time (shardc compile --emit=plan --profile, after shardc
# calibrate --np N) against the measured one (the fastest step of steps
# 2..STEPS of DIR/train: on a machine shared with other work the fastest
# step is the least disturbed one, as calibrate keeps its fastest trial;
# each plan runs REPEAT times, default 2: REPEAT passes over all the plans,
# so a plan's runs are minutes apart), and the
# planned peak memory per rank against the runtime's measured high-water
# mark.  Prints a table, then MAPE and the Spearman rank correlation, for
# all plans, per rank count, and for the original 18.
#   [REPEAT=N] [SHARDC_PROFILE_DIR=D] bench/explore_accuracy.sh [BUILD_DIR] [STEPS]
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
steps="${2:-12}"
repeat="${REPEAT:-2}"   # runs per plan: the fastest step of all of them
bin="$build/shardc"
unset OPENBLAS_CORETYPE   # what users get
model=bench/models/gpt-bench.shard
work=$(mktemp -d /tmp/shardc-acc.XXXXXX)
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)

# The first 12 + 6 plans are the original set (its figures are printed
# apart); the others add what the search also varies and what moves a
# step's time most: recompute, microbatches of one sequence, ZeRO-3, wider
# tensor parallelism.
plans4=("dp=4" "dp=2,tp=2" "tp=4" "dp=2,tp=2,sp=megatron" "tp2d=2x2" "dp=2,pp=2,mb=4"
        "pp=4,mb=8" "dp=2,sp=ring:2" "dp=4,zero=2" "tp=2,pp=2,schedule=gpipe,mb=4"
        "dp=2,pp=2,schedule=interleaved:2,mb=4" "dp=4,mb=4"
        "dp=4,recompute=full" "tp=4,recompute=selective" "dp=4,mb=8" "dp=2,pp=2,mb=16"
        "dp=4,zero=3" "tp2d=2x2,recompute=full")
plans8=("dp=8" "dp=2,tp=4" "dp=2,tp=2,pp=2,mb=4" "dp=2,tp2d=2x2" "dp=4,sp=ring:2,zero=1"
        "dp=2,pp=4,mb=4"
        "tp=8" "dp=8,mb=4" "dp=2,tp=4,recompute=full" "dp=4,tp=2,sp=megatron" "dp=8,zero=3"
        "dp=2,tp2d=2x2,recompute=full")
orig4=12
orig8=6

# The host's speed before and after (a one-rank calibration, 15 s): on a
# shared machine it drifts over minutes, which moves the measured steps
# away from a calibration taken before them; the two probes say whether
# it held still over the run.
probe() {
  "$bin" calibrate --np 1 --rounds 1 -o "$work/probe$1.json" 2>&1 |
    sed -n 's/.*SGEMM up to \([0-9.]*\) GFLOP\/s.*memory-bound \([0-9.]*\) GB\/s.*/\1 \2/p'
}
probe0=$(probe 0)
rows="$work/rows.tsv"
: >"$rows"
for np in 4 8; do
  prof="$work/p$np.json"
  if [ -n "${SHARDC_PROFILE_DIR:-}" ] && [ -f "$SHARDC_PROFILE_DIR/p$np.json" ]; then
    cp "$SHARDC_PROFILE_DIR/p$np.json" "$prof"
  else
    "$bin" calibrate --np "$np" -o "$prof" >&2 || exit 1
  fi
  if [ "$np" = 4 ]; then plans=("${plans4[@]}"); else plans=("${plans8[@]}"); fi
  # every plan built and predicted first; then REPEAT passes over all of
  # them, so that the runs of one plan are minutes apart (a disturbance of
  # the host lasts seconds to minutes: two runs in a row would both meet it)
  ok=()
  for s in "${plans[@]}"; do
    d="$work/np$np-$(echo "$s" | tr ',=:' '___')"
    "$bin" compile "$model" --mesh "$np" --strategy "$s" --profile "$prof" >"$d.plan" 2>&1
    if "$bin" build "$model" --mesh "$np" --strategy "$s" -o "$d" >/dev/null 2>&1; then
      ok+=("$s")
    else
      echo "build failed: $s" >&2
    fi
  done
  for r in $(seq "$repeat"); do
    for s in "${ok[@]}"; do
      d="$work/np$np-$(echo "$s" | tr ',=:' '___')"
      "${mpi[@]}" -np "$np" "$d/train" --steps "$steps" --log "$d/log$r.jsonl" >"$d/out$r.txt" 2>&1
    done
  done
  k=0
  for s in "${plans[@]}"; do
    d="$work/np$np-$(echo "$s" | tr ',=:' '___')"
    [ -f "$d/out1.txt" ] || { k=$((k + 1)); continue; }
    pred=$(sed -n 's/^cost: *predicted step \([0-9.]*\) \(m\?s\).*/\1 \2/p' "$d.plan")
    pred_s=$(awk -v v="${pred% *}" -v u="${pred#* }" 'BEGIN { print (u == "ms" ? v / 1000 : v) }')
    out=$(cat "$d/out$repeat.txt")
    meas_s=$(python3 - "$d"/log*.jsonl <<'PY'
import json, sys
best = []
for f in sys.argv[1:]:
    ms = [json.loads(l)["step_ms"] for l in open(f) if l.strip()]
    best.append(min(ms[1:] if len(ms) > 1 else ms))
print(min(best) / 1000)
PY
)
    # "planned peak X bytes per rank, measured Y" or, for pipelines, "planned
    # peak per rank by stage A / B bytes, measured C / D": the largest of each
    planned=$(grep '^memory: *planned peak' <<<"$out" | python3 -c '
import re, sys
l = sys.stdin.read()
m = re.search(r"planned peak (?:per rank by stage )?([0-9, /]+) bytes(?: per rank)?, measured ([0-9, /]+)", l)
if m:
    f = lambda s: max(int(x.replace(",", "")) for x in s.split("/") if x.strip())
    print(f(m.group(1)), f(m.group(2)))
else:
    print("? ?")')
    orig=0
    if [ "$np" = 4 ] && [ "$k" -lt "$orig4" ]; then orig=1; fi
    if [ "$np" = 8 ] && [ "$k" -lt "$orig8" ]; then orig=1; fi
    k=$((k + 1))
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$np" "$s" "$pred_s" "$meas_s" "${planned% *}" "${planned#* }" "$orig" >>"$rows"
  done
done

python3 - "$rows" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"{'ranks':>5}  {'strategy':<40} {'predicted':>10} {'measured':>10} {'error':>7}  {'planned peak':>13} {'measured peak':>13}")
errs, pred, meas = [], [], []
for np_, s, p, m, pm, mm, orig in rows:
    p, m = float(p), float(m)
    e = (p - m) / m
    errs.append(abs(e)); pred.append(p); meas.append(m)
    same = "=" if pm == mm else "!="
    print(f"{np_:>5}  {s:<40} {p*1e3:>8.0f}ms {m*1e3:>8.0f}ms {100*e:>+6.1f}%  {pm:>13} {same} {mm:>11}")
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r
def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb)
n = len(rows)
print(f"\n{n} plans: MAPE {100*sum(errs)/n:.1f}%, Spearman {spearman(pred, meas):.3f}; "
      f"peak memory planned = measured on {sum(1 for r in rows if r[4] == r[5])} of {n}")
def part(label, idx):
    if len(idx) > 1:
        print(f"  {label}: MAPE {100*sum(errs[i] for i in idx)/len(idx):.1f}%, "
              f"Spearman {spearman([pred[i] for i in idx], [meas[i] for i in idx]):.3f} ({len(idx)} plans)")
for np_ in ("4", "8"):
    part(f"{np_} ranks", [i for i, r in enumerate(rows) if r[0] == np_])
part("the original 18", [i for i, r in enumerate(rows) if r[6] == "1"])
PY
probe1=$(probe 1)
python3 - "$probe0" "$probe1" <<'PY'
import sys
try:
    (g0, b0), (g1, b1) = (map(float, a.split()) for a in sys.argv[1:3])
except ValueError:
    sys.exit(print("host probe: not measured"))
print(f"host probe (one rank): SGEMM {g0:.1f} -> {g1:.1f} GFLOP/s ({100 * (g1 / g0 - 1):+.0f}%), "
      f"memory-bound {b0:.1f} -> {b1:.1f} GB/s ({100 * (b1 / b0 - 1):+.0f}%), before the first "
      f"calibration and after the last run" + ("; the host drifted over the run: its figures "
      "are not steady ones" if abs(g1 / g0 - 1) > 0.1 or abs(b1 / b0 - 1) > 0.1 else ""))
PY
echo "(work files in $work)"
