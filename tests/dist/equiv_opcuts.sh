#!/usr/bin/env bash
# Pipeline cuts inside a layer (issue 12 item 3, passes/stage.c): plans
# whose stage cuts fall at an op boundary inside a transformer block (the
# residual stream between its attention and its MLP, or a boundary that
# two tensors cross: the residual and an op's output) train to the
# single-rank run's per-step losses (within 1e-6 relative) and final
# checkpoint (parameters and optimizer state within 1e-5, as dist/equiv),
# under GPipe, 1F1B and interleaved schedules, alone and with dp, tp,
# Megatron-SP, ZeRO and recompute; the planned peak equals the measured one on every
# rank and the runtime's communication volume equals the plan's.  Each case
# also checks, in its plan, that a cut does fall inside a layer, and a case
# marked "multi" that a cut carries several tensors (one message each).
#   tests/dist/equiv_opcuts.sh SHARDC
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
need_mpi
export SHARDC_STRICT_COMM=1
fast_runs  # (lib.sh: -O1, a thread a rank, one Python; CI's time)
STEPS=10
TOL=1e-6 TENSOR_TOL=1e-5
small_models  # batches of 8 in microbatches of 2 (lib.sh): CI's time

# reference SAMPLE: the single-rank run ($tmp/SAMPLE-ref.{jsonl,st})
reference() {
  local s="$1"
  build "$s" "$tmp/$s-ref" --mesh 1 --strategy dp=1 || return 1
  train "$tmp/$s-ref" --steps $STEPS --quiet --log "$tmp/$s-ref.jsonl" --save "$tmp/$s-ref.st"
  [ $rc -eq 0 ] || { bad "$s reference run: $out"; return 1; }
}

# check SAMPLE RANKS STRATEGY [multi]
check() {
  local s="$1" n="$2" st="$3" multi="${4:-}" src
  src=$(model_of "$1")
  local d="$tmp/$s-$2-${3//[=,:+]/_}"
  local plan
  plan=$("$bin" compile "$src" --mesh "$n" --strategy "$st" --emit=plan 2>&1)
  if ! grep -q '^cut [0-9]*: *inside' <<<"$plan"; then
    bad "$s $st: no pipeline cut inside a layer in the plan"
    return
  fi
  if [ -n "$multi" ] && ! grep -q '^cut [0-9]*: .*; [2-4] tensors cross it; [2-4] messages per microbatch' <<<"$plan"; then
    bad "$s $st: no pipeline cut that several tensors cross in the plan"
    return
  fi
  build "$s" "$d" --mesh "$n" --strategy "$st" || return
  train "$d" --steps $STEPS --log "$d.jsonl" --save "$d.st"
  if [ $rc -ne 0 ]; then bad "$s $st: exit $rc: $out"; return; fi
  if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out" ||
     ! grep -q "^comm:     planned" <<<"$out"; then
    bad "$s $st: memory or communication differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
    return
  fi
  local cmp
  if cmp=$(py tests/dist/compare.py "$tmp/$s-ref.jsonl" "$d.jsonl" "$tmp/$s-ref.st" "$d.st" $TOL $TENSOR_TOL); then
    ok
    printf '  %-5s %-40s %d ranks  %s\n' "$s" "$st" "$n" "$cmp"
  else
    bad "$s $st: $cmp"
  fi
}

# A GPT of 3 layers: pp=2 chooses the cut inside blocks.1 after its fc
# matmul, which the residual stream and the matmul's output cross (two
# messages per microbatch each way); pp=2:1.5+1.5 the one-tensor cut after
# its attention's residual add.
reference gpt3 && {
  check gpt3 2 pp=2 multi
  check gpt3 2 pp=2,schedule=gpipe multi
  check gpt3 2 pp=2:0.5+2.5,schedule=1f1b
  check gpt3 4 pp=2,schedule=interleaved:2 multi
  # interleaved chunks of the sizes given (pp x V of them, in the
  # schedule's order: rank 0's first chunk, rank 1's, rank 0's second, ...)
  check gpt3 2 pp=2:0.5+1+1+0.5,schedule=interleaved:2
  check gpt3 3 pp=3:1.5+1+0.5
  check gpt3 4 pp=4 multi
  check gpt3 4 pp=2,dp=2 multi
  check gpt3 4 pp=2,dp=2,zero=1 multi
  check gpt3 4 pp=2,tp=2 multi
  check gpt3 4 pp=2,tp=2,sp=megatron multi
  check gpt3 4 pp=2:1.5+1.5,tp=2,sp=megatron
  check gpt3 8 pp=2,tp=2,dp=2 multi
  # recompute in a stage that starts or ends inside a layer
  # pp=N:a.b: a fraction other than .5 falls at the boundary nearest that
  # share of the layer's FLOPs (here after blocks.0's qkv matmul and
  # blocks.1's fc matmul, two tensors each)
  check gpt3 3 pp=3:0.2+1.4+1.4,recompute=full multi
  check gpt3 2 pp=2,recompute=selective multi
}
# Attention-only layers (tests/dist/attn3.shard): the only cuts inside a
# layer carry two tensors; pp=2 cuts blocks.1 after its attention (the
# residual and the attention's output cross), pp=2:1.5+1.5 after its qkv
# matmul; with Megatron-SP the residual crosses sequence-split, the
# attention's output whole.
reference attn3 && {
  check attn3 2 pp=2 multi
  check attn3 2 pp=2:1.5+1.5,schedule=gpipe multi
  check attn3 4 pp=2,tp=2,sp=megatron,recompute=selective multi
  check attn3 4 pp=2,dp=2,zero=1 multi
}
reference gpt && {
  check gpt 2 pp=2:2.5+1.5,schedule=gpipe
  check gpt 4 pp=4:0.5+1.5+1+1,schedule=gpipe
  check gpt 4 pp=4:1.5+1+1+0.5,dp=1,schedule=1f1b
  check gpt 4 pp=2:1.5+0.5+1+1,dp=2,zero=1,schedule=interleaved:2
}
reference llama && {
  check llama 4 pp=2:1.5+2.5,tp=2
  check llama 4 pp=2:1+1.5+1+0.5,tp=2,sp=megatron,schedule=interleaved:2
  # three tensors cross blocks.3 between its swiglu's gate and up matmuls:
  # the residual, the rmsnorm's output and the gate's product
  check llama 2 pp=2:3.54+0.46 multi
}
finish
