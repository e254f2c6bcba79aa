#!/usr/bin/env bash
# PyTorch parity of Shampoo and Adafactor (docs/language.md) against the
# reference optimizers of tests/parity/torch_ref.py: the tiny GPT and the tiny
# LLaMA (smaller batches) train 30 steps from the same safetensors weights on the same batches;
# Shampoo preconditions from step 10 (0-based) with every root at step 10,
# then each block's at the steps of its phase (stagger = true, the default),
# or every root at steps 10 and 20 (stagger = false, on the GPT), on 64 x 64 blocks
# (ragged for LLaMA's hidden size 344); per-step losses must agree to 1e-5
# relative and final weights to 1e-4 (tests/parity/parity.py).
#   tests/parity_optim.sh SHARDC
set -uo pipefail
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
cd "$(dirname "$0")/.."
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "parity: /usr/bin/python3 cannot import torch (install python3-torch: scripts/deps.sh)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the runs in one Python interpreter (torch imported once: 1.7 s a run)
source tests/pyserve.sh
pyserve_start
pass=0 fail=0
# batches of 8 sequences (GPT) and 4 (LLaMA) in microbatches of 2, half the
# samples': CI's time, both implementations' cost being the rows
sed 's/batch = 16, seq = ctx, microbatch = 4/batch = 8, seq = ctx, microbatch = 2/' samples/gpt.shard >"$tmp/gpt.shard"
sed 's/batch = 8, seq = ctx, microbatch = 4/batch = 4, seq = ctx, microbatch = 2/' samples/llama.shard >"$tmp/llama.shard"
[ "$(grep -c "seq = ctx, microbatch = 2" "$tmp/gpt.shard" "$tmp/llama.shard" | grep -c ':1$')" = 2 ] || {
  echo "parity: cannot set the batches of the samples"; exit 1; }
run() {  # SAMPLE KIND NAME OPTIMIZER [STEPS]
  echo "$2 $3: $4"
  if py tests/parity/parity.py "$bin" "$tmp/$1.shard" "$2" "$tmp/$3" "${5:-30}" - "$4" \
       >"$tmp/out" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
  fi
  grep -E "step|final|PASS|FAIL|rror" "$tmp/out" | grep -v "^run:" | sed 's/^/  /'
}
sh="betas = (0.9, 0.95), weight_decay = 0.1, warmup = 5, block = 64, start_preconditioning = 10, precondition_every = 10"
run gpt gpt shampoo "shampoo(lr = 1e-3, $sh)"
run llama llama shampoo "shampoo(lr = 1e-3, $sh)"
run gpt gpt shampoo-all-at-once "shampoo(lr = 1e-3, $sh, stagger = false)"
run gpt gpt shampoo-newton "shampoo(lr = 1e-3, $sh, root = newton, graft = adagrad)"
run llama llama shampoo-sgd "shampoo(lr = 3e-4, betas = (0, 0.99), block = 96, start_preconditioning = 10, precondition_every = 10, graft = sgd)"
# eps = 1e-12: the GPT's key biases get a gradient of pure rounding noise (the
# softmax ignores them), which eps = 1e-30 would normalise to steps of lr and
# so walk them apart in the two implementations, the losses agreeing.
run gpt gpt adafactor "adafactor(lr = 1e-3, beta1 = 0.9, eps = 1e-12, weight_decay = 0.1, warmup = 5)"
run llama llama adafactor "adafactor(lr = 3e-3, beta1 = 0.9, weight_decay = 0.1, warmup = 5)"
# without momentum the sign-like early updates make the tiny models chaotic
# after ~30 steps (float32 rounding grows to 1e-5 in both implementations):
# 20 steps
run llama llama adafactor-nomomentum "adafactor(lr = 1e-3, warmup = 5)" 20
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
