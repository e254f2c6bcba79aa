#!/usr/bin/env bash
# Shampoo under distribution (issue 13): every strategy that runs with it
# trains tests/dist/gpt_shampoo.shard (the tiny GPT, 48 x 48 blocks, roots at
# steps 5, 15, 25) for 30 steps and must give the single-rank run's per-step
# losses within 1e-4 relative and its final parameters within 1e-4; memory
# and communication equal the plan.  A checkpoint saved at step 15 under one
# plan and resumed under another reproduces the uninterrupted run.  Plans
# Shampoo does not run yet (tensor-parallel shards, ZeRO) are refused at
# compile time.  Adafactor trains 10 steps under dp=2 and pp=2,dp=2 alike.
#   tests/dist/shampoo.sh SHARDC
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
need_mpi
export SHARDC_STRICT_COMM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
S=gpt_shampoo
STEPS=30

compare() {  # REF.jsonl RUN.jsonl REF.st RUN.st: losses and parameters within 1e-4
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
sys.path.insert(0, "tests/dist")
from compare import tensors
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if l.strip()]
if len(a) != len(b) or not a:
    print(f"loss logs have {len(a)} and {len(b)} steps"); sys.exit(1)
rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
A, B = tensors(sys.argv[3]), tensors(sys.argv[4])
if A.keys() != B.keys():
    print("checkpoints hold different tensors:", sorted(A.keys() ^ B.keys())[:4]); sys.exit(1)
w = max(float(abs(A[k] - B[k]).max()) for k in A if not k.startswith("optimizer."))
print(f"loss rel {rel:.2e}, parameters {w:.2e}")
sys.exit(0 if rel <= 1e-4 and w <= 1e-4 else 1)
PY
}

build $S "$tmp/ref" --mesh 1 --strategy dp=1 || finish
train "$tmp/ref" --steps $STEPS --quiet --log "$tmp/ref.jsonl" --save "$tmp/ref.st"
[ $rc -eq 0 ] || { bad "reference run: $out"; finish; }

check() {  # RANKS STRATEGY
  local d="$tmp/$1-${2//[=,:]/_}"
  build $S "$d" --mesh "$1" --strategy "$2" || return
  train "$d" --steps $STEPS --log "$d.jsonl" --save "$d.st"
  if [ $rc -ne 0 ]; then bad "$2: exit $rc: $(tail -5 <<<"$out")"; return; fi
  if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out"; then
    bad "$2: memory or communication differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
    return
  fi
  local c
  if c=$(compare "$tmp/ref.jsonl" "$d.jsonl" "$tmp/ref.st" "$d.st"); then
    ok
    printf '  %-32s %d ranks  %s\n' "$2" "$1" "$c"
  else
    bad "$2: $c"
  fi
}

check 2 dp=2
check 4 dp=4
check 2 pp=2,schedule=1f1b
check 4 pp=2,dp=2,schedule=gpipe
check 2 pp=2,schedule=interleaved:2
check 4 pp=2,dp=2,schedule=interleaved:2
check 2 sp=ring:2
check 4 dp=2,sp=ring:2
check 4 pp=2,sp=ring:2

# save at 15 under dp=2 (blocks placed over 2 data ranks), resume under pp=2;
# save under pp=2, resume under dp=4 (placed over 4)
reshard() {  # RANKS1 STRATEGY1 RANKS2 STRATEGY2
  local d1="$tmp/r1-${2//[=,:]/_}" d2="$tmp/r2-${4//[=,:]/_}"
  build $S "$d1" --mesh "$1" --strategy "$2" && build $S "$d2" --mesh "$3" --strategy "$4" || return
  rm -f "$d2.jsonl"
  train "$d1" --steps 15 --quiet --log "$d2.jsonl" --save "$d1.st"
  [ $rc -eq 0 ] || { bad "reshard $2: $out"; return; }
  train "$d2" --steps $STEPS --quiet --load "$d1.st" --log "$d2.jsonl" --save "$d2.st"
  [ $rc -eq 0 ] || { bad "reshard $2 -> $4: resume: $out"; return; }
  local c
  if c=$(compare "$tmp/ref.jsonl" "$d2.jsonl" "$tmp/ref.st" "$d2.st"); then
    ok
    printf '  saved at 15 under %-12s resumed under %-12s %s\n' "$2" "$4" "$c"
  else
    bad "reshard $2 -> $4: $c"
  fi
}
reshard 2 dp=2 2 pp=2
reshard 2 pp=2 4 dp=4

# Adafactor: every rank updates its parameters whole
S=gpt_adafactor
STEPS=10
rc=1
build $S "$tmp/ref" --mesh 1 --strategy dp=1 &&
  train "$tmp/ref" --steps $STEPS --quiet --log "$tmp/ref.jsonl" --save "$tmp/ref.st"
if [ $rc -eq 0 ]; then
  check 2 dp=2
  check 4 pp=2,dp=2
else
  bad "adafactor reference run: $out"
fi
S=gpt_shampoo

for st in tp=2 dp=2,zero=1; do
  out=$("$bin" compile tests/dist/$S.shard --mesh 2 --strategy $st --emit=c 2>&1)
  grep -q "optimizer shampoo with .* is not implemented yet" <<<"$out" && ok ||
    bad "$st with Shampoo: expected a refusal, got: $(head -3 <<<"$out")"
done
finish
