#!/usr/bin/env bash
# Distributed equivalence (issue 4): every strategy and combination that the
# cpu target runs (dp, zero=1, tp, tp2d, sp=megatron, sp=ring, pp) trains the
# tiny GPT, the tiny llama, the classifier and a GPT whose tied head has a bias
# for 10 steps on 2, 4 or 8 MPI ranks, and must give the single-rank run's per-step losses within
# 1e-5 relative and its final checkpoint (parameters and optimizer state,
# gathered from the shards) within 1e-5.  Each run also checks its memory
# plan (planned peak == measured high-water mark on every rank) and its
# communication volume (bytes the runtime counted == bytes the plan
# predicts).  A checkpoint saved under one strategy resumes under another.
#   tests/dist/equiv.sh SHARDC
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
need_mpi
export SHARDC_STRICT_COMM=1
fast_runs  # (lib.sh: -O1, a thread a rank, one Python; CI's time)
STEPS=10

# reference SAMPLE: the single-rank run ($tmp/SAMPLE-ref.{jsonl,st})
reference() {
  local s="$1"
  build "$s" "$tmp/$s-ref" --mesh 1 --strategy dp=1 || return 1
  train "$tmp/$s-ref" --steps $STEPS --quiet --log "$tmp/$s-ref.jsonl" --save "$tmp/$s-ref.st"
  [ $rc -eq 0 ] || { bad "$s reference run: $out"; return 1; }
}

# check SAMPLE RANKS STRATEGY [SOURCE]: SOURCE (a .shard, default SAMPLE)
# against SAMPLE's reference run
check() {
  local s="$1" n="$2" st="$3" src="${4:-$1}"
  local d="$tmp/$s-$2-${3//[=,]/_}${4:+-$(basename "$4" .shard)}"
  build "$src" "$d" --mesh "$n" --strategy "$st" || return
  train "$d" --steps $STEPS --log "$d.jsonl" --save "$d.st"
  printf '%s\n' "$out" >"$d.out"
  if [ $rc -ne 0 ]; then bad "$s $st: exit $rc: $out"; return; fi
  if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out" ||
     ! grep -q "^comm:     planned" <<<"$out"; then
    bad "$s $st: memory or communication differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
    return
  fi
  local cmp
  if cmp=$(py tests/dist/compare.py "$tmp/$s-ref.jsonl" "$d.jsonl" "$tmp/$s-ref.st" "$d.st"); then
    ok
    printf '  %-7s %-28s %d ranks  %s\n' "$s" "$st" "$n" "$cmp"
  else
    bad "$s $st: $cmp"
  fi
}

