#!/usr/bin/env bash
# Determinism and resume, on the tiny GPT under mpirun (4 ranks, dp=4):
# - the same seed and binary give bitwise-identical losses and checkpoints;
# - --save at step 10, then --load and continue to step 12, gives exactly the
#   losses and the final parameters and optimizer state of an uninterrupted
#   12-step run (the LR schedule spans the train block's steps either way);
# - a different --seed gives a different run.
#   tests/codegen/resume.sh SHARDC
bin="$1"
source "$(dirname "$0")/lib.sh"
need_mpi
small_models  # batches of 8 (lib.sh): the 4 ranks' rows do not matter here
build gpt "$tmp/gpt" || finish

run() {  # name args...: a run that must succeed
  local name="$1"
  shift
  train "$tmp/gpt" --quiet "$@"
  [ $rc -eq 0 ] || bad "$name: exit $rc: $(tail -5 <<<"$out")"
}

run A --steps 12 --log "$tmp/a.jsonl" --save "$tmp/a.ckpt"
run A2 --steps 12 --log "$tmp/a2.jsonl" --save "$tmp/a2.ckpt"
run B1 --steps 10 --log "$tmp/b.jsonl" --save "$tmp/b.ckpt"
run B2 --steps 12 --log "$tmp/b.jsonl" --load "$tmp/b.ckpt" --save "$tmp/b2.ckpt"
run C --steps 2 --log "$tmp/c.jsonl" --seed 7

if [ "$(losses "$tmp/a.jsonl")" = "$(losses "$tmp/a2.jsonl")" ] && [ -s "$tmp/a.jsonl" ]; then ok
else bad "two identical runs logged different losses"; diff <(losses "$tmp/a.jsonl") <(losses "$tmp/a2.jsonl") | head; fi
cmp -s "$tmp/a.ckpt" "$tmp/a2.ckpt" && ok || bad "two identical runs saved different checkpoints"

if [ "$(losses "$tmp/a.jsonl")" = "$(losses "$tmp/b.jsonl")" ]; then ok
else bad "save at 10 + load + continue differs from an uninterrupted run"; diff <(losses "$tmp/a.jsonl") <(losses "$tmp/b.jsonl") | head; fi
[ "$(losses "$tmp/b.jsonl" | wc -l)" = 12 ] && ok || bad "resumed log does not hold steps 1..12"
cmp -s "$tmp/a.ckpt" "$tmp/b2.ckpt" && ok || bad "resumed run ends with different parameters or optimizer state"

[ "$(losses "$tmp/c.jsonl" | head -2)" != "$(losses "$tmp/a.jsonl" | head -2)" ] && ok ||
  bad "--seed 7 gave the same losses as the default seed"

# --save-every writes intermediate checkpoints (step 2, then the end).
train "$tmp/gpt" --steps 3 --save "$tmp/e.ckpt" --save-every 2
[ $rc -eq 0 ] && grep -q "saved:    .*e.ckpt (step 2)" <<<"$out" && grep -q "saved:    .*e.ckpt (step 3)" <<<"$out" &&
  ok || bad "--save-every 2 over 3 steps: $out"
train "$tmp/gpt" --load "$tmp/e.ckpt" --steps 3
[ $rc -eq 0 ] && grep -q "nothing to do: the checkpoint is at step 3" <<<"$out" && ok ||
  bad "--load of the final checkpoint: $out"
finish
