#!/bin/sh
# run.sh --expect-abort MODE CMD... — run an MPI job that must die: a nonzero
# exit status, and on stderr the failing rank's line naming its rank, mesh
# coordinates and reason (MODE fail: rt_mesh_fail; mpi: a failed MPI call),
# or (MODE leak, sanitizer builds) LeakSanitizer's report of the leaked
# mesh's communicators, by the project function that made them.
set -u
[ "$1" = --expect-abort ] || { echo "usage: run.sh --expect-abort fail|mpi|leak CMD..." >&2; exit 2; }
mode=$2
shift 2
case $mode in
  fail) want="train: rank 1 (pp=0 dp=0 sp=0 tp=1): error: deliberate failure" ;;
  mpi) want="train: rank 1 (pp=0 dp=0 sp=0 tp=1): MPI error in MPI_Send: " ;;
  leak) want=" in rt_mesh_init " ;;
  *) echo "run.sh: unknown mode $mode" >&2; exit 2 ;;
esac
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$@" 2>"$err" >/dev/null
rc=$?
if [ $rc -eq 0 ]; then
  echo "FAIL: the job exited 0; expected it to abort" >&2
  cat "$err" >&2
  exit 1
fi
if ! grep -qF "$want" "$err" || { [ "$mode" = leak ] && ! grep -q "LeakSanitizer: detected memory leaks" "$err"; }; then
  echo "FAIL: exit $rc but stderr lacks: $want" >&2
  cat "$err" >&2
  exit 1
fi
echo "ok: exit $rc with: $want"
