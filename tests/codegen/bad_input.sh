#!/usr/bin/env bash
# Bad input at run time: every case is a clear message naming the file,
# tensor or step, a non-zero exit, and no existing checkpoint damaged,
# including a SIGKILL in the middle of writing one (whose temporary file the
# next save removes), nor any FIFO or device node --save is pointed at.  A
# diverging loss: a warning, or an error with --stop-on-divergence.  Also
# the wrong number of MPI ranks.
#   tests/codegen/bad_input.sh SHARDC
bin="$1"
source "$(dirname "$0")/lib.sh"
need_mpi
edit() { python3 tests/codegen/st_edit.py "$@"; }

build mish "$tmp/m" || finish          # a token model on one rank
m="$tmp/m"
train "$m" --steps 2 --save "$tmp/good.ckpt" --quiet
[ $rc -eq 0 ] && [ -s "$tmp/good.ckpt" ] && ok || bad "training the reference checkpoint: $out"
sum=$(md5sum <"$tmp/good.ckpt")

# ---- data ----
train "$m" --steps 1 --data "$tmp/nope.txt"
expect_fail "missing data" "$tmp/nope.txt: cannot open data file: No such file"
train "$m" --steps 1 --data "$tmp"
expect_fail "unreadable data (a directory)" "$tmp: data file is not a regular file"
# A FIFO: refused as a directory is (open() used to wait for a writer
# forever)
mkfifo "$tmp/in.fifo"
TRAIN_TIMEOUT=20 train "$m" --steps 1 --data "$tmp/in.fifo"
expect_fail "data from a FIFO" "in.fifo: data file is not a regular file"
printf 'too short' >"$tmp/short.txt"
train "$m" --steps 1 --data "$tmp/short.txt"
expect_fail "data shorter than a batch" "short.txt: 9 tokens .* shorter than one batch of B=4 windows of T=32"
python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<600H", *([65] * 300 + [300] + [66] * 299)))' >"$tmp/oov.bin"
train "$m" --steps 1 --data "$tmp/oov.bin"
expect_fail "token out of vocabulary" "oov.bin: token id 300 at byte offset 600 \(token 300\) is out of vocabulary \(vocab 256\)"

# ---- checkpoints ----
train "$m" --steps 3 --load "$tmp/nope.ckpt"
expect_fail "missing checkpoint" "nope.ckpt"
TRAIN_TIMEOUT=20 train "$m" --steps 3 --load "$tmp/in.fifo"
expect_fail "a FIFO as the checkpoint" "in.fifo: not a regular file"
# An empty value names its flag
for flag in --data --load --save --log; do
  train "$m" --steps 1 $flag ''
  [ $rc -eq 2 ] && grep -q "^train: error: $flag needs a non-empty value, got ''$" <<<"$out" && ok ||
    bad "$flag '': the message does not name the flag (exit $rc): $out"
