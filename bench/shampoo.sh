#!/usr/bin/env bash
# Shampoo against AdamW (issue 13), measured in one run:
#  1. step time on bench/gpt_bench.shard (GPT d=512, 8 layers) on 4 MPI
#     ranks, dp=4: AdamW vs Shampoo (256 x 256 blocks, roots every 10 steps,
#     staggered), the runs interleaved (adamw, shampoo, adamw, ...) REPEATS
#     times; per run the mean step time over the timed steps (root steps
#     included: their cost amortised), then the median over the repeats and
#     Shampoo's overhead from the medians; at the model file's batch (4
#     sequences: 256 tokens per rank) and at 16 (1024 tokens per rank):
#     Shampoo's work per step is fixed, the model's grows with the batch;
#  2. root-inverse time per step (stagger = false, so the roots come
#     together): a root step's extra time over an ordinary Shampoo step,
#     divided by precondition_every, with the blocks spread over the 4 data
#     ranks (passes/optplace.c) and with every rank computing every root
#     (spread = false);
#  3. pp=4 (1f1b, mb=4): stagger = false (every root at the steps start +
#     k*10) against stagger = true (every root at step start once, then each
#     block's at the steps of its phase, ~1/10 of them per step), runs
#     interleaved REPEATS times: the median ordinary step of the stagger =
#     false run (no roots), its slowest root step, and the slowest and the
#     median step of the stagger = true run over the same window (every one
#     a root step), and those of stagger = true with SHARDC_ROOT_WORKER=0
#     (the roots on the main thread while its receives wait, as before the
#     root worker); medians over the repeats; and per step, its median over
#     the repeats (one run's disturbance at one step filtered, a root step's
#     cost, which recurs at that step in every run, kept): the slowest root
#     step of each mode against stagger = false's median ordinary step;
#  4. convergence: the tiny GPT (samples/gpt.shard) on the built-in text, 300
#     steps, AdamW vs Shampoo (grafted on Adam) at the same learning-rate
#     schedule; both loss curves go to bench/results/, with the first step
#     at which Shampoo's 10-step mean loss reaches AdamW's final one;
#  5. the cost model: after shardc calibrate --np 4, the predicted step of
#     Shampoo plans on 4 ranks (dp, spread or not, ZeRO-1, tp, pp) against
#     the measured one (median of the timed steps), and their mean
#     absolute error; AdamW's dp=4 and Adafactor's dp=4 and dp=2,tp=2 (its
#     tp phases) beside them.
#  6. ZeRO-1's owners: Shampoo dp=4,zero=1 with a bucket a layer
#     (SHARDC_ZERO_GROUP=layer) against the merged buckets (passes/zero.c),
#     beside plain dp's placement and AdamW with and without ZeRO-1: step
#     time, bytes sent, memory and padding.
# Prints the tables and writes them to bench/results/shampoo-DATE.txt.
#   bench/shampoo.sh [STEPS]        (steps per run, default 24; steps 4.. are timed)
#   SECTIONS="1 3" REPEATS=3 bench/shampoo.sh   (the sections to run, default all; repeats of 1, 3 and 6)
#   BATCHES="4 16" bench/shampoo.sh             (section 1's global batches, sequences per step)
#   PP=2 SECTIONS=3 bench/shampoo.sh            (section 3's pipeline stages, one rank each; default 4:
#                                                on 2 cores, 4 ranks leave the bubbles no idle core)
#   MB=2 SECTIONS=3 bench/shampoo.sh            (section 3's microbatches, default 4; fewer: larger bubbles)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
steps="${1:-24}"
steps0=$steps
sections="${SECTIONS:-1 2 3 4 5 6}"
repeats="${REPEATS:-3}"
batches="${BATCHES:-4 16}"
pp="${PP:-4}"
mbs="${MB:-4}"
want() { [[ " $sections " == *" $1 "* ]]; }
[ -x "$root/build/shardc" ] || { cmake -S "$root" -B "$root/build" >/dev/null && cmake --build "$root/build" -j2 >/dev/null; }
shardc="$root/build/shardc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
day=$(date -u +%Y-%m-%d)
res="$root/bench/results"
mkdir -p "$res"

