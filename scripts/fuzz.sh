#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, CPU-only, ASan+UBSan) in build-fuzz and runs each for SECONDS (default 60)
# on a temporary copy of its seed corpus plus the committed regression inputs; the committed corpus never grows.
# Prints the executions each target reached; exits non-zero on any finding (crash, sanitizer report, unexpected
# exception, round-trip mismatch, timeout, out-of-memory, leak), after minimising it into
# build-fuzz/findings/<target>/ and printing the command that adds it to tests/fuzz/regressions/<target>/.
#
#   scripts/fuzz.sh [SECONDS]        env: BUILD_DIR (build-fuzz), JOBS (2), CXX_FUZZ (clang++)
set -euo pipefail

seconds=${1:-60}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS] (a positive integer)" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}
jobs=${JOBS:-2}
targets=(fuzz_model_config fuzz_report_reader)
declare -A corpus_of=([fuzz_model_config]=model [fuzz_report_reader]=report)

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DBATCHSWEEP_CUDA=OFF -DBATCHSWEEP_FUZZ=ON -DBATCHSWEEP_TESTS=OFF >/dev/null
cmake --build "$build" --target "${targets[@]}" -j"$jobs"

work=$(mktemp -d "${TMPDIR:-/tmp}/batchsweep-fuzz.XXXXXX")
# Where the harness writes each input before loading it (memory-backed where possible: one write per
# execution); inputs that crash leave their scratch file here, and it goes with the rest at exit.
if [[ -d /dev/shm && -w /dev/shm ]]; then
  BSW_FUZZ_SCRATCH_DIR=$(mktemp -d /dev/shm/batchsweep-fuzz.XXXXXX)
else
  BSW_FUZZ_SCRATCH_DIR=$work/scratch
  mkdir -p "$BSW_FUZZ_SCRATCH_DIR"
fi
export BSW_FUZZ_SCRATCH_DIR
trap 'rm -rf "$work" "$BSW_FUZZ_SCRATCH_DIR"' EXIT

# Runs one target in the background: corpus copy in $work/<target>/corpus, crashes in $work/<target>/artifacts.
start() {
  local target=$1 dir=$work/$1 kind=${corpus_of[$1]}
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp "$root/tests/fuzz/corpus/$kind/"* "$dir/corpus/"
  if compgen -G "$root/tests/fuzz/regressions/$target/*" >/dev/null; then
    cp "$root/tests/fuzz/regressions/$target/"* "$dir/corpus/"
  fi
  "$build/fuzz/$target" "$dir/corpus" -dict="$root/tests/fuzz/dict/$kind.dict" -max_total_time="$seconds" \
    -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
    >"$dir/log" 2>&1 &
  echo $! >"$dir/pid"
}

# Minimises every artifact of a target into build-fuzz/findings/<target>/ and says how to keep it.
keep_findings() {
  local target=$1 dir=$work/$1 out=$build/findings/$1 artifact name
  mkdir -p "$out"
  for artifact in "$dir/artifacts/"*; do
    [[ -f $artifact ]] || continue
    name=$(basename "$artifact")
    cp "$artifact" "$out/$name"
    if "$build/fuzz/$target" -minimize_crash=1 -max_total_time=60 -timeout=10 -rss_limit_mb=2048 \
      -exact_artifact_path="$out/$name.min" "$artifact" >"$out/$name.minimize.log" 2>&1 || [[ -f $out/$name.min ]]; then
      [[ -f $out/$name.min ]] || cp "$artifact" "$out/$name.min"
    else
      cp "$artifact" "$out/$name.min"
    fi
    echo "  $target finding: $out/$name ($(wc -c <"$out/$name.min") bytes minimised). Keep it as a regression:"
    echo "    cp $out/$name.min $root/tests/fuzz/regressions/$target/$name"
  done
}

# libFuzzer's -print_final_stats=1 line "stat::NAME: VALUE" from a log.
final_stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }

for target in "${targets[@]}"; do start "$target"; done

status=0
printf '%-20s %12s %10s %8s  %s\n' target executions exec/s new result
for target in "${targets[@]}"; do
  dir=$work/$target
  rc=0
  wait "$(cat "$dir/pid")" || rc=$?
  runs=$(final_stat "$dir/log" number_of_executed_units)
  per_second=$(final_stat "$dir/log" average_exec_per_sec)
  added=$(final_stat "$dir/log" new_units_added)
  if [[ $rc -eq 0 ]] && ! compgen -G "$dir/artifacts/*" >/dev/null; then
    result=ok
  else
    result="FINDING (exit $rc)"
    status=1
  fi
  printf '%-20s %12s %10s %8s  %s\n' "$target" "${runs:-?}" "${per_second:-?}" "${added:-?}" "$result"
  if [[ $result != ok ]]; then
    mkdir -p "$build/findings/$target"
    cp "$dir/log" "$build/findings/$target/fuzz.log"
    grep -E "finding:|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error:|SUMMARY" "$dir/log" |
      head -5 | sed 's/^/  /' || true
    echo "  full log: $build/findings/$target/fuzz.log"
    keep_findings "$target"
  fi
done
exit "$status"
