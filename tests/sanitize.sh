#!/usr/bin/env bash
# The sanitizer check (docs/testing.md): the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer,
# then every libFuzzer target for 10^5 inputs.
#
#   bash tests/sanitize.sh [--tests-only | --fuzz-only] [-j N] [--runs N] [--help]
#
#   (a) configures build-asan (GCC, -DLIERE_SANITIZE=ON, Release, tests and examples on), builds everything, and
#       runs every CTest test in it; any sanitizer report stops its test, so a green test had none.
#   (b) builds the fuzz targets in build-fuzz with clang-14 (-DLIERE_FUZZ=ON, through tests/fuzz/run.sh) and runs
#       each for RUNS inputs (default 100000) on its corpus (tests/fuzz/corpus/<target>/ plus what earlier runs
#       found in build-fuzz/fuzz-corpus/<target>/).
#
# Prints one table (step or test, result, seconds) and exits non-zero when anything failed: a build error or a
# build warning line, a test that failed or a fuzz target that crashed, reported, broke an invariant or stopped
# before RUNS inputs. Skipped tests (no GPU: test_cuda) are listed as skipped, not failed.
#
# Options: --tests-only / --fuzz-only run one part; -j N parallel build jobs and parallel tests (default 2);
# --runs N inputs per fuzz target. Environment: ASAN_BUILD (default build-asan), FUZZ_BUILD (default build-fuzz),
# CXX_SANITIZE (the suite's compiler, default g++), NICE (niceness of builds and runs, default 10), and what
# tests/fuzz/run.sh reads (SECONDS_PER_TARGET, the bound on one target's run, default 1800). Uses ccache when it
# is installed. Needs clang-14 and libclang-rt-14-dev for (b): as root it installs them with apt-get when they are
# missing, otherwise it says what to install.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

