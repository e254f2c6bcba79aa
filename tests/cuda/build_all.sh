#!/usr/bin/env bash
# Every sample and every strategy of the equivalence matrix builds for the
# GPU (issue 10): `shardc build --target cuda` writes model.cu and nvcc
# compiles and links it against libshardrt_cuda, cuBLASLt and NCCL with no
# warning (-Werror all-warnings).  The matrix is tests/dist/equiv.sh's own
# list of `check SAMPLE RANKS STRATEGY` lines, plus bf16 plans and the
# Shampoo and Adafactor programs of tests/dist.  Without nvcc (or without
# the GPU libraries in this build of shardc) the test is skipped.
#   tests/cuda/build_all.sh SHARDC [JOBS]
bin="$(realpath "$1")"
jobs="${2:-2}"
source "$(dirname "$0")/../codegen/lib.sh"
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "SKIP: no nvcc (the CUDA toolkit is not installed): the GPU builds are not checked"
  exit 77
fi
probe=$("$bin" build samples/mlp.shard --target cuda -o "$tmp/probe" 2>&1)
if grep -q "needs nvcc\|is not built" <<<"$probe"; then
  echo "SKIP: this build of shardc has no GPU libraries: $probe"
  exit 77
fi

# one line per build: SAMPLE RANKS STRATEGY (the samples with their own plans first)
{
  for s in samples/*.shard; do echo "$(basename "$s" .shard) - -"; done
  # (each strategy once, with the first model that runs it: the samples
  # above already build every model; CI's time)
  sed -n 's/^ *check \([a-z0-9_]*\) \([0-9]*\) \([^ ]*\) *$/\1 \2 \3/p' tests/dist/equiv.sh |
    awk '!seen[$3]++'
  # equiv.sh's lines on a variant of their model (a path as 4th word): here
  # the one it has, the gpt with microbatches of 2 (4 of them per step)
  echo "$tmp/gptmb2.shard 4 pp=2,dp=2,zero=2,schedule=interleaved:2,mb=4"
  # precision = bf16 (16-bit activations: each parallel form's launchers
  # and collectives in their bf16 overloads)
  for st in "1 dp=1" "4 tp=2,sp=megatron,dp=2" "4 tp2d=2x2" "2 pp=2,schedule=1f1b" \
            "4 dp=2,pp=2,schedule=interleaved:2" "2 dp=2,zero=3" "4 tp=2,dp=2,zero=1" \
            "2 sp=ring:2"; do
    echo "$tmp/gpt_bf16.shard $st"
  done
  echo "$tmp/llama_bf16.shard 2 tp=2,sp=megatron"
  # Shampoo and Adafactor (runtime/cuda/k_optim2.cu, cuBLAS): one rank, and
  # placed over the data ranks
  for st in "1 dp=1" "2 dp=2"; do
    echo "gpt_shampoo $st"
    echo "gpt_adafactor $st"
  done
} | sort -u >"$tmp/matrix"
sed 's/microbatch = 4/microbatch = 2/' samples/gpt.shard >"$tmp/gptmb2.shard"
for s in gpt llama; do
  sed 's/precision = fp32/precision = bf16/' "samples/$s.shard" >"$tmp/${s}_bf16.shard"
  grep -q "precision = bf16" "$tmp/${s}_bf16.shard" ||
    sed -i 's/^train {/train {\n  precision = bf16/' "$tmp/${s}_bf16.shard"
done

# build1 SAMPLE RANKS STRATEGY: prints "ok ..." or the failure
build1() {
  local s="$1" n="$2" st="$3" src="samples/$1.shard" d out
  [ -f "$src" ] || src="tests/dist/$1.shard"
  [ -f "$src" ] || src="$1"   # a path (the bf16 copies)
  s=$(basename "$s" .shard)
  d="$tmp/b-$s-$n-${st//[=,:]/_}"
  local args=(build "$src" -o "$d" --target cuda)
  [ "$n" = - ] || args+=(--mesh "$n" --strategy "$st")
  if ! out=$("$bin" "${args[@]}" 2>&1); then
    echo "FAIL $s $n $st: $(tail -20 <<<"$out")"
  elif grep -q "warning" <<<"$out"; then
    echo "FAIL $s $n $st: nvcc warned: $out"
  else
    echo "ok $s $n $st"
  fi
  rm -rf "$d"
}
export -f build1
export bin tmp
xargs -P "$jobs" -L 1 bash -c 'build1 "$@"' _ <"$tmp/matrix" >"$tmp/results"
while read -r r; do
  case "$r" in
  ok*) ok ;;
  *) bad "${r#FAIL }" ;;
  esac
done <"$tmp/results"
echo "  $(grep -c '^ok' "$tmp/results") of $(wc -l <"$tmp/matrix") programs built by nvcc"
finish
