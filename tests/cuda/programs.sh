#!/usr/bin/env bash
# The CUDA programs run on this CPU (issue 10): `shardc build --target
# cuda-host` builds the very program --target cuda writes, with the kernels
# through runtime/cuda/host/cuda_host.h, cuBLASLt as OpenBLAS and NCCL as
# MPI.  The tiny GPT and the classifier train 10 steps and must give the cpu
# target's per-step losses and final checkpoint within 1e-4; plans on 2 and
# 4 ranks (NCCL collectives and overlapped buckets; ZeRO; a pipeline, whose
# messages are staged; 2D tensor parallelism and ring attention, whose
# instructions are staged through the host mirror) train 3 steps against
# the 1-rank cpu run.  Every run's planned memory equals the device arena's
# high-water mark and, on a mesh, the bytes sent equal the plan's.
#   tests/cuda/programs.sh SHARDC
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
export SHARDC_STRICT_COMM=1

# same NAME DIR STEPS REF: DIR's run (DIR.jsonl, DIR.st) against REF's
same() {
  local name="$1" d="$2" steps="$3" ref="$4"
  train "$d" --steps "$steps" --log "$d.jsonl" --save "$d.st"
  if [ $rc -ne 0 ]; then bad "$name: exit $rc: $(tail -5 <<<"$out")"; return; fi
  if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out"; then
    bad "$name: memory or communication differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
    return
  fi
  local cmp
  if cmp=$(tests/dist/compare.py "$ref.jsonl" "$d.jsonl" "$ref.st" "$d.st" 1e-4); then
    ok
    printf '  %-36s %s\n' "$name" "$cmp"
  else
    bad "$name: $cmp"
  fi
}

# reference SAMPLE STEPS: the cpu target on one rank
reference() {
  build "$1" "$tmp/$1-cpu" --mesh 1 --strategy dp=1 || return 1
  train "$tmp/$1-cpu" --steps "$2" --quiet --log "$tmp/$1-cpu.jsonl" --save "$tmp/$1-cpu.st"
  [ $rc -eq 0 ] || { bad "$1 cpu reference: $out"; return 1; }
}

# host SAMPLE RANKS STRATEGY STEPS
host() {
  local s="$1" n="$2" st="$3" steps="$4"
  local d="$tmp/$s-cuda-${st//[=,:]/_}"
  build "$s" "$d" --target cuda-host --mesh "$n" --strategy "$st" || return
  same "$s cuda-host $st ($n rank$([ "$n" = 1 ] || echo s))" "$d" "$steps" "$tmp/$s-cpu"
}

reference mlp 10 && host mlp 1 dp=1 10
reference gpt 10 && host gpt 1 dp=1 10
if command -v mpirun >/dev/null && command -v mpicxx >/dev/null; then
  reference gpt 3 && {
    host gpt 2 dp=2 3
    host gpt 2 tp=2,sp=megatron 3
    host gpt 4 tp=2,dp=2,zero=1 3
    host gpt 2 dp=2,zero=3 3
    host gpt 2 pp=2,schedule=1f1b 3
    host gpt 4 tp2d=2x2 3
    host gpt 2 sp=ring:2 3
  }
else
  echo "SKIP: the mesh runs need MPI (mpirun, libshardrt_cuda_dist_host)"
fi

# The CUDA-only flag on a cpu program is a usage error, not ignored.
build mlp "$tmp/mlp-flag" --mesh 1 --strategy dp=1 && {
  train "$tmp/mlp-flag" --steps 1 --comm mpi
  [ $rc -eq 2 ] && grep -q "for programs built with --target cuda" <<<"$out" && ok ||
    bad "--comm on a cpu program: exit $rc: $out"
}
finish
