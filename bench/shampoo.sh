#!/usr/bin/env bash
# Shampoo against AdamW (issue 13), measured in one run:
#  1. step time on bench/gpt_bench.shard (GPT d=512, 8 layers) on 4 MPI
#     ranks, dp=4: AdamW vs Shampoo (256 x 256 blocks, roots every 10 steps),
#     the mean over the timed steps and Shampoo's overhead;
#  2. root-inverse time per step: a root step's extra time over an ordinary
#     Shampoo step, divided by precondition_every, with the blocks spread over
#     the 4 data ranks (passes/optplace.c) and with every rank computing every
#     root (spread = false);
#  3. pp=4 (1f1b): a root-recompute step against an ordinary step (the roots
#     fill the stages' waiting receives first);
#  4. convergence: the tiny GPT (samples/gpt.shard) on the built-in text, 300
#     steps, AdamW vs Shampoo (grafted on Adam) at the same learning-rate
#     schedule; both loss curves go to bench/results/, with the first step
#     at which Shampoo's 10-step mean loss reaches AdamW's final one.
# Prints the tables and writes them to bench/results/shampoo-DATE.txt.
#   bench/shampoo.sh [STEPS]        (timed steps per run, default 22)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
steps="${1:-22}"
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
# run NAME RANKS STRATEGY: builds and trains $steps steps, log in $tmp/NAME.jsonl
run() {
  "$shardc" build "$tmp/$1.shard" -o "$tmp/$1" --mesh "$2" --strategy "$3" >/dev/null
  if [ "$2" = 1 ]; then
    "$tmp/$1/train" --steps "$steps" --quiet --log "$tmp/$1.jsonl"
  else
    mpirun --allow-run-as-root --oversubscribe -np "$2" "$tmp/$1/train" --steps "$steps" --quiet \
      --log "$tmp/$1.jsonl"
  fi
}
# stats NAME EVERY START: "mean ordinary root" step ms over steps 3.. (root
# steps: 0-based s >= START with (s - START) % EVERY == 0)
stats() {
  /usr/bin/python3 - "$tmp/$1.jsonl" "$2" "$3" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
every, start = int(sys.argv[2]), int(sys.argv[3])
timed = [r for r in rows if r["step"] >= 3]
isroot = lambda r: every > 0 and r["step"] - 1 >= start and (r["step"] - 1 - start) % every == 0
ordn = [r["step_ms"] for r in timed if not isroot(r)]
root = [r["step_ms"] for r in timed if isroot(r)]
mean = lambda x: sum(x) / len(x) if x else float("nan")
print(f"{mean([r['step_ms'] for r in timed]):.1f} {mean(ordn):.1f} {mean(root):.1f}")
PY
}

B="$root/bench/gpt_bench.shard"
sh="shampoo(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1, block = 256, precondition_every = 10, start_preconditioning = 2)"
variant "$B" adamw "adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)" -e "s/steps = 8/steps = 1000/"
variant "$B" shampoo "$sh" -e "s/steps = 8/steps = 1000/"
variant "$B" shampoo_all "${sh%)}, spread = false)" -e "s/steps = 8/steps = 1000/"
run adamw 4 dp=4
run shampoo 4 dp=4
run shampoo_all 4 dp=4
read -r a_all _ _ <<<"$(stats adamw 0 0)"
read -r s_all s_ord s_root <<<"$(stats shampoo 10 2)"
read -r e_all e_ord e_root <<<"$(stats shampoo_all 10 2)"
variant "$B" pp_adamw "adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)" -e "s/steps = 8/steps = 1000/"
variant "$B" pp_shampoo "$sh" -e "s/steps = 8/steps = 1000/"
run pp_shampoo 4 pp=4,schedule=1f1b,mb=4
read -r _ p_ord p_root <<<"$(stats pp_shampoo 10 2)"

{
  echo "shampoo bench, $day, commit $(git -C "$root" rev-parse --short HEAD), $(nproc --all) cores (shared), OMP/OpenBLAS threads 1 per rank"
  echo "model: bench/gpt_bench.shard (GPT d=512, 8 layers, seq 256, batch 4); Shampoo block 256, roots every 10 steps"
  echo "steps timed: 3..$steps (mean step_ms of the metrics log)"
  echo
  echo "1. step time, 4 ranks, dp=4"
  printf '   %-34s %10s\n' "optimizer" "ms/step"
  printf '   %-34s %10s\n' "adamw" "$a_all"
  printf '   %-34s %10s\n' "shampoo, blocks spread (LPT)" "$s_all"
  printf '   %-34s %10s\n' "shampoo, every rank every block" "$e_all"
  awk -v a="$a_all" -v s="$s_all" 'BEGIN { printf "   shampoo (spread) overhead over adamw: %+.1f%% (target <= 15%%)\n", 100 * (s / a - 1) }'
  echo
  echo "2. root-inverse time per step, dp=4 (a root step's extra time over an ordinary step, / 10)"
  awk -v o="$e_ord" -v r="$e_root" 'BEGIN {
    printf "   every rank computes every root:   %7.1f ms/step (root step %.1f ms, ordinary %.1f ms)\n", (r - o) / 10, r, o }'
  awk -v o="$s_ord" -v r="$s_root" 'BEGIN {
    printf "   blocks spread over dp=4 (LPT):    %7.1f ms/step (root step %.1f ms, ordinary %.1f ms)\n", (r - o) / 10, r, o }'
  awk -v a="$e_ord" -v b="$e_root" -v c="$s_ord" -v d="$s_root" 'BEGIN {
    printf "   spreading cuts the root time %.1fx (target >= 3x)\n", (b - a) / (d - c) }'
  echo
  echo "3. pp=4 (1f1b, mb=4): root-recompute step vs ordinary step"
  awk -v o="$p_ord" -v r="$p_root" 'BEGIN {
    printf "   ordinary %.1f ms, root step %.1f ms: spike %+.1f%% (target < 10%%; each stage computes its roots while its pipeline receives wait, the rest at the start of its optimizer step)\n", o, r, 100 * (r / o - 1) }'
} | tee "$tmp/tables.txt"

# 4. convergence: 300 steps of the tiny GPT, one rank
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
cp "$tmp/tables.txt" "$res/shampoo-$day.txt"
echo "wrote $res/shampoo-$day.txt and $curve"