# The models train batches of 8 sequences in microbatches of 2 (lib.sh's
# small_models; the samples' are 16 or 8 in 4s): CI's time, every plan's
# shards, microbatches and messages as with the samples'.
small_models
gs="$MODELS_DIR/gpt.shard"
sed 's/microbatch = 2/microbatch = 1/' "$gs" >"$tmp/gptmb1.shard"
reference gpt && {
  check gpt 2 dp=2
  check gpt 2 tp=2
  check gpt 2 tp=2,sp=megatron
  check gpt 4 dp=4
  check gpt 4 tp=4
  check gpt 4 tp=2,dp=2
  check gpt 4 tp=4,sp=megatron
  check gpt 4 tp=2,sp=megatron,dp=2
  check gpt 8 tp=4,dp=2
  check gpt 8 tp=2,sp=megatron,dp=4
  check gpt 4 dp=4,zero=1
  check gpt 4 tp=2,dp=2,zero=1
  check gpt 8 tp=2,sp=megatron,dp=4,zero=1
  # pipelines: alone, with each other strategy, 3D and 4D on 8 ranks
  check gpt 2 pp=2,schedule=gpipe
  check gpt 2 pp=2,schedule=1f1b
  check gpt 2 pp=2:3+1
  check gpt 2 pp=2,schedule=interleaved:2
  check gpt 4 pp=2,dp=2,schedule=interleaved:2
  check gpt 4 pp=4,schedule=1f1b
  check gpt 4 pp=2,tp=2
  check gpt 4 pp=2,dp=2,zero=1
  # stages on two nodes (2x2: 2 nodes of 2; 2x4): messages whole on every
  # tp rank travel scattered over tp and are all-gathered by the receiver
  check gpt 2x2 pp=2,tp=2
  check gpt 2x4 tp=2,pp=2,dp=2
  check gpt 2x4 tp=2,pp=2,dp=2,zero=1
  check gpt 8 tp=2,sp=megatron,pp=2,dp=2
  check gpt 2 sp=ring:2
  check gpt 4 dp=2,sp=ring:2
  check gpt 4 sp=ring:4
  check gpt 4 tp=2,sp=ring:2
  check gpt 4 dp=2,sp=ring:2,zero=1
  check gpt 4 sp=ring:4,zero=3
  # ring attention inside pipeline stages: the gradients summed over dp x sp,
  # the last stage's loss averaged over its dp x sp ranks
  check gpt 4 pp=2,sp=ring:2
  check gpt 4 pp=2,sp=ring:2,schedule=interleaved:2
  check gpt 4 pp=2,sp=ring:2,zero=1
  check gpt 8 pp=2,sp=ring:2,dp=2
  check gpt 2x4 pp=2,sp=ring:2,tp=2
  check gpt 4 dp=4,zero=2
  check gpt 4 dp=4,zero=3
  check gpt 2 dp=2,zero=3
  check gpt 4 tp=2,dp=2,zero=3
  check gpt 4 tp=2,sp=megatron,dp=2,zero=2
  check gpt 4 pp=2,dp=2,zero=3
  # ZeRO with interleaved chunks: one shard layout over the rank's chunks
  check gpt 4 pp=2,dp=2,zero=1,schedule=interleaved:2
  check gpt 4 dp=2,pp=2,zero=3,schedule=interleaved:2
  # and ZeRO-2 with 4 microbatches (of 1 row: the same batch), each
  # chunk's buckets reduce-scattered every microbatch
  check gpt 4 pp=2,dp=2,zero=2,schedule=interleaved:2,mb=4 "$tmp/gptmb1.shard"
  # 2D tensor parallelism (Optimus: SUMMA on a 2x2 grid), alone and with dp
  check gpt 4 tp2d=2x2
  check gpt 8 tp2d=2x2,dp=2
  check gpt 8 tp2d=2x2,pp=2
  check gpt 8 tp2d=2x2,dp=2,zero=3
  # tp2d with ring attention: the grid splits the batch and the channels,
  # the ring the sequence (ZeRO over the data ranks dp x sp)
  check gpt 8 tp2d=2x2,sp=ring:2
  check gpt 8 tp2d=2x2,sp=ring:2,zero=1
  # strategy = auto: the search's best plan the cpu target generates
  check gpt 4 auto
  check gpt 8 auto
}
reference llama && {
  check llama 2 tp=2
  check llama 4 tp=2,dp=2
  check llama 4 tp=2,sp=megatron,dp=2
  check llama 4 pp=2,tp=2
  check llama 4 pp=2:2+2,tp=2,sp=megatron
  check llama 4 pp=2:1+3,tp=2,sp=megatron,recompute=full
  check llama 2x2 pp=2,tp=2,schedule=interleaved:2
  check llama 2 sp=ring:2
  check llama 4 tp=2,sp=ring:2
  check llama 4 pp=2,sp=ring:2
  check llama 2 dp=2,zero=3
  check llama 4 tp=2,dp=2,zero=2
  check llama 4 tp2d=2x2
  # (rotary positions from each sequence chunk, on the grid)
  check llama 8 tp2d=2x2,sp=ring:2
  check llama 8 auto
}

# A tied head with a bias (tests/dist/tiedbias.shard): on the grid the bias
# is split over the vocabulary like the head's logits (down the grid column).
reference tiedbias && {
  check tiedbias 4 tp2d=2x2
  check tiedbias 8 tp2d=2x2,pp=2
  check tiedbias 4 tp=2,sp=megatron,dp=2
}

# A padded vocabulary (tests/dist/gptpad.shard: cross_entropy's classes):
# the vocab-parallel shards skip their unused columns.
reference gptpad && {
  check gptpad 2 tp=2
  check gptpad 4 tp2d=2x2
  check gptpad 4 tp=2,sp=megatron,dp=2
}

