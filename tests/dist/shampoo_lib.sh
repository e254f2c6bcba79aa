# Shared by tests/dist/shampoo.sh and shampoo_zero.sh (sourced after
# tests/codegen/lib.sh): a run against the reference run, and a checkpoint
# saved under one plan and resumed under another.  They read S (the model),
# REF (the reference run's directory; $REF.jsonl and $REF.st its log and
# final checkpoint), STEPS and SAVE_AT.

compare() {  # REF.jsonl RUN.jsonl REF.st RUN.st: losses and parameters within 1e-4
  py tests/dist/compare_params.py "$@"
}

check() {  # RANKS STRATEGY (against $REF's run of $STEPS steps)
  local d="$REF-$1-${2//[=,:]/_}"
  build $S "$d" --mesh "$1" --strategy "$2" || return
  train "$d" --steps $STEPS --log "$d.jsonl" --save "$d.st"
  if [ $rc -ne 0 ]; then bad "$2: exit $rc: $(tail -5 <<<"$out")"; return; fi
  if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out"; then
    bad "$2: memory or communication differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
    return
  fi
  local c
  if c=$(compare "$REF.jsonl" "$d.jsonl" "$REF.st" "$d.st"); then
    ok
    printf '  %-32s %s ranks  %s\n' "$2" "$1" "$c"
  else
    bad "$2: $c"
  fi
}

reshard() {  # RANKS1 STRATEGY1 RANKS2 STRATEGY2: saved at $SAVE_AT, resumed to $STEPS
  local d1="$REF-r1-${2//[=,:]/_}" d2="$REF-r2-${4//[=,:]/_}"
  build $S "$d1" --mesh "$1" --strategy "$2" && build $S "$d2" --mesh "$3" --strategy "$4" || return
  rm -f "$d2.jsonl"
  train "$d1" --steps $SAVE_AT --quiet --log "$d2.jsonl" --save "$d1.st"
  [ $rc -eq 0 ] || { bad "reshard $2: $out"; return; }
  train "$d2" --steps $STEPS --quiet --load "$d1.st" --log "$d2.jsonl" --save "$d2.st"
  [ $rc -eq 0 ] || { bad "reshard $2 -> $4: resume: $out"; return; }
  local c
  if c=$(compare "$REF.jsonl" "$d2.jsonl" "$REF.st" "$d2.st"); then
    ok
    printf '  saved at %d under %-12s resumed under %-12s %s\n' $SAVE_AT "$2" "$4" "$c"
  else
    bad "reshard $2 -> $4: $c"
  fi
}