# variant SRC NAME OPTIMIZER [sed expressions...]: SRC with another optimizer
variant() {
  local src="$1" name="$2" opt="$3"
  shift 3
  sed -e "s/optimizer = adamw([^)]*([^)]*)[^)]*)/optimizer = $opt/" \
      -e "s/optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)/optimizer = $opt/" \
      "$@" "$src" >"$tmp/$name.shard"
  grep -q "optimizer = ${opt%%(*}" "$tmp/$name.shard" || { echo "cannot set the optimizer in $src"; exit 1; }
}
# build NAME RANKS STRATEGY; train NAME RANKS [LOG]: $steps steps, log in $tmp/LOG.jsonl
build() {
  "$shardc" build "$tmp/$1.shard" -o "$tmp/$1" --mesh "$2" --strategy "$3" >/dev/null
}
train() {
  if [ "$2" = 1 ]; then
    "$tmp/$1/train" --steps "$steps" --quiet --log "$tmp/${3:-$1}.jsonl"
  else
    mpirun --allow-run-as-root --oversubscribe -np "$2" "$tmp/$1/train" --steps "$steps" --quiet \
      --log "$tmp/${3:-$1}.jsonl"
  fi
}
run() { build "$@" && train "$1" "$2"; }
# stats LOG EVERY START: "mean ordinary root" step ms over steps 4.. (1-based;
# root steps: 0-based s >= START with (s - START) % EVERY == 0)
stats() {
  /usr/bin/python3 - "$tmp/$1.jsonl" "$2" "$3" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
every, start = int(sys.argv[2]), int(sys.argv[3])
timed = [r for r in rows if r["step"] >= 4]
isroot = lambda r: every > 0 and r["step"] - 1 >= start and (r["step"] - 1 - start) % every == 0
ordn = [r["step_ms"] for r in timed if not isroot(r)]
root = [r["step_ms"] for r in timed if isroot(r)]
mean = lambda x: sum(x) / len(x) if x else float("nan")
print(f"{mean([r['step_ms'] for r in timed]):.1f} {mean(ordn):.1f} {mean(root):.1f}")
PY
}
# window LOG EVERY START: over steps 4.. (1-based): "median of the non-root
# steps, max of the root steps (stagger = false's), median, max of all, the
# first preconditioning step (0-based START), max of the non-root steps"
window() {
  /usr/bin/python3 - "$tmp/$1.jsonl" "$2" "$3" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
every, start = int(sys.argv[2]), int(sys.argv[3])
timed = [r for r in rows if r["step"] >= 4]
isroot = lambda r: r["step"] - 1 >= start and (r["step"] - 1 - start) % every == 0
ordn = [r["step_ms"] for r in timed if not isroot(r)] or [float("nan")]
root = [r["step_ms"] for r in timed if isroot(r)] or [float("nan")]
allv = [r["step_ms"] for r in timed]
first = [r["step_ms"] for r in rows if r["step"] - 1 == start] or [float("nan")]
print(f"{statistics.median(ordn):.1f} {max(root):.1f} {statistics.median(allv):.1f} {max(allv):.1f} {first[0]:.1f} {max(ordn):.1f}")
PY
}
# perstep EVERY START REPEATS: each step's median over the repeats (a
# disturbance hits one run at one step; a root step's cost recurs at the same
# step in every run), over steps 4..: "stagger = false's median ordinary
# step, its slowest root step, its slowest ordinary step (the noise left),
# stagger = true's slowest step and its median"
perstep() {
  /usr/bin/python3 - "$tmp" "$1" "$2" "$3" <<'PY'
import json, statistics, sys
tmp, every, start, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def steps(name):
    runs = [{r["step"]: r["step_ms"] for r in map(json.loads, open(f"{tmp}/{name}{k}.jsonl"))} for k in range(1, reps + 1)]
    common = sorted(set.intersection(*(set(r) for r in runs)))
    return {s: statistics.median(r[s] for r in runs) for s in common if s >= 4}
isroot = lambda s: s - 1 >= start and (s - 1 - start) % every == 0
off, on = steps("pp_off"), steps("pp_on")
ordn = [v for s, v in off.items() if not isroot(s)]
root = [v for s, v in off.items() if isroot(s)]
print(f"{statistics.median(ordn):.1f} {max(root):.1f} {max(ordn):.1f} {max(on.values()):.1f} {statistics.median(on.values()):.1f}")
PY
}
# med X...: the median
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