# The classifier (bias on its logits: SUMMA, then an all-gather of the rows
# and a cross-entropy split over the classes).
reference mlp && check mlp 4 tp2d=2x2
# tp2d's head averages its row blocks' losses over the grid (the gradient
# 1/q of each block's): AdamW, or clipping by the gradient's norm, would
# hide a gradient off by a constant; SGD without clipping does not
sed 's/optimizer = adamw(.*)$/optimizer = sgd(lr = 0.1, clip = 0)/' "$gs" >"$MODELS_DIR/gptsgd.shard"
reference gptsgd && {
  check gptsgd 4 tp2d=2x2
  check gptsgd 8 tp2d=2x2,sp=ring:2
}
# pipeline cuts balanced for memory (passes/stage.c): a large vocabulary
reference bigvocab && check bigvocab 4 pp=4:memory

# Memory shrinks as theory says: tp=4 holds a quarter of every split
# weight; ZeRO-1 at dp=4 a quarter of the optimizer state, ZeRO-2 also a
# quarter of the gradients, ZeRO-3 also a quarter of the parameters.
"$bin" compile "$gs" --mesh 1 --strategy dp=1 --emit=ir >"$tmp/ref.ir" 2>&1
"$bin" compile "$gs" --mesh 4 --strategy tp=4 --emit=ir >"$tmp/tp4.ir" 2>&1
if [ -f "$tmp/gpt-4-dp_4_zero_1/model.c" ] && [ -f "$tmp/gpt-4-dp_4/model.c" ] &&
   [ -f "$tmp/gpt-4-dp_4_zero_2/model.c" ] && [ -f "$tmp/gpt-4-dp_4_zero_3/model.c" ] &&
   cmp=$(py tests/dist/shrink.py "$tmp/ref.ir" "$tmp/tp4.ir" 4 "$tmp/gpt-ref/model.c" \
         "$tmp/gpt-4-dp_4_zero_1/model.c" "$tmp/gpt-4-dp_4/model.c" 4 \
         "$tmp/gpt-4-dp_4_zero_2/model.c" "$tmp/gpt-4-dp_4_zero_3/model.c"); then
  ok
  echo "  memory: $cmp"
else
  bad "memory shrink: ${cmp:-programs missing}"
fi

# tp2d=2x2: every matrix 1/4 per rank, every vector 1/2; activations shrink.
"$bin" compile "$gs" --mesh 4 --strategy tp2d=2x2 --emit=ir >"$tmp/tp2d.ir" 2>&1
"$bin" compile "$gs" --mesh 1 --strategy dp=1 --emit=plan >"$tmp/ref.plan" 2>&1
"$bin" compile "$gs" --mesh 4 --strategy tp2d=2x2 --emit=plan >"$tmp/tp2d.plan" 2>&1
if cmp=$(py tests/dist/shrink2d.py "$tmp/ref.ir" "$tmp/tp2d.ir" 2 "$tmp/ref.plan" "$tmp/tp2d.plan"); then
  ok
  echo "  memory: $cmp"
else
  bad "memory shrink (tp2d): $cmp"
fi

# Pipeline memory: GPipe holds all 4 microbatches' activations on each of
# the 2 stages, 1F1B at most pp - stage; measured peaks equal the plans.
g="$tmp/gpt-2-pp_2_schedule_gpipe" f="$tmp/gpt-2-pp_2_schedule_1f1b"
if [ -f "$g.out" ] && [ -f "$f.out" ] &&
   "$bin" compile "$gs" --mesh 2 --strategy pp=2,schedule=gpipe >"$g.plan" 2>&1 &&
   "$bin" compile "$gs" --mesh 2 --strategy pp=2,schedule=1f1b >"$f.plan" 2>&1 &&
   cmp=$(py tests/dist/pipemem.py "$g.plan" "$g.out" "$f.plan" "$f.out" 2 4); then
  ok
  echo "  pipeline memory: $cmp"
else
  bad "pipeline memory: ${cmp:-runs missing}"
fi

