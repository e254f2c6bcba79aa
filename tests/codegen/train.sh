#!/usr/bin/env bash
# End to end: `shardc build` every sample the cpu target handles, train it
# under mpirun with its planned rank count, and check that the loss falls
# (mlp, gpt) and that the planned peak arena bytes equal the measured
# high-water mark (every sample).  Also the train program's flags and help.
#   tests/codegen/train.sh SHARDC
bin="$1"
source "$(dirname "$0")/lib.sh"
need_mpi

# falls FILE.jsonl DROP: the mean loss of the last 5 steps is at least DROP
# below that of the first 5
falls() {
  losses "$1" | awk -v drop="$2" '{ l[NR] = $2 } END {
    if (NR < 10) exit 1
    for (i = 1; i <= 5; i++) { a += l[i]; b += l[NR - i + 1] }
    printf "loss %.4f -> %.4f\n", a / 5, b / 5
    exit !(a / 5 - b / 5 >= drop) }'
}

memory() {  # name: the last run printed equal planned and measured peaks
  local line
  line=$(grep "^memory:   planned peak" <<<"$out")
  local p m
  p=$(sed -n 's/.*planned peak \([0-9,]*\) bytes.*/\1/p' <<<"$line")
  m=$(sed -n 's/.*measured \([0-9,]*\) .*/\1/p' <<<"$line")
  if [ -n "$p" ] && [ "$p" = "$m" ]; then
    echo "$1: planned $p, measured $m"
    ok
  else
    bad "$1: planned and measured peak bytes differ: ${line:-no memory line}"
  fi
}

build mlp "$tmp/mlp" && {
  train "$tmp/mlp" --steps 150 --log "$tmp/mlp.jsonl"
  [ $rc -eq 0 ] || bad "mlp train: exit $rc: $(tail -3 <<<"$out")"
  memory mlp
  r=$(falls "$tmp/mlp.jsonl" 0.3) && { ok; echo "mlp: $r"; } || bad "mlp: the loss does not fall: $r"
  [ "$(losses "$tmp/mlp.jsonl" | wc -l)" = 150 ] && ok || bad "mlp: not 150 JSONL lines"
  # (the contract's keys first; then the model FLOP/s per device, in 10^12,
  # and MFU against the cpu device's fp32 peak, from the plan's count)
  grep -qE '^\{"step":1,"loss":[0-9.]+,"lr":[0-9.e-]+,"step_ms":[0-9.e+-]+,"tokens_per_s":[0-9]+,"model_tflops_per_device":[0-9.e+-]+,"mfu":[0-9.e+-]+\}$' \
    "$tmp/mlp.jsonl" && ok || bad "mlp: JSONL line format: $(head -1 "$tmp/mlp.jsonl")"
  # model_tflops_per_device = 16324224 FLOPs per step / step_ms / 1e9; mfu = that / the
  # peak in TFLOP/s: the plan's "device peak" figure (a cpu device is one core) times
  # the cores the rank's BLAS runs on, which the program says on its "mfu:" line when
  # they are not one (one rank alone on a node of several cores has them all)
  peak=$("$bin" compile samples/mlp.shard | sed -n 's/.*device peak \([0-9.e+-]*\) FLOP\/s.*/\1/p')
  mfu_agrees() { # LOG PEAK: every line's FLOP/s and MFU from its step_ms and PEAK
    awk -F'[:,}]' -v peak="$2" 'NR > 1 { ms = $8; t = $12; m = $14; want = 16324224 / (ms / 1e3) / 1e12
        p = peak / 1e12; if (p <= 0) bad = 1
        if (t < want * 0.99 || t > want * 1.01 || m < t / p * 0.99 || m > t / p * 1.01) bad = 1 }
        END { exit bad }' "$1"
  }
  # The rank's BLAS threads as the program chose them (one rank: every core)
  # multiply the peak; the program says so on its "mfu:" line (MFU had read
  # over 100% against one core's peak); with one thread, no line, one core
  rpeak=$(sed -n 's/^mfu: *against \([0-9.e+-]*\) FLOP\/s a rank: .* x [0-9.]* cores (.*/\1/p' <<<"$out")
  if [ "$(nproc)" -ge 2 ] && [ -z "${OPENBLAS_NUM_THREADS:-}" ]; then
    [ -n "$rpeak" ] && awk -v p="$peak" -v r="$rpeak" -v n="$(nproc)" \
        'BEGIN { exit !(r > 0.99 * n * p && r < 1.01 * n * p) }' &&
      mfu_agrees "$tmp/mlp.jsonl" "$rpeak" && ok ||
      bad "mlp: MFU not against $(nproc) cores' peak ($peak a core): $(grep '^mfu:' <<<"$out") $(sed -n 2p "$tmp/mlp.jsonl")"
  fi
  out1=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$tmp/mlp/train" --steps 4 --log "$tmp/mlp1.jsonl" 2>&1)
  ! grep -q '^mfu:' <<<"$out1" && mfu_agrees "$tmp/mlp1.jsonl" "$peak" && ok ||
    bad "mlp, 1 BLAS thread: MFU not against one core's peak ($peak): $(grep '^mfu:' <<<"$out1") $(sed -n 2p "$tmp/mlp1.jsonl")"
}