B="$root/bench/gpt_bench.shard"
sh="shampoo(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1, block = 256, precondition_every = 10, start_preconditioning = 2"
lng=(-e "s/steps = 8/steps = 1000/")
{
  echo "shampoo bench, $day, commit $(git -C "$root" rev-parse --short HEAD), $(nproc --all) cores (shared), OMP/OpenBLAS threads 1 per rank"
  echo "model: bench/gpt_bench.shard (GPT d=512, 8 layers, seq 256, batch 4; section 1 at batches $batches); Shampoo block 256, roots every 10 steps from step 2 (0-based)"
  echo "steps 1..$steps per run, 4..$steps timed (step_ms of the metrics log); sections 1, 3 and 6: $repeats repeats, runs interleaved, medians over the repeats"
} | tee "$tmp/tables.txt"

if want 1; then
  for bt in $batches; do
    bb=(-e "s/batch = 4,/batch = $bt,/")
    variant "$B" adamw "adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)" "${lng[@]}" "${bb[@]}"
    variant "$B" shampoo "$sh)" "${lng[@]}" "${bb[@]}"
    grep -q "batch = $bt," "$tmp/adamw.shard" || { echo "cannot set the batch in $B"; exit 1; }
    build adamw 4 dp=4
    build shampoo 4 dp=4
    am=() sm=()
    for rep in $(seq "$repeats"); do
      train adamw 4 "adamw$rep"
      train shampoo 4 "shampoo$rep"
      read -r a _ _ <<<"$(stats "adamw$rep" 0 0)"
      read -r b _ _ <<<"$(stats "shampoo$rep" 10 2)"
      am+=("$a") sm+=("$b")
    done
    a_med=$(med "${am[@]}") s_med=$(med "${sm[@]}")
    {
      echo
      echo "1. step time, 4 ranks, dp=4, batch $bt ($((bt * 256 / 4)) tokens per rank per step; mean of steps 4..$steps per run, root steps included)"
      printf '   %-34s %10s   %s\n' "optimizer" "median" "runs (ms/step)"
      printf '   %-34s %10s   %s\n' "adamw" "$a_med" "${am[*]}"
      printf '   %-34s %10s   %s\n' "shampoo (spread, stagger)" "$s_med" "${sm[*]}"
      awk -v a="$a_med" -v s="$s_med" 'BEGIN { printf "   shampoo overhead over adamw (medians): %+.1f%% (target <= 15%%)\n", 100 * (s / a - 1) }'
      paste -d' ' <(printf '%s\n' "${am[@]}") <(printf '%s\n' "${sm[@]}") |
        awk '{ printf "%s%+.1f%%", (NR > 1 ? ", " : "   per interleaved pair: "), 100 * ($2 / $1 - 1) } END { print "" }'
      # Shampoo's per-step work by our count against the model's, per rank:
      # a b x b block's SYRK factor updates (2 b^3) and direction (4 b^3),
      # its blocks spread over dp, against 6 b^2 per token
      awk -v t="$((bt * 256 / 4))" 'BEGIN { printf "   factor + direction FLOPs / model FLOPs per rank: b / (dp x tokens per rank) = 256 / (4 x %d) = %.1f%% (before roots, grafting, the gather)\n", t, 100 * 256 / (4 * t) }'
    } | tee -a "$tmp/tables.txt"
  done
fi

