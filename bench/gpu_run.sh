#!/bin/bash
# bench/gpu_run.sh — everything a GPU machine is for, in one command, on a build folder compiled elsewhere.
#
#   bench/gpu_run.sh BUILD_DIR [OUT_DIR]
#
# BUILD_DIR holds tests/test_cuda and examples/train_cifar, configured with -DLIERE_WITH_CUDA=ON
# -DCMAKE_CUDA_ARCHITECTURES=90 (bench/README.md, "GPU"): compile on a machine without a GPU, copy or mount the two
# binaries, and spend the GPU's minutes on tests and measurements. In order, each part with its own time limit so
# that a slow part cannot take the others' output with it (OUT_DIR, default gpu_out/, gets one log per part):
#
#   machine.txt          the GPU, driver, CUDA, PyTorch, CPU, kernel
#   test_cuda.log        test_cuda: every case, its duration, and the largest scaled error of each case; then the
#                        cases whose copies the staging buffers change, with LIERE_CUDA_STAGING=1; then the
#                        ViT-step parity case again with the CPU's tables by the device's method
#                        (LIERE_TABLE_METHOD=polynomial): which differences the table algorithm makes; after each
#                        run its exit status ("test_cuda … exit status N")
#   gpu_compare.jsonl    liere against PyTorch eager (bench/torch_vit_gpu.py) on the same GPU, one run:
#   gpu_compare.log        ViT-Tiny and ViT-B, CIFAR shape, B 128, every encoding, float, TF32 and bf16 (liere
#                          --precision bf16; PyTorch autocast bf16), LIERE_GPU_PRECISIONS (gpu_compare.py)
#                        then LieRE-64 ViT-Tiny float with its rotations by GEMMs and by the element kernels
#                        (LIERE_CUDA_ROTATE_GEMMS=1, 0, twice each, interleaved), and LieRE-8 with the attention
#                        keys padded to a multiple of 4 and not (LIERE_CUDA_PAD_SCORES=1, 0), and with the bias
#                        in cuBLASLt's epilogues and not (LIERE_CUDA_EPILOGUES=1, 0), and LieRE-8 bf16 with
#                        attention's operands rounded once and per product (LIERE_CUDA_ATTENTION_PACKS=1, 0), and
#                        with the flat kernels and without (LIERE_CUDA_FLAT_KERNELS=1, 0), and LieRE-8 float with its
#                        copies to the device staged and not (LIERE_CUDA_STAGING=1, 0), and LieRE-64 float with its
#                        rotations by liere's 64 × 64 tile kernels and by cuBLAS's batches (LIERE_CUDA_ROTATE_TILES=1,
#                        0), and LieRE-8 float with the step's one wait and with the norm read before the update
#                        (LIERE_ONE_WAIT=1, 0), appended to gpu_compare.log; then a real training run's throughput with
#                        the next batch filled on a loader thread and between steps (train_arrows --prefetch on, off,
#                        twice each: two epochs, the second's img/s; it renders its own data, no files needed)
#   profile_<enc>.csv    the kernels of three ViT-Tiny steps (2 warm-up, 1 timed) with their GPU time (Nsight
#                        Compute, one metric), where ncu is installed, for each encoding of LIERE_GPU_PROFILE
#                        (liere64,liere8-bf16); bench/gpu_profile.py makes the table of the last step; profile.log:
#                        ncu's messages
#   attention.log        flash against unfused attention on the GPU, T = 65, 1025 and 4097 (bench_attention_device,
#                        where the build has it: -DLIERE_BUILD_BENCH=ON): time and peak device memory, forward +
#                        backward and the forward alone; then cuDNN's fused attention on the same shapes in bf16 and
#                        fp16 (bench_cudnn_attention)
#   test_cuda_debug.log  the parity cases again with LIERE_CUDA_SYNC=1 LIERE_POOL_POISON=1 (as CTest's test_cuda_debug)
#   verdict.txt          bench/gpu_verdict.py on the folder: each target of issues 21 and 22 met, not met or without
#                        data, every encoding's ratios, the side-by-sides' means
#
# Environment: LIERE_GPU_STEPS (timed steps per benchmark run, 20), LIERE_GPU_THREADS (train_cifar's host threads,
# 16), LIERE_GPU_PARTS (which parts, "machine,tests,compare,profile,attention,debug"), LIERE_GPU_MODELS (tiny,base),
# LIERE_GPU_PRECISIONS (the compare's precisions: fp32,tf32,bf16), LIERE_GPU_ENCODINGS (the compare's encodings:
# abs,rope-mixed,liere8,liere64), LIERE_GPU_TORCH (1; 0: the compare without PyTorch, liere's side only: a quick
# check of a change on a few device minutes), LIERE_GPU_AB (the side-by-side switches after the compare: rotate, pad,
# epilogues, packs, flat, staging, tiles, onewait, prefetch; all nine, or "none"),
# LIERE_GPU_PROFILE (encodings to profile: abs, rope-mixed, liere8, liere64; a -bf16 suffix, liere8-bf16, profiles
# the run with --precision bf16; then a -flat suffix, liere8-bf16-flat, with LIERE_CUDA_FLAT_KERNELS=1), PYTHON (the
# interpreter with a CUDA PyTorch, python3), LIERE_GPU_DEADLINE (seconds for the whole script, 0 = none: a part or
# side-by-side with too little time left is skipped and said so, each program's timeout is cut to what is left, and
# the compare stops starting runs in time to print its tables; the script then ends before a lease's limit with
# its logs complete). The exit status is 0 when every part that ran passed.
set -u
build=${1:?usage: bench/gpu_run.sh BUILD_DIR [OUT_DIR]}
out=${2:-gpu_out}
here=$(cd "$(dirname "$0")" && pwd)
steps=${LIERE_GPU_STEPS:-20}
models=${LIERE_GPU_MODELS:-tiny,base}
precisions=${LIERE_GPU_PRECISIONS:-fp32,tf32,bf16}
encodings=${LIERE_GPU_ENCODINGS:-abs,rope-mixed,liere8,liere64}
no_torch=()
[ "${LIERE_GPU_TORCH:-1}" = 0 ] && no_torch=(--no-torch)
profile_encs=${LIERE_GPU_PROFILE:-liere64,liere8-bf16}
ab_switches=${LIERE_GPU_AB:-rotate,pad,epilogues,packs,flat,staging,tiles,onewait,prefetch}
threads=${LIERE_GPU_THREADS:-16}
parts=",${LIERE_GPU_PARTS:-machine,tests,compare,profile,attention,debug},"
py=${PYTHON:-python3}
mkdir -p "$out"
build=$(cd "$build" && pwd)
test_cuda=$build/tests/test_cuda
train=$build/examples/train_cifar
for f in "$test_cuda" "$train"; do
  [ -x "$f" ] || { echo "gpu_run.sh: $f is missing: build the targets test_cuda and train_cifar in $build" >&2; exit 2; }