done
edit "$tmp/good.ckpt" "$tmp/hdr.ckpt" header
train "$m" --steps 3 --load "$tmp/hdr.ckpt"
expect_fail "wrong header" "hdr.ckpt"
edit "$tmp/good.ckpt" "$tmp/trunc.ckpt" truncate
train "$m" --steps 3 --load "$tmp/trunc.ckpt"
expect_fail "truncated checkpoint" "trunc.ckpt"
edit "$tmp/good.ckpt" "$tmp/drop.ckpt" drop blocks.1.mlp.fc.weight
train "$m" --steps 3 --load "$tmp/drop.ckpt"
expect_fail "missing tensor" "^  missing tensors \(1 of the [0-9]+ expected\): 'blocks.1.mlp.fc.weight'$"
edit "$tmp/good.ckpt" "$tmp/extra.ckpt" extra blocks.9.surprise
train "$m" --steps 3 --load "$tmp/extra.ckpt"
expect_fail "extra tensor" "^  unexpected tensors \(1 of the [0-9]+ in the file\): 'blocks.9.surprise'$"
edit "$tmp/good.ckpt" "$tmp/shape.ckpt" reshape pos.weight
train "$m" --steps 3 --load "$tmp/shape.ckpt"
expect_fail "wrong shape" "^  tensor 'pos.weight' has shape \[2048\], expected \[32, ?64\]$"
edit "$tmp/good.ckpt" "$tmp/dtype.ckpt" dtype ln.bias
train "$m" --steps 3 --load "$tmp/dtype.ckpt"
expect_fail "wrong dtype" "^  tensor 'ln.bias' has dtype F64, expected F32(;|$)"
expect_fail "the models of a mismatched checkpoint" "^  model: 'gpt_mish' in the file and in this program$"
# A checkpoint of another model: both models, how many tensors are missing
# and unexpected and the first few of each, in a few short lines (it was one
# line of 4,110 bytes, cut mid-word by the error buffer).
build mlp "$tmp/mlp" && {
  train "$tmp/mlp" --steps 1 --load "$tmp/good.ckpt"
  expect_fail "another model's checkpoint" "^train: error: .*good.ckpt: checkpoint does not match the model$"
  expect_fail "another model's checkpoint: the models" "^  model: 'gpt_mish' in the file, 'mlp3' in this program$"
  expect_fail "another model's checkpoint: missing" "^  missing tensors \(12 of the 12 expected\): 'dense_1.linear.weight', ('[a-z0-9_.]+', ){3}'[a-z0-9_.]+' and 7 more$"
  expect_fail "another model's checkpoint: unexpected" "^  unexpected tensors \(84 of the 84 in the file\): ('[a-z0-9_.]+', ){4}'[a-z0-9_.]+' and 79 more$"
  [ "$(wc -l <<<"$out")" -le 6 ] && ! grep -q '.\{300\}' <<<"$out" && ok ||
    bad "another model's checkpoint: not a few short lines: $out"
}

# ---- saving ----
train "$m" --steps 2 --save "$tmp/no/such/dir/x.ckpt"
expect_fail "--save into a missing directory" "no/such/dir/x.ckpt: cannot save a checkpoint there"
train "$m" --steps 2 --save "$tmp"
expect_fail "--save to a directory" "cannot save a checkpoint there: it is a directory"
# Nor onto a FIFO or a device node (the save's rename would replace it: as
# root, --save /dev/null replaced /dev/null), directly or through a link;
# refused before training, the node left as it was.
mkfifo "$tmp/fifo" && ln -s "$tmp/fifo" "$tmp/fifo.link"
for target in fifo fifo.link; do
  train "$m" --steps 2 --save "$tmp/$target"
  expect_fail "--save to a FIFO ($target)" "$target: cannot save a checkpoint there: it is a FIFO, not a regular file \(a save would replace it\)"
  ! grep -q "^train:    steps" <<<"$out" && [ -p "$tmp/fifo" ] && [ -L "$tmp/fifo.link" ] && ok ||
    bad "--save to a FIFO ($target): trained, or the FIFO was replaced"
done
if mknod "$tmp/null" c 1 3 2>/dev/null; then     # needs root (CAP_MKNOD)
  train "$m" --steps 2 --save "$tmp/null"
  expect_fail "--save to a device" "null: cannot save a checkpoint there: it is a character device, not a regular file"
  [ -c "$tmp/null" ] && ok || bad "--save to a device node replaced it"
fi
# A checkpoint holding a NaN or an infinity is refused at load, naming the
# tensor (training from it used to stop at a NaN loss, or in Shampoo's
# eigendecomposition)
edit "$tmp/good.ckpt" "$tmp/inf.ckpt" poison ln.weight
train "$m" --steps 5 --load "$tmp/inf.ckpt"
expect_fail "inf in a loaded checkpoint" "^train: error: checkpoint .*/inf.ckpt: tensor 'ln.weight' holds \+inf at element 0$"
edit "$tmp/good.ckpt" "$tmp/nan.ckpt" poison optimizer.exp_avg_sq.blocks.1.mlp.fc.weight nan
train "$m" --steps 5 --load "$tmp/nan.ckpt"
expect_fail "NaN in a loaded optimizer state" "^train: error: checkpoint .*/nan.ckpt: tensor 'optimizer.exp_avg_sq.blocks.1.mlp.fc.weight' holds NaN at element 0$"
# A diverged update (the test hook SHARDC_TEST_NAN_AFTER=1 leaves a NaN in
# the first parameter after step 1's update, as Shampoo with an epsilon of
# 1e-300, now refused by the frontend, did: roots of 1e75, infinite in
# fp32): the first step's loss is finite and its update leaves NaN weights,
# which no save may write (one used to overwrite the last good checkpoint
# with them, or exit 0 after writing them); then the loss is NaN.  On one
# rank and on two (tp=2: the ranks' shards gathered).  Shampoo, for the
# optimizer-mismatch check below.
sed 's/adamw(lr = 1e-3)/shampoo(lr = 1e-3, block = 32, start_preconditioning = 0)/' \
  samples/mish.shard >"$tmp/blowup.shard"