if want 2; then
  variant "$B" shampoo_one "$sh, stagger = false)" "${lng[@]}"
  variant "$B" shampoo_all "$sh, stagger = false, spread = false)" "${lng[@]}"
  run shampoo_one 4 dp=4
  run shampoo_all 4 dp=4
  read -r _ s_ord s_root <<<"$(stats shampoo_one 10 2)"
  read -r _ e_ord e_root <<<"$(stats shampoo_all 10 2)"
  {
    echo
    echo "2. root-inverse time per step, dp=4, stagger = false (a root step's extra time over an ordinary step, / 10)"
    awk -v o="$e_ord" -v r="$e_root" 'BEGIN {
      printf "   every rank computes every root:   %7.1f ms/step (root step %.1f ms, ordinary %.1f ms)\n", (r - o) / 10, r, o }'
    awk -v o="$s_ord" -v r="$s_root" 'BEGIN {
      printf "   blocks spread over dp=4 (LPT):    %7.1f ms/step (root step %.1f ms, ordinary %.1f ms)\n", (r - o) / 10, r, o }'
    awk -v a="$e_ord" -v b="$e_root" -v c="$s_ord" -v d="$s_root" 'BEGIN {
      printf "   spreading cuts the root time %.1fx (target >= 3x)\n", (b - a) / (d - c) }'
  } | tee -a "$tmp/tables.txt"
fi

if want 3; then
  variant "$B" pp_off "$sh, stagger = false)" "${lng[@]}"
  variant "$B" pp_on "$sh)" "${lng[@]}"
  build pp_off "$pp" "pp=$pp,schedule=1f1b,mb=$mbs"
  build pp_on "$pp" "pp=$pp,schedule=1f1b,mb=$mbs"
  fo=() fr=() ff=() fx=() nm=() nx=() nf=() wm=() wx=()
  for rep in $(seq "$repeats"); do
    train pp_off "$pp" "pp_off$rep"
    train pp_on "$pp" "pp_on$rep"
    SHARDC_ROOT_WORKER=0 train pp_on "$pp" "pp_main$rep"
    read -r o r _ _ f x <<<"$(window "pp_off$rep" 10 2)"
    fo+=("$o") fr+=("$r") ff+=("$f") fx+=("$x")
    read -r _ _ m x f <<<"$(window "pp_on$rep" 10 2)"
    nm+=("$m") nx+=("$x") nf+=("$f")
    read -r _ _ m x _ <<<"$(window "pp_main$rep" 10 2)"
    wm+=("$m") wx+=("$x")
  done
  o=$(med "${fo[@]}") r=$(med "${fr[@]}") m=$(med "${nm[@]}") x=$(med "${nx[@]}")
  m0=$(med "${wm[@]}") x0=$(med "${wx[@]}")
  {
    echo
    echo "3. pp=$pp (1f1b, mb=$mbs), $pp ranks on $(nproc --all) cores: root steps against ordinary steps over steps 4..$steps (0-based 3..$((steps - 1)))"
    printf '   stagger = false: ordinary step (median) %.1f ms, slowest root step %.1f ms: spike %+.1f%%   (runs: ordinary %s; root %s)\n' \
      "$o" "$r" "$(awk -v o="$o" -v r="$r" 'BEGIN { print 100 * (r / o - 1) }')" "${fo[*]}" "${fr[*]}"
    printf '   stagger = true:  every step a root step: median %.1f ms, slowest %.1f ms: spike %+.1f%% over stagger = false'"'"'s ordinary step, %+.1f%% over its own median   (runs: median %s; slowest %s)\n' \
      "$m" "$x" "$(awk -v o="$o" -v x="$x" 'BEGIN { print 100 * (x / o - 1) }')" \
      "$(awk -v m="$m" -v x="$x" 'BEGIN { print 100 * (x / m - 1) }')" "${nm[*]}" "${nx[*]}"
    printf '   stagger = true, SHARDC_ROOT_WORKER=0 (no root worker: the main thread computes the roots block by block while its receives wait): median %.1f ms (%+.1f%%), slowest %.1f ms (%+.1f%%)   (runs: median %s; slowest %s)\n' \
      "$m0" "$(awk -v o="$o" -v x="$m0" 'BEGIN { print 100 * (x / o - 1) }')" "$x0" \
      "$(awk -v o="$o" -v x="$x0" 'BEGIN { print 100 * (x / o - 1) }')" "${wm[*]}" "${wx[*]}"
    printf '   noise: the slowest ordinary step of the stagger = false runs (no roots) is %+.1f%% over their median (runs: %s)\n' \
      "$(awk -v o="$o" -v x="$(med "${fx[@]}")" 'BEGIN { print 100 * (x / o - 1) }')" "${fx[*]}"
    printf '   the first preconditioning step (0-based 2: every root, both modes): %s ms (stagger = false), %s ms (stagger = true)\n' \
      "$(med "${ff[@]}")" "$(med "${nf[@]}")"
    read -r po pr px pn pm <<<"$(perstep 10 2 "$repeats")"
    printf '   per step, its median over the %s runs (one-off disturbances filtered, a cost that recurs at a step kept): stagger = false: ordinary %.1f ms, slowest root step %.1f ms (%+.1f%%), slowest ordinary step %.1f ms (%+.1f%%: the noise left); stagger = true: median %.1f ms (%+.1f%%), slowest %.1f ms (%+.1f%%)\n' \
      "$repeats" "$po" "$pr" "$(awk -v o="$po" -v r="$pr" 'BEGIN { print 100 * (r / o - 1) }')" "$px" "$(awk -v o="$po" -v r="$px" 'BEGIN { print 100 * (r / o - 1) }')" \
      "$pm" "$(awk -v o="$po" -v r="$pm" 'BEGIN { print 100 * (r / o - 1) }')" "$pn" "$(awk -v o="$po" -v r="$pn" 'BEGIN { print 100 * (r / o - 1) }')"
    echo "   (target: spike < 10%; each rank's root worker computes its due roots at idle priority from the step's start, the main thread the rest at the start of its optimizer step)"
  } | tee -a "$tmp/tables.txt"
