#!/usr/bin/env bash
# Every CUDA, cuBLASLt and NCCL call of the CUDA runtime (runtime/cuda/, but
# the host shim that implements them) and of generated CUDA programs (the
# golden .cu files, and a fresh program of each sample) is error-checked
# (tests/cuda/checked_calls.py); and the check finds the three unchecked
# calls planted in tests/cuda/unchecked_sample.cu.txt.  And no fused loop
# of those programs accumulates into a broadcast operand from one thread
# per element (`const size_t j = i % K; ... d[j] += ...`: threads i and
# i + K race on d[j] on a GPU; the host build runs them in turn and cannot
# see it).
#   tests/cuda/checked.sh SHARDC
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
for s in samples/*.shard; do
  n=$(basename "$s" .shard)
  "$bin" compile "$s" --target cuda --emit=c >"$tmp/$n.cu" 2>"$tmp/$n.err" ||
    bad "$s: --target cuda --emit=c failed: $(head -3 "$tmp/$n.err")"
done
if out=$(python3 tests/cuda/checked_calls.py runtime/cuda/*.cu runtime/cuda/*.cuh \
         tests/golden-c/*.cu "$tmp"/*.cu); then
  ok
  echo "  $out"
else
  bad "unchecked calls: $out"
fi
# racy LINES: per-element loops (after `j = i % K`) that write some d[j]
racy() {
  awk '/const size_t j = i %/ {inl = 1; next}
       inl && /\[j\] *[-+]?= / {print FILENAME ": " $0; n++}
       /^    }\);/ {inl = 0}
       END {exit n > 0}' "$@"
}
if out=$(racy tests/golden-c/*.cu "$tmp"/*.cu); then ok; else bad "racy broadcast accumulation: $out"; fi
printf '    {\n      const size_t j = i %% 8;\n      d4[j] += d5[i];\n    });\n' >"$tmp/racy.txt"
racy "$tmp/racy.txt" >/dev/null && bad "the planted racy loop was not found" || ok
out=$(python3 tests/cuda/checked_calls.py tests/cuda/unchecked_sample.cu.txt)
if [ $? -ne 0 ] && [ "$(grep -c 'is not checked' <<<"$out")" = 3 ]; then ok; else
  bad "the planted unchecked calls were not all found: $out"
fi
finish