cp samples/acts.h "$tmp/"
grep -q "shampoo(lr" "$tmp/blowup.shard" || bad "blowup: could not set the optimizer"
nonfinite() {  # DIR
  local d="$1"
  export SHARDC_TEST_NAN_AFTER=1
  train "$d" --steps 1 --save "$d/x.ckpt"
  expect_fail "$d: a non-finite update, then --save" "^train: error: after step 1, tensor '[a-z0-9_.]+' holds (NaN|[+-]inf) at element [0-9]+: not saving .*/x.ckpt \(nothing was saved\); training diverged: lower the learning rate or check the optimizer's settings$"
  [ ! -e "$d/x.ckpt" ] && ! grep -q "^saved:" <<<"$out" && ok || bad "$d: a non-finite checkpoint was written"
  train "$d" --steps 0 --save "$d/g.ckpt" --quiet
  local s0; s0=$(md5sum <"$d/g.ckpt")
  train "$d" --load "$d/g.ckpt" --steps 3 --save "$d/g.ckpt" --save-every 1
  expect_fail "$d: a non-finite update, then --save-every" "after step 1, tensor .* not saving .*/g.ckpt \(it keeps its last good state\)"
  [ "$(md5sum <"$d/g.ckpt")" = "$s0" ] && ! grep -q "^saved:" <<<"$out" && ok ||
    bad "$d: --save-every overwrote the good checkpoint"
  # without --save-every the loss of step 2 is NaN: nothing is saved
  train "$d" --load "$d/g.ckpt" --steps 3 --save "$d/g.ckpt"
  expect_fail "$d: a NaN loss" "step 2: the loss is (NaN|infinite); stopping without saving \(.*g.ckpt keeps its last good state\)"
  train "$d" --steps 3 --save "$d/y.ckpt"
  expect_fail "$d: a NaN loss, nothing saved yet" "step 2: the loss is (NaN|infinite); stopping without saving \(nothing was saved\)"
  [ "$(md5sum <"$d/g.ckpt")" = "$s0" ] && [ ! -e "$d/y.ckpt" ] && ok || bad "$d: a NaN loss changed a checkpoint"
  unset SHARDC_TEST_NAN_AFTER
}
if out=$("$bin" build "$tmp/blowup.shard" -o "$tmp/blowup" 2>&1); then
  nonfinite "$tmp/blowup"
  # another optimizer's checkpoint: which one, and what loads
  train "$tmp/blowup" --steps 3 --load "$tmp/good.ckpt"
  expect_fail "another optimizer's checkpoint" "^  optimizer: the checkpoint was written by adamw, this program trains with shampoo \\(block [0-9]+\\): its parameters alone load from a copy without the optimizer.\* tensors and the \"step\" metadata \(the optimizer then starts from zero\)$"
else
  bad "build blowup: $out"
fi
if out=$("$bin" build "$tmp/blowup.shard" -o "$tmp/blowup2" --mesh 2 --strategy tp=2 2>&1); then
  nonfinite "$tmp/blowup2"
  # a FIFO on two ranks: every rank refuses it, none waits
  TRAIN_TIMEOUT=20 train "$tmp/blowup2" --steps 1 --load "$tmp/in.fifo"
  expect_fail "a FIFO as the checkpoint (2 ranks)" "in.fifo: not a regular file"
  TRAIN_TIMEOUT=20 train "$tmp/blowup2" --steps 1 --data "$tmp/in.fifo"
  expect_fail "data from a FIFO (2 ranks)" "in.fifo: data file is not a regular file"
