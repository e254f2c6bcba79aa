#!/usr/bin/env bash
# Shampoo and Adafactor on one rank (the tiny GPT; docs/language.md):
# - the planned peak equals the measured one (the optimizer state and the
#   step's workspace are in the plan);
# - --save at step 15, then --load and continue to step 30 (6 and 12 under
#   OPTIM_QUICK, the sanitizer pass) gives exactly the losses, parameters
#   and optimizer state (factors, roots, grafting state) of an uninterrupted
#   run, with root recomputations on both sides of the checkpoint;
# - the checkpoint names the state by parameter and block;
# - a bad eigendecomposition or any other failure would stop the run: here
#   both root methods train (the loss falls).
#   tests/codegen/optim.sh SHARDC
bin="$1"
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
src=samples/gpt.shard
one=(--mesh 1 --strategy dp=1)
# N steps, saved at H; the sanitizer pass (OPTIM_QUICK, CI's time) runs 12
# with a checkpoint at 6 and the roots recomputed at steps 3, 7 and 11 (2
# and 7 for newton): both sides of the checkpoint still
N=30 H=15 FALL=1 SH="start_preconditioning = 8, precondition_every = 5" NW="start_preconditioning = 4, precondition_every = 10"
if [ -n "${OPTIM_QUICK:-}" ]; then
  N=12 H=6 FALL=0 SH="start_preconditioning = 3, precondition_every = 4" NW="start_preconditioning = 2, precondition_every = 5"
fi

# (batches of 4 sequences in microbatches of 2, not 16 in 4s: CI's time;
# the blocks, roots and checkpoints are the same)
variant() {  # NAME OPTIMIZER: samples/gpt.shard with that optimizer, N steps
  sed -e "s/optimizer = adamw([^)]*([^)]*)[^)]*)/optimizer = $2/" -e "s/steps = 300/steps = $N/" \
    -e "s/batch = 16, seq = ctx, microbatch = 4/batch = 4, seq = ctx, microbatch = 2/" \
    "$src" >"$tmp/$1.shard"
  grep -q "optimizer = $2" "$tmp/$1.shard" && grep -q "batch = 4, seq = ctx, microbatch = 2" "$tmp/$1.shard" ||
    bad "$1: could not set the optimizer and the batch"
  local out
  if ! out=$("$bin" build "$tmp/$1.shard" -o "$tmp/$1" "${one[@]}" 2>&1) || grep -q warning <<<"$out"; then
    bad "build $1: $out"
    return 1
  fi
}

check() {  # NAME: memory, resume, names
  local d="$tmp/$1"
  train "$d" --steps $N --log "$d/a.jsonl" --save "$d/a.ckpt"
  [ $rc -eq 0 ] || { bad "$1: exit $rc: $(tail -5 <<<"$out")"; return; }
  grep -qE "memory:   planned peak ([0-9,]+) bytes per rank, measured \1 " <<<"$out" && ok ||
    bad "$1: planned and measured peaks differ: $(grep memory: <<<"$out")"
  first=$(losses "$d/a.jsonl" | head -1 | cut -d' ' -f2)
  last=$(losses "$d/a.jsonl" | tail -1 | cut -d' ' -f2)
  awk -v a="$first" -v b="$last" -v f=$FALL 'BEGIN { exit !(b < a - f) }' && ok ||
    bad "$1: the loss did not fall ($first -> $last)"
  train "$d" --steps $H --log "$d/b.jsonl" --save "$d/b.ckpt" --quiet
  [ $rc -eq 0 ] || bad "$1: first half: $(tail -3 <<<"$out")"
  train "$d" --steps $N --log "$d/b.jsonl" --load "$d/b.ckpt" --save "$d/b2.ckpt" --quiet
  [ $rc -eq 0 ] || bad "$1: resume: $(tail -3 <<<"$out")"
  if [ "$(losses "$d/a.jsonl")" = "$(losses "$d/b.jsonl")" ]; then ok
  else bad "$1: save at $H + load + continue differs from an uninterrupted run"
    diff <(losses "$d/a.jsonl") <(losses "$d/b.jsonl") | head; fi
  cmp -s "$d/a.ckpt" "$d/b2.ckpt" && ok || bad "$1: resumed run ends with another state"
}

variant shampoo "shampoo(lr = 1e-3, betas = (0.9, 0.95), weight_decay = 0.1, warmup = 5, block = 48, $SH)" &&
  check shampoo
for k in momentum graft L.0 R.0 L_root.0 R_root.0 L.8 R_root.8; do
  grep -aq "\"optimizer.blocks.0.attn.qkv.weight.shampoo.$k\"" "$tmp/shampoo/a.ckpt" && ok ||
    bad "shampoo checkpoint lacks optimizer.blocks.0.attn.qkv.weight.shampoo.$k"
done
grep -aq '"optimizer.ln.weight.shampoo.L.0"' "$tmp/shampoo/a.ckpt" &&
  bad "a 1-D parameter has Shampoo factors" || ok
variant newton "shampoo(lr = 3e-3, betas = (0, 0.99), warmup = 5, block = 128, $NW, root = newton)" &&
  check newton
variant adafactor "adafactor(lr = 1e-2, beta1 = 0.9, weight_decay = 0.1, warmup = 5)" && check adafactor
for k in momentum row col; do
  grep -aq "\"optimizer.blocks.0.mlp.fc.weight.adafactor.$k\"" "$tmp/adafactor/a.ckpt" && ok ||
    bad "adafactor checkpoint lacks optimizer.blocks.0.mlp.fc.weight.adafactor.$k"
done
grep -aq '"optimizer.ln.bias.adafactor.v"' "$tmp/adafactor/a.ckpt" && ok ||
  bad "adafactor checkpoint lacks the full moment of a 1-D parameter"
finish
