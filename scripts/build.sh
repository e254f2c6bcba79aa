#!/usr/bin/env bash
# Configures and builds shardc into build/ (or $1), after installing what is missing.
# Extra arguments after the directory go to cmake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/build}"
shift || true
"$root/scripts/deps.sh"
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)" >/dev/null
