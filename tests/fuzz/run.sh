#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan) and runs each for RUNS inputs, one at a time:
#
#   tests/fuzz/run.sh [RUNS] [TARGET...]        e.g. tests/fuzz/run.sh 1000000   or   tests/fuzz/run.sh 10000 fuzz_idx
#   tests/fuzz/run.sh --build-only               configures and builds the targets, runs none (tests/sanitize.sh)
#
# RUNS defaults to 1000000. Environment: BUILD (build folder, default build-fuzz), SECONDS_PER_TARGET (a bound on
# each run, default 1800), TIMEOUT (wall-clock seconds for one input, default 120), CXX (default clang++-14), NICE
# (default 10). New inputs found go to BUILD/fuzz-corpus/,
# crashes to BUILD/fuzz-artifacts/; the seed corpus in tests/fuzz/corpus/ is only read. Exits non-zero when a
# target fails; prints one line per target: runs, seconds, result.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${1:-1000000}
shift || true
BUILD=${BUILD:-$ROOT/build-fuzz}
CXX=${CXX:-clang++-14}
NICE=${NICE:-10}
SECONDS_PER_TARGET=${SECONDS_PER_TARGET:-1800}
# libFuzzer's -timeout: seconds of wall-clock for one input. The slowest valid inputs, JPEG headers of nearly
# kMaxImagePixels decoded as declared (7174 x 8200 in a 697-byte file), take 14 s of CPU under ASan, 72 s of
# wall-clock on a loaded 2-core machine (load 8-10): 20 s stopped fuzz_image on them. A hang still stops the run.
TIMEOUT=${TIMEOUT:-120}

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=${CC:-clang-14} CXX=$CXX cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIERE_FUZZ=ON \
    -DLIERE_BUILD_EXAMPLES=ON -DLIERE_WITH_CUDA=OFF >/dev/null   # the readers need no CUDA backend
fi
nice -n "$NICE" cmake --build "$BUILD" --target liere_fuzz -j"${JOBS:-2}"
[ "$RUNS" != --build-only ] || exit 0

TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in "$BUILD"/tests/fuzz/fuzz_*; do [ -x "$f" ] && TARGETS+=("$(basename "$f")"); done
fi

# Every sanitizer finding stops the run (halt_on_error), except the one third-party check tests/fuzz/ubsan.supp
# names (docs/testing.md).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$ROOT/tests/fuzz/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

status=0
summary=()
for t in "${TARGETS[@]}"; do
  seeds="$ROOT/tests/fuzz/corpus/${t#fuzz_}"
  work="$BUILD/fuzz-corpus/$t"
  art="$BUILD/fuzz-artifacts/$t/"
  mkdir -p "$work" "$art"
  max_len=4096
  [ "$t" = fuzz_cifar ] && max_len=8192   # two or three 3073-byte records
  log="$BUILD/fuzz-$t.log"
  echo "== $t: $RUNS runs (log: $log)"
  timing=()
  [ -x /usr/bin/time ] && timing=(/usr/bin/time -o "$log.time" -f '%U %S')
  set +e
  "${timing[@]}" nice -n "$NICE" "$BUILD/tests/fuzz/$t" "$work" "$seeds" -runs="$RUNS" \
    -max_total_time="$SECONDS_PER_TARGET" -max_len="$max_len" -rss_limit_mb=2048 -timeout="$TIMEOUT" -print_final_stats=1 \
    -artifact_prefix="$art" >"$log" 2>&1
  rc=$?
  set -e
  done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -1 || true)
  cpu=""
  [ -f "$log.time" ] && cpu=$(awk 'END { printf ", %.0f s of CPU", $1 + $2 }' "$log.time")
  if [ $rc -ne 0 ]; then
    status=1
    # libFuzzer's own exit codes; a sanitizer report, a crash or a FUZZ_CHECK is 1 (or 77 with -error_exitcode).
    case $rc in
      70) why="a timeout: one input ran over $TIMEOUT s of wall-clock" ;;
      71) why="out of memory: over 2048 MB" ;;
      72) why="interrupted by SIGINT or SIGTERM, not a finding" ;;
      *) why="a crash, sanitizer report or broken invariant" ;;
    esac
    summary+=("$t: FAILED (exit $rc: $why; see $log and $art)")
  else
    summary+=("$t: ${done_line:-finished}$cpu")
  fi
  echo "${summary[-1]}"
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