done
status=0
part() { [[ $parts == *",$1,"* ]]; }
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }
deadline=${LIERE_GPU_DEADLINE:-0}
t_start=$(date +%s)
skipped=""
# Seconds left before the deadline (a large number without one).
left() { if [ "$deadline" -gt 0 ]; then echo $((t_start + deadline - $(date +%s))); else echo 999999; fi; }
# cap N: a program's timeout, N seconds or what is left before the deadline less 5, whichever is smaller (≥ 1).
cap() {
  local l=$(($(left) - 5))
  [ "$l" -lt 1 ] && l=1
  [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
# room N WHAT: true when N seconds are left; otherwise says that the deadline skips WHAT.
room() {
  local l
  l=$(left)
  [ "$l" -ge "$1" ] && return 0
  stamp "skipped, LIERE_GPU_DEADLINE: $l s left, $1 s wanted: $2"
  skipped="$skipped; $2"
  return 1
}

# The CUDA libraries the binaries were linked against (cudart, cuBLAS, cuBLASLt of the build's toolkit): the
# toolkit's folder, else the ones in PyTorch's wheels; libraries carried beside the build (BUILD_DIR/lib) last.
if ldd "$test_cuda" "$train" | grep -q "not found"; then
  dirs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           $(find /usr/local /opt /usr/lib -name 'libcublasLt.so.*' -printf '%h\n' 2>/dev/null | sort -u) "$build/lib"; do
    [ -d "$d" ] && dirs="$dirs:$d"
  done
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}$dirs"
  if ldd "$test_cuda" "$train" | grep "not found"; then
    echo "gpu_run.sh: libraries above not found (searched${dirs//:/ })" >&2
    exit 2
  fi
fi

if part machine; then
  stamp machine
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,pstate --format=csv
    nvcc --version 2>/dev/null | tail -2
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
    grep -m1 "model name" /proc/cpuinfo
    echo "nproc $(nproc), kernel $(uname -r), liere $(git -C "$here" describe --always --dirty 2>/dev/null)"
  } 2>&1 | tee "$out/machine.txt"
fi

