#!/usr/bin/python3
"""pyserve.py IN OUT — runs the tests' Python checkers in one interpreter.

The distributed test scripts compare a hundred runs or more each
(tests/dist/compare.py and its kin); a fresh interpreter importing numpy
costs about 0.3 s a time, a third of a small run's own cost.  This server
reads requests from the FIFO IN, one a line: a script's path and its
arguments, separated by tabs; runs the script as __main__ with those
arguments (runpy: imports such as numpy stay loaded between requests),
writes what it printed (stdout and stderr) to the FIFO OUT, then a line
"__rc__ N" with its exit status (1 for an uncaught exception, whose
traceback is printed).  tests/pyserve.sh starts it (pyserve_start) and
sends it requests (py); it ends when IN is closed.
"""
import contextlib
import io
import runpy
import sys
import traceback


def run(argv):
    buf = io.StringIO()
    rc = 0
    saved = sys.argv
    sys.argv = argv
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as e:
            if e.code is None:
                rc = 0
            elif isinstance(e.code, int):
                rc = e.code
            else:
                print(e.code)
                rc = 1
        except BaseException:  # the script's own failure: reported, the server goes on
            traceback.print_exc()
            rc = 1
        finally:
            sys.argv = saved
    return buf.getvalue(), rc


def main():
    with open(sys.argv[1]) as fin, open(sys.argv[2], "w") as fout:
        for line in fin:
            argv = line.rstrip("\n").split("\t")
            out, rc = run(argv)
            if out and not out.endswith("\n"):
                out += "\n"
            fout.write(out)
            fout.write(f"__rc__ {rc & 255}\n")
            fout.flush()


if __name__ == "__main__":
    main()