else
  bad "build blowup on 2 ranks: $out"
fi
# Over a file size limit the save fails with a message (SIGXFSZ used to
# kill the run silently), the existing file intact
cp "$tmp/good.ckpt" "$tmp/big.ckpt"
half=$(($(stat -c %s "$tmp/good.ckpt") / 1024))   # half the checkpoint, in 512-byte blocks
out=$(ulimit -f $half; timeout 300 "$m/train" --steps 2 --save "$tmp/big.ckpt" 2>&1); rc=$?
expect_fail "a save over the file size limit" "big.ckpt: (write|flush) of temporary file .* failed: File too large \(over the process's file size limit: ulimit -f\)"
[ "$(md5sum <"$tmp/big.ckpt")" = "$sum" ] && ok || bad "a save over the file size limit changed the checkpoint"
rm -f "$tmp"/big.ckpt.tmp.*
# SIGKILL in the middle of writing the checkpoint (test hook): the previous
# file is intact and still loads; the temporary file is left behind.
cp "$tmp/good.ckpt" "$tmp/run.ckpt"
SHARDC_TEST_DIE_IN_SAVE=1 train "$m" --steps 4 --load "$tmp/run.ckpt" --save "$tmp/run.ckpt"
if [ $rc -eq 137 ] && grep -q "killed (SIGKILL) while writing the checkpoint" <<<"$out"; then ok
else bad "the save test hook did not kill the run (exit $rc): $(tail -3 <<<"$out")"; fi
ls "$tmp"/run.ckpt.tmp.* >/dev/null 2>&1 && [ -s "$(ls "$tmp"/run.ckpt.tmp.* | head -1)" ] && ok ||
  bad "no partly written temporary file: the kill did not land during the write"
