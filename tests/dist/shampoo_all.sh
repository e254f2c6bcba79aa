# ALL=1 tests/dist/shampoo.sh SHARDC (sourced by shampoo.sh, after
# shampoo_lib.sh): every strategy of tests/dist/equiv.sh with Shampoo (or
# OPT=adafactor), one table row each.
OPT="${OPT:-shampoo}"
export TRAIN_TIMEOUT="${TRAIN_TIMEOUT:-1500}"
table="${ALL_TABLE:-/dev/null}"
npass=0 nrefused=0 nfail=0

# variant MODEL BLOCK: the path of MODEL trained with gpt_$OPT's optimizer
variant() {
  local f="$tmp/all-$1-$OPT-$2.shard" src="samples/$1.shard"
  [ -f "$src" ] || src="tests/dist/$1.shard"
  [ "$1" = gpt ] && src="tests/dist/gpt_$OPT.shard"
  [ -f "$f" ] || /usr/bin/python3 - "$src" "tests/dist/gpt_$OPT.shard" "$2" "$f" <<'PY'
import re, sys
opt = re.compile(r"optimizer\s*=\s*\w+\((?:[^()]|\([^()]*\))*\)")
src, ref = open(sys.argv[1]).read(), open(sys.argv[2]).read()
o = opt.search(ref).group(0)
o = re.sub(r"\s*\n\s*", " ", o)
o = re.sub(r"block = \d+", "block = " + sys.argv[3], o)
assert opt.search(src), "no optimizer in " + sys.argv[1]
open(sys.argv[4], "w").write(opt.sub(lambda m: o, src, count=1))
PY
  echo "$f"
}

row() {  # MODEL STRATEGY RANKS BLOCK LOSS PARAMS MEMORY RESULT
  [ "$OPT" = shampoo ] || set -- "$1" "$2" "$3" - "${@:5}"
  printf '%-9s %-36s %-5s %-5s %-9s %-9s %-44s %s\n' "$@" | tee -a "$table"
}

# all_check MODEL RANKS STRATEGY
all_check() {
  local m="$1" n="$2" st="$3" b=48 f d o ref try
  for try in 1 2; do
    f=$(variant "$m" $b)
    d="$tmp/all-$m-$b-$n-${st//[=,:]/_}"
    o=$("$bin" build "$f" -o "$d" --mesh "$n" --strategy "$st" 2>&1) && break
    # blocks that straddle a shard: the block the compiler suggests
    if [ $try = 1 ] && grep -q "would straddle" <<<"$o"; then
      try=$(sed -n 's/.*(e\.g\. block = \([0-9]*\)).*/\1/p' <<<"$o" | head -1)
      [ -n "$try" ] && b=$try && continue
    fi
    if grep -q "error:" <<<"$o"; then
      row "$m" "$st" "$n" "$b" - - - "refused: $(grep -m1 -o 'error: .*' <<<"$o")"
      nrefused=$((nrefused + 1)); ok
    else
      row "$m" "$st" "$n" "$b" - - - "FAIL: build: $(head -1 <<<"$o")"
      nfail=$((nfail + 1)); bad "$m $st: build: $o"
    fi
    return
  done
  if grep -q warning <<<"$o"; then
    row "$m" "$st" "$n" "$b" - - - "FAIL: the C compiler warned"
    nfail=$((nfail + 1)); bad "$m $st: $o"; return
  fi
  ref="$tmp/allref-$m-$OPT-$b"
  if [ ! -f "$ref.st" ]; then
    o=$("$bin" build "$f" -o "$ref" --mesh 1 --strategy dp=1 2>&1) &&
      train "$ref" --steps $STEPS --quiet --log "$ref.jsonl" --save "$ref.st"
    if [ $? -ne 0 ] || [ "${rc:-1}" -ne 0 ]; then
      row "$m" "dp=1 (reference)" 1 "$b" - - - "FAIL: reference: $(tail -1 <<<"$o$out")"
      nfail=$((nfail + 1)); bad "$m reference: $o $out"; rm -f "$ref.st"; return
    fi
  fi
  train "$d" --steps $STEPS --log "$d.jsonl" --save "$d.st"
  printf '%s\n' "$out" >"$d.out"
  local mem planned measured c lr pr
  mem=$(grep -m1 '^memory: *planned peak' <<<"$out")
  planned=$(sed -n 's/^memory: *planned peak \(per rank by stage \)\{0,1\}\([0-9,/ ]*[0-9]\) bytes.*/\2/p' <<<"$mem" | tr -d ' ')
  measured=$(sed -n 's/.*measured \([0-9,/ ]*[0-9]\) .*/\1/p' <<<"$mem" | tr -d ' ')
  mem="$planned = $measured"
  grep -q MISMATCH <<<"$mem" && mem="$planned != $measured"
  if [ $rc -ne 0 ]; then
    row "$m" "$st" "$n" "$b" - - "$mem" "FAIL: exit $rc: $(grep -m1 -iE 'error|fail' <<<"$out")"
    nfail=$((nfail + 1)); bad "$m $st: exit $rc: $(tail -5 <<<"$out")"; return
  fi
  c=$(compare "$ref.jsonl" "$d.jsonl" "$ref.st" "$d.st")
  local crc=$?
  lr=$(sed -n 's/^loss rel \([^,]*\), parameters \(.*\)/\1/p' <<<"$c")
  pr=$(sed -n 's/^loss rel \([^,]*\), parameters \(.*\)/\2/p' <<<"$c")
  if grep -q MISMATCH <<<"$out" || [ -z "$planned" ]; then
    row "$m" "$st" "$n" "$b" "${lr:--}" "${pr:--}" "$mem" "FAIL: memory or communication differ from the plan"
    nfail=$((nfail + 1)); bad "$m $st: $(grep -E '^(memory|comm):' <<<"$out")"
  elif [ $crc -ne 0 ]; then
    row "$m" "$st" "$n" "$b" "${lr:--}" "${pr:--}" "$mem" "FAIL: $c"
    nfail=$((nfail + 1)); bad "$m $st: $c"
  else
    row "$m" "$st" "$n" "$b" "$lr" "$pr" "$mem" pass
    npass=$((npass + 1)); ok
  fi
}

row model strategy ranks block "loss rel" params "memory planned = measured (bytes, rank 0 or per stage)" result
lines=$(sed -n 's/^.*check \([a-z0-9]*\) \([0-9]*\) \([^ ]*\)$/\1 \2 \3/p' tests/dist/equiv.sh)
# the gpt under every strategy (those of the other models' lines too), then
# the other models under theirs
{ awk '$1 == "gpt"' <<<"$lines"
  awk '$1 != "gpt" { print "gpt", $2, $3 }' <<<"$lines"
  awk '$1 != "gpt"' <<<"$lines"; } | awk '!seen[$0]++' >"$tmp/all-lines"
while read -r m n st <&3; do
  [ -n "${ONLY:-}" ] && ! grep -qE "$ONLY" <<<"$m $n $st" && continue
  all_check "$m" "$n" "$st"
done 3<"$tmp/all-lines"
echo "$OPT: $npass passed, $nrefused refused, $nfail failed" | tee -a "$table"