do_tests=1 do_fuzz=1 jobs=2 runs=100000
while [ $# -gt 0 ]; do
  case $1 in
    --tests-only) do_fuzz=0 ;;
    --fuzz-only) do_tests=0 ;;
    -j) [ $# -ge 2 ] || { echo "sanitize.sh: -j needs a number" >&2; exit 2; }; jobs=$2; shift ;;
    -j*) jobs=${1#-j} ;;
    --runs) [ $# -ge 2 ] || { echo "sanitize.sh: --runs needs a number" >&2; exit 2; }; runs=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "sanitize.sh: -j expects a positive integer, got '$jobs'" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "sanitize.sh: --runs expects a positive integer, got '$runs'" >&2; exit 2; }
[ $do_tests = 1 ] || [ $do_fuzz = 1 ] || { echo "sanitize.sh: --tests-only and --fuzz-only exclude each other" >&2; exit 2; }

ASAN_BUILD=${ASAN_BUILD:-$ROOT/build-asan}
FUZZ_BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
CXX_SANITIZE=${CXX_SANITIZE:-g++}
NICE=${NICE:-10}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

rows=()      # "name|result|seconds"
status=0
row() { rows+=("$1|$2|$3"); }
fail() { status=1; }

# Counts the warning lines of a build log (the build must print none, ours or third-party).
warnings_in() { grep -ci 'warning' "$1" || true; }

# Sanitizer reports fail the program at once: ASan stops at its first report, UBSan's checks are compiled
# -fno-sanitize-recover (CMakeLists.txt); leaks are checked at exit. print_stacktrace gives UBSan's reports a stack.
# intercept_tls_get_addr=0: with OpenMP's worker threads alive at exit, GCC 12's LeakSanitizer crashes in its own
# tracer while it scans their dynamic TLS ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal
# error", after every assertion passed: test_gemm, test_pe_cache; a sanitizer runtime bug, gone with
# OMP_NUM_THREADS=1 or with this option). With it the leak check runs and the tests keep their threads.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:intercept_tls_get_addr=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# ---- (a) the suite under ASan + UBSan ----------------------------------------------------------------------
if [ $do_tests = 1 ]; then
  mkdir -p "$ASAN_BUILD"
  log=$ASAN_BUILD/sanitize-build.log
  echo "== (a) the suite under ASan + UBSan: configure and build $ASAN_BUILD with $CXX_SANITIZE (log: $log)"
  t0=$SECONDS
  set +e
  {
    CXX=$CXX_SANITIZE cmake -S "$ROOT" -B "$ASAN_BUILD" -DCMAKE_BUILD_TYPE=Release -DLIERE_BUILD_TESTS=ON \
      -DLIERE_BUILD_EXAMPLES=ON -DLIERE_SANITIZE=ON -DLIERE_CUDA_PTX_ONLY=ON "${launcher[@]}" &&
    nice -n "$NICE" cmake --build "$ASAN_BUILD" -j"$jobs"
  } >"$log" 2>&1
  rc=$?
  set -e
  nwarn=$(warnings_in "$log")
  if [ $rc -ne 0 ]; then
    row "build (ASan + UBSan, $CXX_SANITIZE)" "FAILED (exit $rc; see $log)" $((SECONDS - t0)); fail
    grep -m 20 -E 'error|Error' "$log" || true
  elif [ "$nwarn" -ne 0 ]; then
    row "build (ASan + UBSan, $CXX_SANITIZE)" "FAILED: $nwarn warning lines (see $log)" $((SECONDS - t0)); fail
    grep -i -m 20 'warning' "$log" || true
  else
    row "build (ASan + UBSan, $CXX_SANITIZE)" "ok, no warning lines" $((SECONDS - t0))
  fi

  if [ $rc -eq 0 ]; then
    tlog=$ASAN_BUILD/sanitize-ctest.log
    echo "== (a) running every CTest test in $ASAN_BUILD (-j$jobs; log: $tlog)"
    t0=$SECONDS
    set +e
    nice -n "$NICE" ctest --test-dir "$ASAN_BUILD" -j"$jobs" --output-on-failure >"$tlog" 2>&1
    rc=$?
    set -e
    # One line per test: "  3/34 Test  #7: test_io ..........   Passed    1.23 sec" (or ***Failed, Not Run, ...).
    n_pass=0 n_skip=0 n_fail=0
    while IFS= read -r line; do
      name=$(sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' <<<"$line")
      secs=$(sed -E 's/.* ([0-9.]+) sec$/\1/' <<<"$line")
      res=$(sed -E 's/.*Test +#[0-9]+: [^ ]+ [ .]*\**(.*[^ ]) +[0-9.]+ sec$/\1/' <<<"$line")
      case $res in
        Passed) row "  $name" passed "$secs"; n_pass=$((n_pass + 1)) ;;
        Skipped) row "  $name" skipped "$secs"; n_skip=$((n_skip + 1)) ;;
        "Not Run (Disabled)") row "  $name" "skipped (disabled in this configuration)" "$secs"; n_skip=$((n_skip + 1)) ;;
        *) row "  $name" "FAILED ($res)" "$secs"; n_fail=$((n_fail + 1)); fail ;;
      esac
    done < <(grep -E 'Test +#[0-9]+: ' "$tlog")
    total=$((n_pass + n_skip + n_fail))
    summary="$n_pass passed, $n_skip skipped, $n_fail failed of $total"
    if [ $rc -ne 0 ] || [ $n_fail -ne 0 ] || [ $total -eq 0 ]; then
      fail
      row "ctest" "FAILED: $summary (exit $rc; see $tlog)" $((SECONDS - t0))
      # The first line of every sanitizer report, with where it happened.
      grep -E '(ERROR|SUMMARY): (Address|Leak|UndefinedBehavior)Sanitizer|runtime error:' "$tlog" | head -40 || true
    else
      row "ctest" "ok: $summary" $((SECONDS - t0))
    fi
  fi
fi