[ "$(md5sum <"$tmp/run.ckpt")" = "$sum" ] && ok || bad "a kill during --save damaged the previous checkpoint"
train "$m" --steps 3 --load "$tmp/run.ckpt"
[ $rc -eq 0 ] && grep -q "loaded:   .*run.ckpt (step 2)" <<<"$out" && ok || bad "the previous checkpoint no longer loads: $out"
# The next save to that path removes the temporary file of the killed run
# and says so; those of a live process (this shell) and of a writer holding
# the file's lock (a process that exists elsewhere, as on another node)
# stay.
dead=$(ls "$tmp"/run.ckpt.tmp.* | head -1)
dead_pid=${dead##*.}
: >"$tmp/run.ckpt.tmp.$$"
exec {lockfd}>"$tmp/run.ckpt.tmp.99999999" && flock "$lockfd"   # this shell holds the lock
train "$m" --steps 3 --load "$tmp/run.ckpt" --save "$tmp/run.ckpt"
[ $rc -eq 0 ] && grep -qE "^removed:  .*/run.ckpt.tmp.$dead_pid \([0-9,]+ bytes\), the temporary file of an interrupted save \(process $dead_pid no longer exists\)$" <<<"$out" &&
  [ ! -e "$dead" ] && ok || bad "the killed save's temporary file was not removed, or not said: $out"
[ "$(grep -c "^removed:" <<<"$out")" = 1 ] && [ -e "$tmp/run.ckpt.tmp.$$" ] &&
  [ -e "$tmp/run.ckpt.tmp.99999999" ] && ok || bad "a live or locked temporary file was removed: $out"
exec {lockfd}>&-
rm -f "$tmp/run.ckpt.tmp.$$" "$tmp/run.ckpt.tmp.99999999"

# ---- divergence ----
# AdamW at lr 10: the loss soon exceeds 10 times its first value. One
# warning, and the run goes on; --stop-on-divergence stops it (exit 1)
# without saving.
sed 's/sgd(lr = 0.05, momentum = 0.9)/adamw(lr = 10)/' samples/mlp.shard >"$tmp/mlp_lr10.shard"
if out=$("$bin" build "$tmp/mlp_lr10.shard" -o "$tmp/div" 2>&1); then
  train "$tmp/div" --steps 20
  [ $rc -eq 0 ] && [ "$(grep -c "warning" <<<"$out")" = 1 ] &&
    grep -qE "^train: warning: step [0-9]+: the loss [0-9.e+]+ is over 10 times its first value \([0-9.]+ at step 1\): training is diverging; lower the learning rate, or pass --stop-on-divergence to stop such a run$" <<<"$out" &&
    ok || bad "a diverging run: no single clear warning (exit $rc): $out"
  train "$tmp/div" --steps 1 --save "$tmp/div.ckpt" --quiet
  sum=$(md5sum <"$tmp/div.ckpt")
  train "$tmp/div" --steps 20 --save "$tmp/div.ckpt" --stop-on-divergence
  expect_fail "--stop-on-divergence" "^train: error: step [0-9]+: the loss .* is over 10 times its first value .*: training diverged; stopping without saving \(.*div.ckpt keeps its last good state\)"
  [ "$(md5sum <"$tmp/div.ckpt")" = "$sum" ] && ok || bad "--stop-on-divergence changed the checkpoint"
else
  bad "build mlp at lr 10: $out"
fi

# ---- ranks ----
build gpt "$tmp/gpt" && {
  out=$(timeout 120 "${MPIRUN[@]}" -np 2 "$tmp/gpt/train" --steps 1 2>&1); rc=$?
  expect_fail "gpt on 2 ranks" "planned for 4 ranks \(mesh laptop: dp=4\) but runs on 2; run it as: mpirun -np 4 "
  out=$(timeout 120 "$tmp/gpt/train" --steps 1 2>&1); rc=$?
  expect_fail "gpt without mpirun" "planned for 4 ranks .* but runs on 1; run it as: mpirun -np 4 "
}
out=$(timeout 120 "${MPIRUN[@]}" -np 2 "$m/train" --steps 1 2>&1); rc=$?
expect_fail "one-rank program under mpirun -np 2" "planned for 1 rank but was launched on 2; run it directly"

# ---- the node's memory ----
# A plan whose arenas exceed what the node has left is refused before any
# arena is created (each is zeroed when created: the OOM killer would end
# the run, with no word of why), the checkpoint untouched;
# SHARDC_NODE_MEMORY (bytes) stands in for MemAvailable.
cp "$tmp/good.ckpt" "$tmp/mem.ckpt"
sum=$(md5sum <"$tmp/mem.ckpt")
SHARDC_NODE_MEMORY=1000000 train "$m" --steps 2 --save "$tmp/mem.ckpt"
expect_fail "a plan over the node's memory" "^train: error: the plan needs [0-9.]+ MiB of memory on this node \(one rank's arena\) and the node has 1000000 bytes available \(SHARDC_NODE_MEMORY\); plan with less memory a rank .* \(SHARDC_NO_MEMCHECK=1 skips this check\)$"
[ "$(md5sum <"$tmp/mem.ckpt")" = "$sum" ] && ok || bad "the memory check changed the checkpoint"
SHARDC_NODE_MEMORY=1000000 SHARDC_NO_MEMCHECK=1 train "$m" --steps 1 --quiet
[ $rc -eq 0 ] && ok || bad "SHARDC_NO_MEMCHECK=1: the run did not go on (exit $rc): $out"
# every rank of the node counted, and every rank stops (no hang)
[ -x "$tmp/gpt/train" ] && {
  out=$(SHARDC_NODE_MEMORY=50000000 timeout 120 "${MPIRUN[@]}" -x SHARDC_NODE_MEMORY -np 4 "$tmp/gpt/train" --steps 1 2>&1); rc=$?
  expect_fail "4 ranks over the node's memory" "^train: error: the plan needs 87.08 MiB of memory on this node \(4 ranks' arenas, this one's 21.77 MiB\) and the node has 47.68 MiB available"
}
# A container's limit (cgroup v2's memory.max less the usage, page cache
# that the kernel drops not counted; v1's memory.limit_in_bytes alike), in
# a tree of the test's own (SHARDC_CGROUP_ROOT for /sys/fs/cgroup)
[ -x "$tmp/gpt/train" ] && {
  cg="$tmp/cgroup"
  mkdir -p "$cg/memory"
  echo 100000000 >"$cg/memory.max"
  echo 50000000 >"$cg/memory.current"
  printf 'anon 30000000\ninactive_file 20000000\n' >"$cg/memory.stat"
  out=$(SHARDC_CGROUP_ROOT="$cg" timeout 120 "${MPIRUN[@]}" -x SHARDC_CGROUP_ROOT -np 4 "$tmp/gpt/train" --steps 1 2>&1); rc=$?
  expect_fail "4 ranks over a cgroup v2 limit" "^train: error: the plan needs 87.08 MiB of memory on this node .* and the node has 66.76 MiB available \(the cgroup's memory limit less its usage\)"
  printf 'anon 30000000\ninactive_file 45000000\n' >"$cg/memory.stat"
  out=$(SHARDC_CGROUP_ROOT="$cg" timeout 120 "${MPIRUN[@]}" -x SHARDC_CGROUP_ROOT -np 4 "$tmp/gpt/train" --steps 1 --quiet 2>&1); rc=$?
  [ $rc -eq 0 ] && ok || bad "4 ranks within a cgroup v2 limit once its page cache is counted free (exit $rc): $out"
  rm "$cg/memory.max" "$cg/memory.current" "$cg/memory.stat"
  echo 80000000 >"$cg/memory/memory.limit_in_bytes"
  echo 10000000 >"$cg/memory/memory.usage_in_bytes"
  printf 'cache 5000000\ntotal_inactive_file 5000000\n' >"$cg/memory/memory.stat"
  out=$(SHARDC_CGROUP_ROOT="$cg" timeout 120 "${MPIRUN[@]}" -x SHARDC_CGROUP_ROOT -np 4 "$tmp/gpt/train" --steps 1 2>&1); rc=$?
  expect_fail "4 ranks over a cgroup v1 limit" "^train: error: the plan needs 87.08 MiB .* and the node has 71.53 MiB available \(the cgroup's memory limit less its usage\)"
}

# The node's own figure (MemAvailable, or a container's cgroup limit): a
# plan of about 2 TB on one rank (built past the compiler's memory check).
# Should the check let it through, the allocation must fail cleanly, not
# wake the OOM killer: a virtual memory limit sees to it (not under the
# sanitizer, whose shadow memory needs terabytes of address space: there
# the kernel's overcommit heuristic refuses 2 TB, unless told to grant all)
sed 's/batch = [0-9]*, seq = ctx, microbatch = 4/batch = 1048576, seq = ctx, microbatch = 1048576/' \
  samples/gpt.shard >"$tmp/huge.shard"
if [[ "$(ldd "$tmp/gpt/train" 2>/dev/null)" == *libasan* ]] && [ "$(cat /proc/sys/vm/overcommit_memory 2>/dev/null)" = 1 ]; then
  echo "(skipped: a 2 TB plan under the sanitizer with vm.overcommit_memory = 1)"
elif out=$("$bin" build "$tmp/huge.shard" --mesh 1 --strategy dp=1 --no-memory-check -o "$tmp/huge" 2>&1); then
  if [[ "$(ldd "$tmp/huge/train" 2>/dev/null)" == *libasan* ]]; then
    out=$(timeout 60 "$tmp/huge/train" --steps 1 2>&1); rc=$?
  else
    out=$(ulimit -v 8000000; timeout 60 "$tmp/huge/train" --steps 1 2>&1); rc=$?
  fi
  expect_fail "a plan over this node's memory" "^train: error: the plan needs [0-9.]+ GiB of memory on this node \(one rank's arena\) and the node has [0-9.]+ GiB available \((MemAvailable in /proc/meminfo|the cgroup's memory limit less its usage)\)"
else
  bad "build a 2 TB plan with --no-memory-check: $out"
fi
finish