# reshard DIR1 DIR2 WHAT: DIR1 trains 5 steps and saves; DIR2 resumes from
# that checkpoint to step 10; the result must be the single-rank run's.
reshard() {
  local d1="$1" d2="$2" what="$3"
  [ -x "$d1/train" ] && [ -x "$d2/train" ] || { bad "reshard $what: programs missing"; return; }
  train "$d1" --steps 5 --quiet --log "$tmp/r3.jsonl" --save "$tmp/r3-5.st"
  [ $rc -eq 0 ] || { bad "reshard $what: first half: $out"; return; }
  train "$d2" --steps $STEPS --quiet --load "$tmp/r3-5.st" --log "$tmp/r3.jsonl" --save "$tmp/r3.st"
  if [ $rc -ne 0 ]; then
    bad "reshard $what: resume: $out"
  elif cmp=$(py tests/dist/compare.py "$tmp/gpt-ref.jsonl" "$tmp/r3.jsonl" "$tmp/gpt-ref.st" "$tmp/r3.st"); then
    ok
    echo "  reshard $what at step 5: $cmp"
  else
    bad "reshard $what: $cmp"
  fi
  rm -f "$tmp/r3.jsonl"
}

# Resharding: save at step 5 under tp=2,dp=2, resume under tp=4 with
# Megatron-SP (and from ZeRO-1 to plain dp); the result must be the
# single-rank run's.
reshard "$tmp/gpt-4-tp_2_dp_2" "$tmp/gpt-4-tp_4_sp_megatron" "tp=2,dp=2 -> tp=4,sp=megatron"
# Ring attention: save under dp x sp, resume with the sequence in 4 shards.
reshard "$tmp/gpt-4-dp_2_sp_ring:2" "$tmp/gpt-4-sp_ring:4" "dp=2,sp=ring:2 -> sp=ring:4"
reshard "$tmp/gpt-4-sp_ring:4" "$tmp/gpt-8-pp_2_sp_ring:2_dp_2" "sp=ring:4 -> pp=2,sp=ring:2,dp=2"
reshard "$tmp/gpt-4-dp_4_zero_1" "$tmp/gpt-8-tp_4_dp_2" "dp=4,zero=1 -> tp=4,dp=2"
# ZeRO-3 checkpoints: saved under dp=4,zero=3 at step 5, resumed under plain
# tp=2,dp=2; and saved under tp=2,dp=2 then resumed under tp=2,dp=2,zero=3.
reshard "$tmp/gpt-4-dp_4_zero_3" "$tmp/gpt-4-tp_2_dp_2" "dp=4,zero=3 -> tp=2,dp=2"
reshard "$tmp/gpt-4-tp_2_dp_2" "$tmp/gpt-4-tp_2_dp_2_zero_3" "tp=2,dp=2 -> tp=2,dp=2,zero=3"
# ZeRO-2 over interleaved chunks: saved at step 5, resumed under tp=2,dp=2
reshard "$tmp/gpt-4-pp_2_dp_2_zero_2_schedule_interleaved:2_mb_4-gptmb1" "$tmp/gpt-4-tp_2_dp_2" \
  "pp=2,dp=2,zero=2,schedule=interleaved:2,mb=4 -> tp=2,dp=2"
# 2D tensor parallelism: save on the 2x2 grid, resume under tp=4; and from
# ZeRO-1 (its flat moments) into the grid with dp.
reshard "$tmp/gpt-4-tp2d_2x2" "$tmp/gpt-4-tp_4" "tp2d=2x2 -> tp=4"
reshard "$tmp/gpt-4-dp_4_zero_1" "$tmp/gpt-8-tp2d_2x2_dp_2" "dp=4,zero=1 -> tp2d=2x2,dp=2"
# ... and out of a pipeline with ZeRO-1 into tensor + data parallelism.
reshard "$tmp/gpt-4-pp_2_dp_2_zero_1" "$tmp/gpt-4-tp_2_dp_2" "pp=2,dp=2,zero=1 -> tp=2,dp=2"
reshard "$tmp/gpt-4-tp_2_dp_2" "$tmp/gpt-4-pp_4_schedule_1f1b" "tp=2,dp=2 -> pp=4,schedule=1f1b"
finish