if part tests && room 30 test_cuda; then
  stamp test_cuda
  LIERE_TEST_TRAIN_CIFAR=$train timeout "$(cap 120)" "$test_cuda" -d yes 2>&1 | tee "$out/test_cuda.log"
  rc=${PIPESTATUS[0]}
  echo "test_cuda exit status $rc" | tee -a "$out/test_cuda.log"   # in the log too: gpu_verdict.py reads it
  # 77: every case that ran passed, and some part was skipped (the device lacks bf16 or cuDNN: the log's
  # "skipped" lines say which); anything else but 0 failed.
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi
if part tests && room 20 "test_cuda with LIERE_CUDA_STAGING=1"; then
  # The copies of these cases through the pinned staging buffers (off by default): attention's key masks, the
  # optimizer's and checkpoints' copies, a short training run, the trainer's program.
  stamp "test_cuda with LIERE_CUDA_STAGING=1: masks, optimizer, one wait, checkpoints, train_cifar"
  staged_cases="cuda: attention on its own*,cuda: flash attention matches*,cuda: Adam*"
  staged_cases="$staged_cases,cuda: a step with one wait*,cuda: train_cifar*"
  LIERE_CUDA_STAGING=1 LIERE_TEST_TRAIN_CIFAR=$train timeout "$(cap 120)" "$test_cuda" "$staged_cases" 2>&1 |
    tee -a "$out/test_cuda.log"
  rc=${PIPESTATUS[0]}
  echo "test_cuda (staged copies) exit status $rc" | tee -a "$out/test_cuda.log"
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi
if part tests && room 15 "test_cuda ViT step with the polynomial tables"; then
  stamp "test_cuda ViT step, CPU tables by the polynomial method"
  LIERE_TABLE_METHOD=polynomial timeout "$(cap 60)" "$test_cuda" "cuda: a ViT step matches the CPU*" 2>&1 |
    tee -a "$out/test_cuda.log"
  rc=${PIPESTATUS[0]}
  echo "test_cuda (polynomial tables) exit status $rc" | tee -a "$out/test_cuda.log"
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi

if part compare && room 30 gpu_compare; then
  stamp gpu_compare
  # With a deadline the compare keeps a quarter of what is left for the side-by-sides and the profile below.
  compare_s=360 compare_deadline=()
  if [ "$deadline" -gt 0 ]; then
    compare_s=$(($(left) * 3 / 4))
    [ "$compare_s" -lt 60 ] && compare_s=$(($(left) - 10))
    compare_deadline=(--deadline-s "$compare_s")
    compare_s=$((compare_s + 20))
  fi
  PYTHONUNBUFFERED=1 timeout "$(cap "$compare_s")" "$py" "$here/gpu_compare.py" --build-dir "$build" --steps "$steps" \
    --run-timeout 60 --models "$models" --enc "$encodings" --precisions "$precisions" --threads "$threads" \
    --python "$py" "${no_torch[@]}" "${compare_deadline[@]}" --json "$out/gpu_compare.jsonl" 2>&1 |
    tee "$out/gpu_compare.log"
  rc=${PIPESTATUS[0]}
  echo "gpu_compare exit status $rc"
  [ "$rc" = 0 ] || status=1
  # Side by side: ViT-Tiny with a switch VAR on (1) and off (0), alternating, twice each; block size BLOCK, float
  # unless PRECISION is given.
  ab() {
    local var=$1 block=$2 title=$3 precision=${4:-fp32}
    room 40 "$title" | tee -a "$out/gpu_compare.log"
    [ "${PIPESTATUS[0]}" = 0 ] || { skipped="$skipped; $title"; return 0; }
    stamp "$title" | tee -a "$out/gpu_compare.log"
    for g in 1 0 1 0; do
      line=$(env "$var=$g" timeout "$(cap 60)" "$train" --data cifar100 --model tiny --patch 4 --batch 128 \
        --device cuda --bench-steps "$steps" --threads "$threads" --pe liere --block "$block" --precision "$precision" 2>&1 |
        grep -E "step_ms|img_per_s")
      echo "$var=$g" $line
    done | tee -a "$out/gpu_compare.log"
  }
  abs_on=",$ab_switches,"
  [[ $abs_on == *,rotate,* ]] &&
    ab LIERE_CUDA_ROTATE_GEMMS 64 "LieRE-64 rotations: GEMMs (1) against element kernels (0)"
  [[ $abs_on == *,pad,* ]] &&
    ab LIERE_CUDA_PAD_SCORES 8 "LieRE-8 attention keys: padded to a multiple of 4 (1) against T (0)"
  [[ $abs_on == *,epilogues,* ]] &&
    ab LIERE_CUDA_EPILOGUES 8 "LieRE-8 bias in the GEMMs: cuBLASLt epilogues (1) against bias kernel and column sums (0)"
  [[ $abs_on == *,packs,* ]] &&
    ab LIERE_CUDA_ATTENTION_PACKS 8 "LieRE-8 bf16: attention's operands rounded once (1) against per product (0)" bf16
  [[ $abs_on == *,flat,* ]] &&
    ab LIERE_CUDA_FLAT_KERNELS 8 "LieRE-8 bf16: the flat kernels (1) against the element and warp-per-row ones (0)" bf16
  [[ $abs_on == *,staging,* ]] &&
    ab LIERE_CUDA_STAGING 8 "LieRE-8: copies to the device through pinned staging buffers (1) against cudaMemcpy (0)"
  [[ $abs_on == *,tiles,* ]] &&
    ab LIERE_CUDA_ROTATE_TILES 64 "LieRE-64 rotations: liere's 64 x 64 tile kernels (1) against cuBLAS's batches (0)"
  [[ $abs_on == *,onewait,* ]] &&
    ab LIERE_ONE_WAIT 8 "LieRE-8: the step's one wait for the device (1) against reading the norm before the update (0)"
  arrows=$build/examples/train_arrows
  if [[ $abs_on == *,prefetch,* ]] && [ -x "$arrows" ] && room 120 "train_arrows --prefetch on against off"; then
    stamp "train_arrows LieRE-8: the next batch filled on a loader thread (on) against between steps (off)" |
      tee -a "$out/gpu_compare.log"
    for g in on off on off; do
      m=$(mktemp)
      timeout "$(cap 120)" "$arrows" --pe liere --device cuda --epochs 2 --threads "$threads" --prefetch "$g" \
        --metrics "$m" > /dev/null 2>&1
      echo "prefetch=$g $(grep -o '"train_img_per_s":[0-9.]*' "$m" | tail -1)"
      rm -f "$m"
    done | tee -a "$out/gpu_compare.log"
  fi
  true