fi

# 4. convergence: 300 steps of the tiny GPT, one rank
if want 4; then
G="$root/samples/gpt.shard"
variant "$G" conv_adamw "adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1, warmup = 20)"
variant "$G" conv_shampoo "shampoo(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1, warmup = 20, block = 128, precondition_every = 10, start_preconditioning = 20)"
steps=300
run conv_adamw 1 dp=1
run conv_shampoo 1 dp=1
curve="$res/shampoo-convergence-$day.tsv"
/usr/bin/python3 - "$tmp/conv_adamw.jsonl" "$tmp/conv_shampoo.jsonl" "$curve" <<'PY' | tee -a "$tmp/tables.txt"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
s = [json.loads(l)["loss"] for l in open(sys.argv[2])]
with open(sys.argv[3], "w") as f:
    f.write("# tiny GPT (samples/gpt.shard), built-in text, 1 rank, same lr schedule (3e-3, warmup 20, cosine over 300)\n")
    f.write("step\tadamw\tshampoo\n")
    for i, (x, y) in enumerate(zip(a, s)):
        f.write(f"{i + 1}\t{x:.6f}\t{y:.6f}\n")
avg = lambda v, i: sum(v[max(0, i - 9):i + 1]) / len(v[max(0, i - 9):i + 1])
target = avg(a, len(a) - 1)
reach = next((i + 1 for i in range(len(s)) if avg(s, i) <= target), None)
print()
print("4. convergence, tiny GPT, 300 steps, 1 rank (curves: bench/results/" + sys.argv[3].split("/")[-1] + ")")
print(f"   final 10-step mean loss: adamw {target:.4f}, shampoo {avg(s, len(s) - 1):.4f}")
print("   shampoo reaches adamw's final loss at step " + (str(reach) if reach else "never (within 300)"))
for k in (50, 100, 150, 200, 250, 300):
    print(f"   step {k:3d}: adamw {avg(a, k - 1):.4f}  shampoo {avg(s, k - 1):.4f}")
