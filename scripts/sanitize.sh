#!/usr/bin/env bash
# Builds everything host-side with ASan+UBSan in build-asan (CPU-only) and runs every test that needs no GPU
# (but the full-size presets), with leak detection on and undefined behaviour fatal. Exits non-zero on any
# failing test or sanitizer report.
#
# This is also CI's CPU-only build (-DBATCHSWEEP_CUDA=OFF): its tests cover the code that differs without CUDA.
# The library and the binary are instrumented; the tests' own code only links the runtimes (cmake/Warnings.cmake).
# Optimised at -O1 with line tables only (OPT_FLAGS), as ASan advises: at -O2 -g the build took about 2.5 times
# as long on 2 cores, and the reports' stack traces need no more than file and line.
#
#   scripts/sanitize.sh              env: BUILD_DIR (build-asan), OPT_FLAGS ("-O1 -g1 -DNDEBUG"), JOBS (2),
#                                         CTEST_ARGS (extra ctest arguments, e.g. "-L unit")
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-asan}
jobs=${JOBS:-2}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="${OPT_FLAGS:--O1 -g1 -DNDEBUG}" -DBATCHSWEEP_CUDA=OFF \
  -DBATCHSWEEP_SANITIZE=ON -DBATCHSWEEP_WERROR=ON >/dev/null
start=$SECONDS
cmake --build "$build" -j"$jobs"
echo "sanitized build: $((SECONDS - start)) s"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
start=$SECONDS
# shellcheck disable=SC2086  # CTEST_ARGS is a list of arguments
# Not the presets' full-size steps: the same code runs sanitized on the small models of the other suites.
ctest --test-dir "$build" --output-on-failure -j"$jobs" -LE 'gpu|presets' ${CTEST_ARGS:-}
echo "sanitized tests: $((SECONDS - start)) s"
