#!/usr/bin/env bash
# Bit-for-bit comparison of training runs between two shardc compilers, for
# refactors that must not change what users get.  Every sample under every
# strategy of tests/dist/equiv.sh and bench/strategies.sh is built and
# trained for STEPS (default 20) steps with one thread per rank; per run it
# records the JSONL losses and learning rates (the timing fields dropped),
# the SHA-256 of the final checkpoint (parameters and optimizer state), and
# the planned and measured memory and communication lines of step 1.
#
#   tests/dist/bitexact.sh SHARDC OUTDIR            record into OUTDIR
#   tests/dist/bitexact.sh SHARDC OUTDIR REFDIR     record, then compare with REFDIR
#
# The comparison passes only when every file of REFDIR is byte-identical in
# OUTDIR.  Results depend on the CPU's BLAS kernels, so both records must
# come from the same machine (it is a tool, not a CI test).
set -uo pipefail
bin="$(realpath "$1")"
out="$(mkdir -p "$2" && realpath "$2")"
ref="${3:-}"
steps="${STEPS:-20}"
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 SHARDC_STRICT_COMM=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardc-bitexact.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0

# run SAMPLE RANKS STRATEGY
run() {
  local s="$1" n="$2" st="$3"
  local name="$s-$n-${st//[=,:]/_}" d="$tmp/b"
  rm -rf "$d"
  if ! "$bin" build "samples/$s.shard" -o "$d" --mesh "$n" --strategy "$st" >"$tmp/build.log" 2>&1; then
    echo "build failed: $name"; sed -n 1,5p "$tmp/build.log"; failed=1; return
  fi
  local cmd=("$d/train")
  [ "$n" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$n" "$d/train")
  if ! timeout 600 "${cmd[@]}" --steps "$steps" --log "$tmp/log.jsonl" --save "$tmp/ck.st" \
       >"$tmp/run.log" 2>&1; then
    echo "run failed: $name"; tail -5 "$tmp/run.log"; failed=1; return
  fi
  sed 's/,"step_ms".*/}/' "$tmp/log.jsonl" >"$out/$name.losses"
  sha256sum <"$tmp/ck.st" | cut -d' ' -f1 >"$out/$name.ckpt"
  grep -E '^(memory|comm): ' "$tmp/run.log" >"$out/$name.lines"
  rm -f "$tmp/log.jsonl" "$tmp/ck.st"
  echo "recorded $name"
}

for s in gpt llama mlp mish; do run "$s" 1 dp=1; done
run mlp 2 dp=2
run mish 2 dp=2
# tests/dist/equiv.sh
for a in "2 dp=2" "2 tp=2" "2 tp=2,sp=megatron" "4 dp=4" "4 tp=4" "4 tp=2,dp=2" \
         "4 tp=4,sp=megatron" "4 tp=2,sp=megatron,dp=2" "8 tp=4,dp=2" "8 tp=2,sp=megatron,dp=4" \
         "4 dp=4,zero=1" "4 tp=2,dp=2,zero=1" "8 tp=2,sp=megatron,dp=4,zero=1" \
         "2 pp=2,schedule=gpipe" "2 pp=2,schedule=1f1b" "2 pp=2:3+1" "2 pp=2,schedule=interleaved:2" \
         "4 pp=2,dp=2,schedule=interleaved:2" "4 pp=4,schedule=1f1b" "4 pp=2,tp=2" "4 pp=2,dp=2,zero=1" \
         "8 tp=2,pp=2,dp=2" "8 tp=2,sp=megatron,pp=2,dp=2" "2 sp=ring:2" "4 dp=2,sp=ring:2" \
         "4 sp=ring:4" "4 tp=2,sp=ring:2" "4 dp=2,sp=ring:2,zero=1" "4 sp=ring:4,zero=3" \
         "4 dp=4,zero=2" "4 dp=4,zero=3" "2 dp=2,zero=3" "4 tp=2,dp=2,zero=3" \
         "4 tp=2,sp=megatron,dp=2,zero=2" "4 pp=2,dp=2,zero=3" "4 tp2d=2x2" "8 tp2d=2x2,dp=2" \
         "8 tp2d=2x2,pp=2" "8 tp2d=2x2,dp=2,zero=3"; do
  run gpt $a
done
for a in "2 tp=2" "4 tp=2,dp=2" "4 tp=2,sp=megatron,dp=2" "4 pp=2,tp=2" \
         "4 pp=2,tp=2,schedule=interleaved:2" "2 sp=ring:2" "4 tp=2,sp=ring:2" "2 dp=2,zero=3" \
         "4 tp=2,dp=2,zero=2" "4 tp2d=2x2"; do
  run llama $a
done
run mlp 4 tp2d=2x2
# bench/strategies.sh (those not above)
for a in tp=2,dp=2,mb=2 tp=2,sp=megatron,dp=2,mb=2 pp=4,schedule=gpipe pp=2,dp=2 \
         sp=ring:2,dp=2,zero=1; do
  run gpt 4 "$a"
done

if [ -n "$ref" ]; then
  if diff -r "$ref" "$out" >"$tmp/diff"; then
    echo "bitexact: $(ls "$ref" | wc -l) files identical to $ref"
  else
    echo "bitexact: DIFFERENT from $ref:"; head -40 "$tmp/diff"; failed=1
  fi
fi
exit $failed
