#!/usr/bin/env bash
# PyTorch parity (Debian's python3-torch, /usr/bin/python3): the MLP, the tiny
# GPT and the tiny LLaMA train 20 steps from the same safetensors weights on
# the same batches in shardc and in PyTorch; per-step losses must agree to
# 1e-5 relative and final weights to 1e-4.
#   tests/parity.sh SHARDC
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
run() {
  if py tests/parity/parity.py "$bin" "$@" >"$tmp/out" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
  fi
  grep -E "step|final|PASS|FAIL|rror" "$tmp/out" | grep -v "^run:" | sed 's/^/  /'
}
run samples/mlp.shard mlp "$tmp/mlp" 20
run samples/gpt.shard gpt "$tmp/gpt" 20 1e-3
# a vocabulary padded past its classes (264 rows, cross_entropy over 256):
# PyTorch's loss over logits[..., :256]
sed 's/const vocab = 256/const vocab = 264/; s/return cross_entropy(logits, targets)/return cross_entropy(logits, targets, classes = 256)/' \
  samples/gpt.shard >"$tmp/gpt_padded.shard"
run "$tmp/gpt_padded.shard" gpt "$tmp/gptpad" 20 1e-3
run samples/llama.shard llama "$tmp/llama" 20
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
