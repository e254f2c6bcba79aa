#!/usr/bin/env bash
# Every sample and every strategy of the equivalence matrix builds for the
# GPU (issue 10): `shardc build --target cuda` writes model.cu and nvcc
# compiles and links it against libshardrt_cuda, cuBLASLt and NCCL with no
# warning (-Werror all-warnings).  The matrix is tests/dist/equiv.sh's own
# list of `check SAMPLE RANKS STRATEGY` lines, plus bf16 plans and the
# Shampoo and Adafactor programs of tests/dist.  Without nvcc (or without
# the GPU libraries in this build of shardc) the test is skipped.
#
# Every line's program is generated (`compile --emit=c`, a tenth of a
# second); nvcc, nine seconds a program, compiles those that use code no
# earlier line of the same model source used: an identifier (a launcher, a
# collective, a runtime table or constant, a helper the printer writes)
# absent from the comment-free text of every program compiled before it.
# So every construct the matrix's programs contain goes through nvcc once
# (about half of the lines, CI's time); ALL=1 compiles every line.
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

# Generate every line's program; keep for nvcc the lines that bring code
# new to their model source (all of them under ALL=1).
generated=0
: >"$tmp/compile"
while read -r s n st; do
  src=$(model_of "$s")
  args=(compile "$src" --target cuda --emit=c)
  [ "$n" = - ] || args+=(--mesh "$n" --strategy "$st")
  if ! "$bin" "${args[@]}" >"$tmp/gen.cu" 2>"$tmp/gen.err"; then
    bad "$s $n $st: generating the CUDA program failed: $(tail -5 "$tmp/gen.err")"
    continue
  fi
  generated=$((generated + 1))
  seen="$tmp/ids-$(cksum <<<"$src" | cut -d' ' -f1)"
  [ -f "$seen" ] || : >"$seen"
  # identifiers of the code (comments dropped; d12 / x34, the printer's
  # names for values, say nothing about which code is there)
  # (none read, the preprocessor missing or failing: nvcc builds the line)
  if ! g++ -fpreprocessed -dD -E -P -x c++ "$tmp/gen.cu" 2>/dev/null |
       sed -E "s/\"([^\"\\\\]|\\\\.)*\"/\"\"/g; s/'([^'\\\\]|\\\\.)*'/''/g" |
       grep -oE '\b[A-Za-z_][A-Za-z0-9_]*\b' | grep -vE '^[a-z][0-9]+$' |
       sed -E 's/^r[0-9]+_/r#_/; s/_c[0-9]+$/_c#/' | sort -u >"$tmp/ids" ||
     [ ! -s "$tmp/ids" ] || [ -n "${ALL:-}" ] || [ -n "$(comm -23 "$tmp/ids" "$seen")" ]; then
    echo "$s $n $st" >>"$tmp/compile"
    sort -u -o "$seen" "$seen" "$tmp/ids"
  fi
done <"$tmp/matrix"

# build1 SAMPLE RANKS STRATEGY: prints "ok ..." or the failure
build1() {
  local s="$1" n="$2" st="$3" src d out
  src=$(model_of "$s")
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
export -f build1 model_of
export bin tmp
xargs -P "$jobs" -L 1 bash -c 'build1 "$@"' _ <"$tmp/compile" >"$tmp/results"
while read -r r; do
  case "$r" in
  ok*) ok ;;
  *) bad "${r#FAIL }" ;;
  esac
done <"$tmp/results"
echo "  $generated of $(wc -l <"$tmp/matrix") programs generated; $(grep -c '^ok' "$tmp/results") of the $(wc -l <"$tmp/compile") with new code built by nvcc${ALL:+ (ALL=1: every one)}"
finish
