#!/usr/bin/env bash
# Activation recompute changes only the schedule, never the numbers: for
# each strategy, recompute=selective and recompute=full train to the same
# 5-step losses and learning rates, byte for byte, and the same final
# checkpoint, byte for byte, as the same strategy without recompute; every
# rank's measured memory and bytes equal the plan; selective plans less
# memory than none and full less than selective (per rank, the largest).
#
#   tests/dist/recompute.sh SHARDC          a strategy of each kind (CI)
#   ALL=1 tests/dist/recompute.sh SHARDC    every strategy of tests/dist/equiv.sh
#   AUTO=1 tests/dist/recompute.sh SHARDC   the recompute=auto cases alone
# Then recompute=auto: under a device memory the plain plan exceeds it fits,
# trains bit for bit as the plain plan, and adds no more FLOPs than
# selective (where selective fits) or full, nor than the per-layer choice
# the plan names (its per-tensor choice adds fewer in at least one case).
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
need_mpi
export SHARDC_STRICT_COMM=1
fast_runs  # (lib.sh: -O1, a thread a rank; CI's time)
STEPS=5   # byte for byte: a difference shows at once
small_models  # batches of 8 in 2s (lib.sh; not the auto cases' models, sized for their budgets)

# planned SAMPLE RANKS STRATEGY: the largest rank's planned arena bytes
planned() {
  "$bin" compile "$(model_of "$1")" --mesh "$2" --strategy "$3" --emit=program 2>/dev/null |
    sed -n 's/^arena: \([0-9,]*\) bytes.*/\1/p' | tr -d , | sort -n | tail -1
}

check() {
  local s="$1" n="$2" st="$3"
  local d="$tmp/$s-$n-${st//[=,:]/_}" r prev=""
  for r in none selective full; do
    build "$s" "$d-$r" --mesh "$n" --strategy "$st,recompute=$r" || return
    train "$d-$r" --steps $STEPS --log "$d-$r.jsonl" --save "$d-$r.st"
    if [ $rc -ne 0 ]; then bad "$s $st recompute=$r: exit $rc: $(tail -3 <<<"$out")"; return; fi
    if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out" ||
       { [ "$n" -gt 1 ] && ! grep -q "^comm:     planned" <<<"$out"; }; then
      bad "$s $st recompute=$r: memory or bytes differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
      return
    fi
    sed -E 's/,"(step_ms|tokens_per_s|model_tflops_per_device|mfu)":[^,}]*//g' "$d-$r.jsonl" >"$d-$r.loss"
    [ -s "$d-$r.loss" ] || { bad "$s $st recompute=$r: no log"; return; }
  done
  for r in selective full; do
    if ! cmp -s "$d-none.loss" "$d-$r.loss"; then
      bad "$s $st: recompute=$r changes the losses: $(diff "$d-none.loss" "$d-$r.loss" | sed -n 2p)"
      return
    fi
    if ! cmp -s "$d-none.st" "$d-$r.st"; then
      bad "$s $st: recompute=$r changes the final checkpoint"
      return
    fi
  done
  local mn ms mf
  mn=$(planned "$s" "$n" "$st") ms=$(planned "$s" "$n" "$st,recompute=selective")
  mf=$(planned "$s" "$n" "$st,recompute=full")
  if ! [ "$ms" -le "$mn" ] || ! [ "$mf" -lt "$ms" ]; then
    bad "$s $st: planned bytes none $mn, selective $ms, full $mf: recompute should shrink them"
    return
  fi
  ok
  printf '  %-8s %-34s %d ranks  identical; largest rank %d / %d / %d bytes (none / selective / full)\n' \
    "$s" "$st" "$n" "$mn" "$ms" "$mf"
}

# extra SPEC FILE: the recompute FLOPs per step the plan reports (0 without)
extra() {
  "$bin" compile "$2" --strategy "$1" 2>/dev/null |
    sed -n 's/^recompute: .* +\([0-9.e+]*\) FLOPs per step.*/\1/p' | head -1
}