build gpt "$tmp/gpt" && {
  train "$tmp/gpt" --steps 12 --log "$tmp/gpt.jsonl"
  [ $rc -eq 0 ] || bad "gpt train: exit $rc: $(tail -3 <<<"$out")"
  memory gpt
  r=$(falls "$tmp/gpt.jsonl" 0.5) && { ok; echo "gpt: $r"; } || bad "gpt: the loss does not fall: $r"
  grep -q "^strategy: dp=4" <<<"$out" && grep -q "^data: .*tales.txt" <<<"$out" && ok ||
    bad "gpt: no plan or data line at start"
  grep -qE "^step 12/12 \| loss [0-9.]+ \| [0-9.]+k? tok/s \| [0-9.]+ [GT]FLOP/s/dev \| MFU [0-9.]+% \| ETA " <<<"$out" && ok ||
    bad "gpt: no progress line with FLOP/s and MFU: $(grep '^step' <<<"$out" | tail -1)"
  # --quiet prints nothing on success
  train "$tmp/gpt" --steps 1 --quiet
  [ $rc -eq 0 ] && [ -z "$out" ] && ok || bad "gpt --quiet printed: $out"
  train "$tmp/gpt" --help
  [ $rc -eq 0 ] && grep -q -- "--save-every N" <<<"$out" && grep -q "mpirun -np 4" <<<"$out" && ok ||
    bad "gpt --help: exit $rc: $out"
}

for s in llama mish; do
  build "$s" "$tmp/$s" && {
    train "$tmp/$s" --steps 2
    [ $rc -eq 0 ] || bad "$s train: exit $rc: $(tail -3 <<<"$out")"
    memory "$s"
  }
done
# Every op the cpu target emits (fused chains, dropout, softmax, rope, ...).
if out=$("$bin" build tests/codegen/ops.shard -o "$tmp/ops" 2>&1); then
  train "$tmp/ops" --steps 20 --log "$tmp/ops.jsonl"
  [ $rc -eq 0 ] || bad "ops train: exit $rc: $(tail -3 <<<"$out")"
  memory ops
  r=$(falls "$tmp/ops.jsonl" 0.2) && { ok; echo "ops: $r"; } || bad "ops: the loss does not fall: $r"
else
  bad "build ops: $out"
fi

# Usage errors exit 2 and say what is wrong.
[ -x "$tmp/mlp/train" ] && {
  train "$tmp/mlp" --steps -1
  [ $rc = 2 ] && grep -q -- "--steps needs a whole number >= 0" <<<"$out" && ok || bad "--steps -1: $rc $out"
  # --steps 0 --save writes the initial weights and trains nothing.
  rm -f "$tmp/init0.safetensors"
  train "$tmp/mlp" --steps 0 --save "$tmp/init0.safetensors"
  [ $rc = 0 ] && [ -s "$tmp/init0.safetensors" ] && grep -q "step 0" <<<"$out" && ok || bad "--steps 0 --save: $rc $out"
  train "$tmp/mlp" --frob
  [ $rc = 2 ] && grep -q "unknown argument '--frob'" <<<"$out" && ok || bad "--frob: $rc $out"
  train "$tmp/mlp" --save-every 5
  [ $rc = 2 ] && grep -q "needs --save" <<<"$out" && ok || bad "--save-every alone: $rc $out"
  train "$tmp/mlp" --data x.txt
  [ $rc = 2 ] && grep -q "takes no token data" <<<"$out" && ok || bad "--data on mlp: $rc $out"
}
finish