fi

if part profile; then
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [ -n "$ncu" ]; then
    for enc in ${profile_encs//,/ }; do
      room 45 "profile $enc" || continue
      stamp "profile $enc"
      flat=0 name=${enc%-flat}
      [ "$name" != "$enc" ] && flat=1
      base=${name%-bf16} prec=()
      [ "$base" != "$name" ] && prec=(--precision bf16)
      case $base in
        abs) pe=(--pe absolute) ;;
        rope-mixed) pe=(--pe rope-mixed) ;;
        liere[0-9]*) pe=(--pe liere --block "${base#liere}") ;;
        *) echo "LIERE_GPU_PROFILE: '$enc' is not one of abs, rope-mixed, liere<block>, each with -bf16 or not" \
             "and -flat or not" >&2
           status=1; continue ;;
      esac
      LIERE_CUDA_FLAT_KERNELS=$flat timeout "$(cap 90)" "$ncu" --clock-control none --metrics gpu__time_duration.sum \
        --csv --print-units base "$train" --data cifar100 --model tiny --patch 4 --batch 128 --device cuda --bench-steps 1 \
        --threads "$threads" "${pe[@]}" "${prec[@]}" > "$out/profile_$enc.csv" 2>> "$out/profile.log"
      echo "ncu exit status $? ($(grep -c gpu__time_duration "$out/profile_$enc.csv") kernels)"
    done
  else
    echo "no ncu on this machine: no profile"
  fi
fi

if part attention && room 60 attention; then
  if [ -x "$build/bench/bench_attention_device" ]; then
    stamp "attention: flash against unfused, forward + backward, then the forward alone"
    for pass in fwdbwd fwd; do
      timeout "$(cap 90)" "$build/bench/bench_attention_device" --device cuda --pass $pass 2>&1 |
        tee -a "$out/attention.log"
      rc=${PIPESTATUS[0]}
      echo "bench_attention_device --pass $pass exit status $rc (1: a run failed, out of memory among them: the log)"
    done
  else
    echo "no $build/bench/bench_attention_device (configure with -DLIERE_BUILD_BENCH=ON): no attention benchmark"
  fi
  if [ -x "$build/bench/bench_cudnn_attention" ]; then
    stamp "attention: cuDNN's fused attention on the same shapes, bf16 and fp16"
    for type in bf16 fp16; do
      timeout "$(cap 90)" "$build/bench/bench_cudnn_attention" --type $type 2>&1 | tee -a "$out/attention.log"
      echo "bench_cudnn_attention --type $type exit status ${PIPESTATUS[0]}"
    done
  fi
fi

if part debug && room 60 test_cuda_debug; then
  stamp test_cuda_debug
  LIERE_CUDA_SYNC=1 LIERE_POOL_POISON=1 timeout "$(cap 200)" "$test_cuda" "[parity]" 2>&1 |
    tee "$out/test_cuda_debug.log"
  rc=${PIPESTATUS[0]}
  echo "test_cuda [parity] debug exit status $rc" | tee -a "$out/test_cuda_debug.log"
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi
[ -n "$skipped" ] && stamp "LIERE_GPU_DEADLINE ($deadline s) skipped: ${skipped#; }"
# The issues' targets from what the parts wrote (bench/gpu_verdict.py: met, not met, no data; every row's ratios).
stamp verdict
"$py" "$here/gpu_verdict.py" "$out" 2>&1 | tee "$out/verdict.txt"
stamp "done, status $status"
exit $status