PY
fi
# 5. the cost model against the measurement (docs/cost-model.md prices
#    Shampoo's step): on 4 ranks, after shardc calibrate --np 4, each plan's
#    predicted step (compile --emit=plan --profile) against its measured
#    one, the median of steps 4..STEPS (root steps included: the staggered
#    mean the model prices), the faster of two runs; AdamW's dp=4 for scale
if want 5; then
  steps=$steps0
  prof="$tmp/p4.json"
  "$shardc" calibrate --np 4 -o "$prof" >/dev/null || { echo "shampoo bench: calibrate failed"; exit 1; }
  variant "$B" acc_adamw "adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)" "${lng[@]}"
  variant "$B" acc_sh "$sh)" "${lng[@]}"
  variant "$B" acc_all "$sh, spread = false)" "${lng[@]}"
  # tp=2 halves the 256-row embedding: blocks of 128 (a block lives in its shard)
  variant "$B" acc_128 "${sh/block = 256/block = 128})" "${lng[@]}"
  variant "$B" acc_af "adafactor(lr = 3e-4, weight_decay = 0.1)" "${lng[@]}"
  acc=("acc_adamw dp=4" "acc_sh dp=4" "acc_all dp=4" "acc_sh dp=4,zero=1" "acc_128 dp=2,tp=2"
       "acc_sh pp=4,schedule=1f1b,mb=4" "acc_sh dp=2,pp=2,schedule=1f1b,mb=2"
       "acc_af dp=4" "acc_af dp=2,tp=2")
  {
    echo
    echo "5. predicted (calibrate --np 4, compile --profile) vs measured step, 4 ranks on $(nproc --all) cores, median of steps 4..$steps, the faster of 2 runs"
    printf '   %-10s %-32s %12s %12s %8s\n' optimizer plan predicted measured error
  } | tee -a "$tmp/tables.txt"
  errs=()
  for i in "${!acc[@]}"; do
    read -r v s <<<"${acc[$i]}"
    d="$tmp/acc$i"
    "$shardc" build "$tmp/$v.shard" -o "$d" --mesh 4 --strategy "$s" >/dev/null || { echo "   $v $s: build failed"; continue; }
    pred=$("$shardc" compile "$tmp/$v.shard" --mesh 4 --strategy "$s" --profile "$prof" --emit=plan 2>/dev/null |
      sed -n 's/^cost: *predicted step \([0-9.e+]*\) \(m*s\) .*/\1 \2/p' |
      awk '{ printf "%.1f", $2 == "s" ? $1 * 1000 : $1 }')
    meas=()
    for rep in 1 2; do
      mpirun --allow-run-as-root --oversubscribe -np 4 "$d/train" --steps "$steps" --quiet --log "$d-$rep.jsonl" >/dev/null 2>&1 || true
      meas+=("$(/usr/bin/python3 -c 'import json, statistics, sys
v = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if r["step"] >= 4]
print(f"{statistics.median(v):.1f}" if v else "nan")' "$d-$rep.jsonl" 2>/dev/null || echo nan)")
    done
    m=$(printf '%s\n' "${meas[@]}" | sort -g | head -1)
    e=$(awk -v p="$pred" -v m="$m" 'BEGIN { if (p > 0 && m > 0) printf "%+.1f", 100 * (p / m - 1); else print "nan" }')
    case $v in acc_adamw) o=adamw ;; acc_af) o=adafactor ;; *) o=shampoo; errs+=("$e") ;; esac
    printf '   %-10s %-32s %9s ms %9s ms %7s%%\n' "$o$([ $v = acc_all ] && echo '*')$([ $v = acc_128 ] && echo '/128')" "$s" "${pred:-?}" "$m" "$e" |
      tee -a "$tmp/tables.txt"
  done
  {
    printf '   Shampoo plans: mean absolute error %s%%   (* spread = false: every data rank computes every block; /128: blocks of 128)\n' \
      "$(printf '%s\n' "${errs[@]}" | awk '{ s += ($1 < 0 ? -$1 : $1); n++ } END { printf "%.1f", n ? s / n : 0 }')"
  } | tee -a "$tmp/tables.txt"
