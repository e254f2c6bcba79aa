# Sourced by test scripts (after `cd` to the repository root and setting
# tmp to their scratch directory): the Python checkers in one interpreter.
# pyserve_start: the tests' Python checkers run in one interpreter
# (tests/pyserve.py; CI's time: numpy's import costs 0.3 s a run); call it
# in the script's own shell, not in $(...).  py SCRIPT ARGS...: runs SCRIPT
# there (or in a fresh /usr/bin/python3 when the server is not running),
# prints its output, returns its status.
pyserve_start() {
  [ -x /usr/bin/python3 ] && mkfifo "$tmp/py.in" "$tmp/py.out" || return 0
  /usr/bin/python3 tests/pyserve.py "$tmp/py.in" "$tmp/py.out" &
  exec {PY_IN}>"$tmp/py.in" {PY_OUT}<"$tmp/py.out"
}
py() {
  if [ -z "${PY_IN:-}" ]; then
    /usr/bin/python3 "$@"
    return
  fi
  local IFS=$'\t' line o=""
  printf '%s\n' "$*" >&"$PY_IN" || { echo "py: the Python server is gone"; return 1; }
  while IFS= read -r line <&"$PY_OUT"; do
    case "$line" in
    "__rc__ "*)
      printf '%s' "$o"
      return "${line#__rc__ }"
      ;;
    esac
    o+="$line"$'\n'
  done
  printf '%s' "$o"
  echo "py: the Python server ended during $1"
  return 1
}
