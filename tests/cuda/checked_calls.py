#!/usr/bin/env python3
"""Every CUDA runtime, cuBLAS, cuBLASLt and NCCL call in the CUDA runtime and in
generated programs is checked (issue 10): it is the argument of cudaCheck /
cublasCheck / ncclCheck, or its result is assigned and compared with
cudaSuccess / CUBLAS_STATUS_SUCCESS / ncclSuccess within the next lines.
  tests/cuda/checked_calls.py FILE...   (exit 1 listing the unchecked calls)
The host shim (runtime/cuda/host/) implements these functions and is not
given; cudaGetErrorString and the like only describe an error."""
import re
import sys

CALL = re.compile(r'\b((?:cuda|cublas|nccl)[A-Z]\w*)\s*\(')
# Functions that cannot fail or only format an error.
EXEMPT = {'cudaGetErrorString', 'cudaGetErrorName', 'ncclGetErrorString',
          'cublasLtGetStatusString', 'cublasLtGetStatusName', 'cublasGetStatusString',
          'cudaCheck', 'ncclCheck', 'cublasCheck', 'cublasLtGetVersion'}
WRAP = re.compile(r'\b(cudaCheck|cublasCheck|ncclCheck)\s*\(\s*$')
OKCMP = re.compile(r'(!=|==)\s*(cudaSuccess|CUBLAS_STATUS_SUCCESS|ncclSuccess)')


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def main(paths):
    bad = []
    for path in paths:
        text = strip_comments(open(path).read())
        lines = text.split('\n')
        for m in CALL.finditer(text):
            name = m.group(1)
            if name in EXEMPT:
                continue
            start = text.rfind('\n', 0, m.start()) + 1
            before = text[start:m.start()]
            lineno = text.count('\n', 0, m.start()) + 1
            # a declaration or definition (a type before the name), a macro's #define
            if re.search(r'(^|\s)(typedef|#define)\b', before) or \
               re.match(r'^\s*(static\s+)?(inline\s+)?[\w:<>]+\s+\**$', before) and \
               not re.search(r'=\s*$', before):
                continue
            # the argument of a check macro (possibly on the line before)
            prev = text[max(0, start - 200):m.start()]
            if WRAP.search(prev):
                continue
            # r = call(...); then compared within 4 lines
            if re.search(r'=\s*$', before):
                follow = '\n'.join(lines[lineno - 1:lineno + 4])
                if OKCMP.search(follow):
                    continue
            bad.append(f'{path}:{lineno}: {name}(...) is not checked')
    for b in bad:
        print(b)
    print(f'{len(bad)} unchecked call(s) in {len(paths)} file(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
