#!/usr/bin/env bash
# Shampoo under distribution (issue 13): every strategy that runs with it
# trains tests/dist/gpt_shampoo.shard (the tiny GPT, 48 x 48 blocks, roots at
# steps 5, 15, 25) for 30 steps and must give the single-rank run's per-step
# losses within 1e-4 relative and its final parameters within 1e-4; memory
# and communication equal the plan.  A checkpoint saved at step 15 under one
# plan and resumed under another reproduces the uninterrupted run.  Tensor
# parallelism (tp, tp2d, mixed with dp and pp) runs blocks of 32, which every
# shard of the tiny GPT holds whole, against a 1-rank run with blocks of 32,
# and resumes across tp and dp; blocks of 48 would straddle tp=4's shards and
# are refused (ZeRO, and Adafactor with tp and interleaved chunks:
# tests/dist/shampoo_zero.sh).  Adafactor
# trains 10 steps under dp=2, pp=2,dp=2, tp=2, dp=2,tp=2, pp=2,tp=2 and
# tp2d=2x2 alike, and resumes under dp=2 what tp=2 saved.
#   tests/dist/shampoo.sh SHARDC
#   ALL=1 tests/dist/shampoo.sh SHARDC   every strategy of tests/dist/equiv.sh
# ALL=1: each `check MODEL RANKS STRATEGY` line of tests/dist/equiv.sh trains
# the Shampoo variant of MODEL (gpt: gpt_shampoo.shard; another model: its
# own optimizer replaced by gpt_shampoo's) for 30 steps against one rank,
# with blocks of 48, or of the size the compiler suggests where 48 would
# straddle a tensor's shards; every strategy also runs on the gpt.  A
# compile-time refusal is listed with its reason.  OPT=adafactor does the
# same with gpt_adafactor's optimizer; ALL_TABLE=FILE also writes the table
# there (bench/results/shampoo-all-*.txt).
bin="$(realpath "$1")"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../codegen/lib.sh"
source "$here/shampoo_lib.sh"
need_mpi
export SHARDC_STRICT_COMM=1
fast_runs  # (lib.sh: -O1, a thread a rank, one Python; CI's time)
S=gpt_shampoo
STEPS=30

if [ "${ALL:-0}" = 1 ]; then
  source "$here/shampoo_all.sh"
  finish
fi

REF="$tmp/ref"
build $S "$REF" --mesh 1 --strategy dp=1 || finish
train "$REF" --steps $STEPS --quiet --log "$REF.jsonl" --save "$REF.st"
[ $rc -eq 0 ] || { bad "reference run: $out"; finish; }

check 2 dp=2
check 4 dp=4
check 2 pp=2,schedule=1f1b
# (GPipe with dp: shampoo_zero.sh, under zero=3; interleaved alone: the
# ALL=1 walk; CI's time)
check 4 pp=2,dp=2,schedule=interleaved:2
check 2 sp=ring:2
check 4 dp=2,sp=ring:2
check 4 pp=2,sp=ring:2

# A checkpoint holds the factors whole and symmetric (the cpu steps keep
# their upper triangles only, the save fills the lower ones): the 1-rank
# run's and a placed dp=4 run's (its blocks gathered from their owners)
for st in "$REF.st" "$REF-4-dp_4.st"; do
  if [ ! -f "$st" ]; then bad "symmetric factors: no $(basename "$st")"; continue; fi
  if r=$(/usr/bin/python3 "$here/symmetric.py" "$st" 2>&1); then ok; else bad "symmetric factors, $(basename "$st"): $r"; fi
done