fi

# 6. ZeRO-1's owners (passes/zero.c): each tensor whole on one data rank,
#    its bucket's chunks padded to the fullest; a bucket a layer
#    (SHARDC_ZERO_GROUP=layer) against the merged buckets, with plain dp's
#    placement (the directions all-gathered) and AdamW beside them; the
#    model file's batch, runs interleaved REPEATS times, medians
if want 6; then
  variant "$B" adamw6 "adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)" "${lng[@]}"
  variant "$B" shampoo6 "$sh)" "${lng[@]}"
  cp "$tmp/shampoo6.shard" "$tmp/shampoo6l.shard"
  cp "$tmp/adamw6.shard" "$tmp/adamw6z.shard"
  cp "$tmp/shampoo6.shard" "$tmp/shampoo6z.shard"
  build adamw6 4 dp=4
  build adamw6z 4 dp=4,zero=1
  build shampoo6 4 dp=4
  SHARDC_ZERO_GROUP=layer build shampoo6l 4 dp=4,zero=1
  build shampoo6z 4 dp=4,zero=1
  # plan NAME STRATEGY [ENV]: "MB sent, MB a rank, padding"
  plan() {
    env ${3:-} "$shardc" compile "$tmp/$1.shard" --mesh 4 --strategy "$2" --emit=plan 2>/dev/null |
      awk '/^comm:/ { gsub(",", "", $2); c = $2 / 1e6 } /^memory:/ { gsub(",", "", $2); m = $2 / 1e6 }
           /padded to the fullest/ { match($0, /\(\+[0-9.]+%\)/); p = substr($0, RSTART + 1, RLENGTH - 2) }
           END { printf "%.1f %.1f %s\n", c, m, p ? p : "-" }'
  }
  names=(adamw6 adamw6z shampoo6 shampoo6l shampoo6z)
  plans=(dp=4 dp=4,zero=1 dp=4 dp=4,zero=1 dp=4,zero=1)
  envs=("" "" "" SHARDC_ZERO_GROUP=layer "")
  labels=("adamw dp=4" "adamw dp=4,zero=1" "shampoo dp=4 (placed, gather)" "shampoo dp=4,zero=1 (a bucket a layer)" "shampoo dp=4,zero=1 (merged)")
  declare -A t6
  for rep in $(seq "$repeats"); do
    for n in "${names[@]}"; do
      train "$n" 4 "$n$rep"
      read -r a _ _ <<<"$(stats "$n$rep" 10 2)"
      t6[$n]="${t6[$n]:-} $a"
    done
  done
  {
    echo
    echo "6. ZeRO-1 with Shampoo, 4 ranks, batch 4: the owners' buckets a layer each vs merged (mean of steps 4..$steps per run, medians over $repeats interleaved repeats; sent and memory from --emit=plan)"
    printf '   %-40s %10s %12s %12s %8s   %s\n' "plan" "median" "MB sent" "MB a rank" "padding" "runs (ms/step)"
    for i in "${!names[@]}"; do
      n=${names[$i]}
      read -r c m p <<<"$(plan "$n" "${plans[$i]}" "${envs[$i]}")"
      # shellcheck disable=SC2086
      printf '   %-40s %10s %12s %12s %8s  %s\n' "${labels[$i]}" "$(med ${t6[$n]})" "$c" "$m" "$p" "${t6[$n]}"
    done
  } | tee -a "$tmp/tables.txt"
fi

# a day's later runs are appended, below a line, not written over the first
out="$res/shampoo-$day.txt"
if [ -s "$out" ]; then
  { echo; echo "--- a later run, $(date -u +%H:%M) UTC:"; echo; cat "$tmp/tables.txt"; } >>"$out"
else
  cp "$tmp/tables.txt" "$out"
fi
echo "wrote $out"