# auto_case MiB WHICH: gpt on 4 ranks (dp=4) with devices of MiB: the plain
# plan does not fit; recompute=auto does, trains bit for bit as the plain
# plan, and adds no more FLOPs than WHICH (selective when that fits, else full)
# nor than its per-layer choice ("+A FLOPs per microbatch, per tensor (per
# layer, ...: +L; ...)"); fewer counts in $fewer.
fewer=0
auto_case() {
  local mib="$1" which="$2" f="$tmp/gpt-$1.shard" d="$tmp/auto-$1"
  sed "s/mesh laptop { devices = 4, device = cpu }/mesh laptop { devices = 4, device = cpu, memory = $mib MiB }/" \
    samples/gpt.shard >"$f"
  if "$bin" check "$f" --strategy dp=4 >/dev/null 2>&1; then
    bad "auto $mib MiB: the plain plan fits; the case tests nothing"; return
  fi
  if [ "$which" = full ] && "$bin" check "$f" --strategy dp=4,recompute=selective >/dev/null 2>&1; then
    bad "auto $mib MiB: selective fits; expected a budget only full meets"; return
  fi
  local a w
  a=$(extra dp=4,recompute=auto "$f") w=$(extra "dp=4,recompute=$which" "$f")
  if [ -z "$a" ] || [ -z "$w" ] || ! awk -v a="$a" -v w="$w" 'BEGIN { exit !(a > 0 && a <= w) }'; then
    bad "auto $mib MiB: recompute=auto adds ${a:-?} FLOPs, $which ${w:-?}"; return
  fi
  local line pt pl
  line=$("$bin" compile "$f" --strategy dp=4,recompute=auto 2>/dev/null | grep '^ *auto: ')
  pt=$(sed -n 's/.* +\([0-9.e+]*\) FLOPs per microbatch, per tensor (per layer.*/\1/p' <<<"$line")
  pl=$(sed -n 's/.*FLOPs per microbatch, per tensor (per layer, .*: +\([0-9.e+]*\); [0-9]* plans tried)$/\1/p' <<<"$line")
  if [ -z "$pt" ] || [ -z "$pl" ] || ! awk -v a="$pt" -v w="$pl" 'BEGIN { exit !(a <= w) }'; then
    bad "auto $mib MiB: per tensor +${pt:-?} FLOPs, per layer +${pl:-?}: $line"; return
  fi
  awk -v a="$pt" -v w="$pl" 'BEGIN { exit !(a < w) }' && fewer=$((fewer + 1))
  build "$f" "$d" --strategy dp=4,recompute=auto || return
  train "$d" --steps $STEPS --log "$d.jsonl" --save "$d.st"
  if [ $rc -ne 0 ] || grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out"; then
    bad "auto $mib MiB: $(tail -3 <<<"$out")"; return
  fi
  local ref="$tmp/gpt-4-dp_4-none"
  sed -E 's/,"(step_ms|tokens_per_s|model_tflops_per_device|mfu)":[^,}]*//g' "$d.jsonl" >"$d.loss"
  if ! cmp -s "$ref.loss" "$d.loss" || ! cmp -s "$ref.st" "$d.st"; then
    bad "auto $mib MiB: the run differs from dp=4 without recompute"; return
  fi
  ok
  echo "  auto     $mib MiB devices: fits, identical; +$a FLOPs per step (per layer: +$pl; recompute=$which: +$w)"
}

if [ "${AUTO:-0}" = 1 ]; then
  :
elif [ "${ALL:-0}" = 1 ]; then
  # every check of the equivalence matrix
  # (fd 3: mpirun reads standard input)
  while read -r s n st <&3; do
    check "$s" "$n" "$st"
  done 3< <(sed -n 's/^ *check \([a-z0-9]*\) \([0-9]*\) \([^ ]*\)$/\1 \2 \3/p' tests/dist/equiv.sh)
else
  check gpt 1 dp=1
  check mish 1 dp=1
  check dropout 1 dp=1
  check dropout 2 dp=2,zero=2
  check dropout 2 pp=2,schedule=gpipe
  check gpt 2 dp=2
  check gpt 2 tp=2,sp=megatron
  check gpt 4 tp=2,dp=2,zero=1
  check gpt 2 dp=2,zero=3
  check gpt 2 pp=2,schedule=1f1b
  check gpt 4 pp=2,dp=2,schedule=interleaved:2
  check gpt 4 pp=2,tp=2
  check gpt 2 sp=ring:2
  check gpt 4 tp2d=2x2
  check llama 4 tp=2,sp=ring:2
  check llama 4 pp=2,tp=2
fi
# recompute=auto under a budget: the budgets are sized for the tiny GPT's
# own batch (16 in 4s), so these runs and their reference, dp=4 without
# recompute, train samples/gpt.shard itself
unset MODELS_DIR
check gpt 4 dp=4
auto_case 21 selective
auto_case 19 full
if [ "$fewer" -eq 0 ]; then
  bad "auto: the per-tensor choice adds as many FLOPs as the per-layer one in every case"
fi
finish