# The root worker (a pipeline rank's roots in a thread of their own, at idle
# priority): whoever computes a block, the numbers are the main thread's,
# bitwise (losses and the final checkpoint): every block by the worker
# (SHARDC_TEST_ROOTS=wait: the optimizer waits for it), none
# (SHARDC_ROOT_WORKER=0: the main thread while its receives wait), and a
# starved worker (=starve: it sleeps on every block it takes), whose blocks
# the main thread takes over, dropping the worker's results.
roots_run() {  # NAME VAR=VALUE: the pp=2 run again with VAR set; sets $out, $rc
  local d="$REF-2-pp_2_schedule_1f1b"
  export "$2"
  train "$d" --steps $STEPS --log "$d-$1.jsonl" --save "$d-$1.st"
  unset "${2%%=*}"
  if [ $rc -ne 0 ]; then bad "root worker, $2: exit $rc: $(tail -5 <<<"$out")"; return 1; fi
  if ! cmp -s "$d.st" "$d-$1.st" ||
    [ "$(grep -o '"loss":[^,]*' "$d.jsonl")" != "$(grep -o '"loss":[^,]*' "$d-$1.jsonl")" ]; then
    bad "root worker, $2: losses or the checkpoint differ from the default run's"
    return 1
  fi
}
if [ -f "$REF-2-pp_2_schedule_1f1b.st" ]; then
  # 2 stages x 20 blocks of 48 (the tiny GPT's, tests/dist/gpt_shampoo.shard), every one at step 5, a few at each later step
  if roots_run wait SHARDC_TEST_ROOTS=wait; then
    grep -qE "^roots: .* [0-9]+ blocks over the run: [0-9]+ \(100%\) by the ranks' root workers in idle time, 0 by their main threads" <<<"$out" &&
      ok || bad "root worker, wait: expected every block by the workers: $(grep '^roots:' <<<"$out")"
  fi
  if roots_run main SHARDC_ROOT_WORKER=0; then
    grep -qE "^roots: .*: 0 \(0%\) by the ranks' root workers in idle time, [1-9][0-9]* by their main threads" <<<"$out" &&
      ok || bad "root worker off: expected every block by the main threads: $(grep '^roots:' <<<"$out")"
  fi
  if roots_run starve SHARDC_TEST_ROOTS=starve; then
    grep -qE "^roots: .*, [1-9][0-9]* by their main threads" <<<"$out" &&
      ok || bad "root worker, starve: expected the main threads to take blocks over: $(grep '^roots:' <<<"$out")"
  fi
  # a worker asleep in its first block when the run ends: the run is not
  # held back by it (it ends in far less than the 60 s sleep), saves and
  # exits 0 with the same numbers
  t0=$SECONDS
  if roots_run late SHARDC_TEST_ROOTS=starve:60000; then
    [ $((SECONDS - t0)) -lt 50 ] && ok ||
      bad "root worker asleep at the end: the run took $((SECONDS - t0)) s (waited for the worker)"
  fi
fi

# save at 15 under dp=2 (blocks placed over 2 data ranks), resume under pp=2;
# save under pp=2, resume under dp=4 (placed over 4)
SAVE_AT=15
reshard 2 dp=2 2 pp=2
reshard 2 pp=2 4 dp=4

# tensor parallelism: blocks of 32 (tp=4 cuts the 128-wide dims into 32s)
sed 's/block = 48/block = 32/' tests/dist/$S.shard >"$tmp/${S}32.shard"
S="$tmp/${S}32.shard"
REF="$tmp/ref32"
if build $S "$REF" --mesh 1 --strategy dp=1 &&
  train "$REF" --steps $STEPS --quiet --log "$REF.jsonl" --save "$REF.st" && [ $rc -eq 0 ]; then
  check 2 tp=2
  check 4 tp=4
  check 4 dp=2,tp=2
  # stages on two nodes: the pipeline's messages scattered over tp, the roots
  # computed while a scattered receive waits
  check 2x2 pp=2,tp=2,schedule=1f1b
  reshard 2 tp=2 2 dp=2
  reshard 2 dp=2 4 tp=4
else
  bad "blocks of 32: reference run: $out"
fi
# the tp2d grid's SUMMA matmuls are slow on the cpu: 8 steps (past
# start_preconditioning and the first roots) against 8 of one rank
STEPS=8
REF="$tmp/ref32-8"
if train "$tmp/ref32" --steps $STEPS --quiet --log "$REF.jsonl" --save "$REF.st" && [ $rc -eq 0 ]; then
  check 4 tp2d=2x2
else
  bad "blocks of 32, 8 steps: reference run: $out"
fi
STEPS=30
S=gpt_shampoo
REF="$tmp/ref"
out=$("$bin" compile tests/dist/$S.shard --mesh 4 --strategy tp=4 --emit=c 2>&1)
grep -q "shampoo block 48 would straddle the shards of parameter .*(e.g. block = 32)" <<<"$out" && ok ||
  bad "tp=4 with blocks of 48: expected a refusal, got: $(head -3 <<<"$out")"

# Adafactor: every rank updates its parameters (its shards under tp)
S=gpt_adafactor
STEPS=10
SAVE_AT=5
rc=1
build $S "$tmp/ref" --mesh 1 --strategy dp=1 &&
  train "$tmp/ref" --steps $STEPS --quiet --log "$tmp/ref.jsonl" --save "$tmp/ref.st"
if [ $rc -eq 0 ]; then
  check 2 dp=2
  check 4 pp=2,dp=2
  # under tp the row and column sums and the RMS are all-reduced over the
  # tp axes between the step's phases
  check 2 tp=2
  check 4 dp=2,tp=2
  check 4 pp=2,tp=2
  check 4 tp2d=2x2
  reshard 2 tp=2 2 dp=2
else
  bad "adafactor reference run: $out"
fi
S=gpt_shampoo

# (ZeRO, and Adafactor under tp with interleaved chunks: tests/dist/shampoo_zero.sh)
finish