# ---- (b) the fuzz targets -------------------------------------------------------------------------------------
if [ $do_fuzz = 1 ]; then
  fuzz_cxx=${CXX:-clang++-14}
  [[ $fuzz_cxx == *clang* ]] || fuzz_cxx=clang++-14
  rt=$(ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a 2>/dev/null | head -1 || true)
  if ! command -v "$fuzz_cxx" >/dev/null || [ -z "$rt" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "== (b) installing clang-14 and libclang-rt-14-dev (libFuzzer) with apt-get"
      apt-get install -y clang-14 libclang-rt-14-dev >/dev/null
    else
      echo "sanitize.sh: the fuzz targets need clang-14 and libFuzzer: apt-get install -y clang-14 libclang-rt-14-dev" >&2
      row "fuzz: clang-14 + libclang-rt-14-dev" "MISSING (install them, or run --tests-only)" 0; fail
      do_fuzz=0
    fi
  fi
fi
if [ $do_fuzz = 1 ]; then
  blog=$FUZZ_BUILD/sanitize-fuzz-build.log
  flog=$FUZZ_BUILD/sanitize-fuzz.log
  mkdir -p "$FUZZ_BUILD"
  echo "== (b) fuzz targets: build $FUZZ_BUILD with $fuzz_cxx (log: $blog)"
  # tests/fuzz/run.sh configures (when needed) and builds the targets, then runs them one after another, each
  # with its log in $FUZZ_BUILD/fuzz-<target>.log.
  fuzz_env=(BUILD="$FUZZ_BUILD" CXX="$fuzz_cxx" CC="${fuzz_cxx/clang++/clang}" NICE="$NICE" JOBS="$jobs")
  [ ${#launcher[@]} -eq 0 ] || fuzz_env+=(CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  t0=$SECONDS
  set +e
  env "${fuzz_env[@]}" bash "$ROOT/tests/fuzz/run.sh" --build-only >"$blog" 2>&1
  rc=$?
  set -e
  nwarn=$(warnings_in "$blog")
  if [ $rc -ne 0 ]; then
    row "fuzz build (clang, LIERE_FUZZ)" "FAILED (exit $rc; see $blog)" $((SECONDS - t0)); fail
    grep -m 20 -E 'error|Error' "$blog" || true
  else
    if [ "$nwarn" -ne 0 ]; then
      row "fuzz build (clang, LIERE_FUZZ)" "FAILED: $nwarn warning lines (see $blog)" $((SECONDS - t0)); fail
      grep -i -m 20 'warning' "$blog" || true
    else
      row "fuzz build (clang, LIERE_FUZZ)" "ok, no warning lines" $((SECONDS - t0))
    fi
    echo "== (b) running every fuzz target for $runs inputs, one after another (log: $flog)"
    t0=$SECONDS
    set +e
    env "${fuzz_env[@]}" bash "$ROOT/tests/fuzz/run.sh" "$runs" >"$flog" 2>&1
    rc=$?
    set -e
    # run.sh's summary: "fuzz_x: Done N runs in S second(s), C s of CPU" or "fuzz_x: FAILED (...)".
    n=0
    while IFS= read -r line; do
      n=$((n + 1))
      t=${line%%:*}
      if [[ $line =~ Done\ ([0-9]+)\ runs\ in\ ([0-9]+)\ second ]]; then
        done_runs=${BASH_REMATCH[1]} secs=${BASH_REMATCH[2]}
        cpu=$(grep -oE '[0-9]+ s of CPU' <<<"$line" || true)
        if [ "$done_runs" -ge "$runs" ]; then
          row "  $t" "ok: $done_runs runs${cpu:+, $cpu}" "$secs"
        else
          row "  $t" "FAILED: stopped after $done_runs of $runs runs (SECONDS_PER_TARGET)" "$secs"; fail
        fi
      else
        row "  $t" "${line#*: }" "-"; fail
        grep -E '(ERROR|SUMMARY): (Address|Leak|UndefinedBehavior)Sanitizer|runtime error:|FUZZ_CHECK' \
          "$FUZZ_BUILD/fuzz-$t.log" | head -10 || true
      fi
    done < <(sed -n '/^== summary$/,$p' "$flog" | grep -E '^fuzz_[a-z0-9_]+: ')
    if [ $rc -ne 0 ] || [ $n -eq 0 ]; then
      row "fuzz runs" "FAILED (exit $rc, $n targets; see $flog)" $((SECONDS - t0)); fail
    else
      row "fuzz runs" "ok: $n targets" $((SECONDS - t0))
    fi
  fi
fi

# ---- the table ----------------------------------------------------------------------------------------------
echo
printf '%-40s %-60s %s\n' "step / test / target" "result" "seconds"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c <<<"$r"
  printf '%-40s %-60s %s\n' "$a" "$b" "$c"
done
echo
if [ $status -eq 0 ]; then echo "sanitize.sh: all passed"; else echo "sanitize.sh: FAILED (see above)"; fi
exit $status
