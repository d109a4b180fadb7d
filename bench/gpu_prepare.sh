#!/bin/bash
# bench/gpu_prepare.sh — on a machine without a GPU: build what bench/gpu_run.sh runs, for sm_90, and put it in one
# small folder to copy (or carry) to a GPU machine, so that the GPU's minutes go to tests and measurements.
#
#   bench/gpu_prepare.sh [BUILD_DIR [OUT_DIR]]      (defaults: build-gpu, gpu_bin)
#
# Configures BUILD_DIR (Release, tests and benchmarks on, CMAKE_CUDA_ARCHITECTURES=90, ccache when installed) unless
# it is configured already, builds test_cuda, train_cifar, train_arrows, bench_attention_device and
# bench_cudnn_attention, and
# copies them into OUT_DIR in the layout gpu_run.sh expects (tests/, examples/, bench/), with the host libraries a
# bare CUDA machine may lack (OpenMP's libgomp, zlib) in OUT_DIR/lib, where gpu_run.sh looks last. The CUDA
# libraries (cudart, cuBLAS, cuBLASLt; cuDNN, loaded at run time) are the GPU machine's own. Prints the folder's size
# (the device tool carries at most 64 MiB), then:
#
#   bench/gpu_run.sh OUT_DIR OUT       on the GPU machine (LIERE_GPU_PARTS: which parts; bench/README.md)
#
# Environment: JOBS (parallel build jobs, 2), CUDA_ARCH (90).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-gpu}
out=${2:-gpu_bin}
jobs=${JOBS:-2}
arch=${CUDA_ARCH:-90}
case $build in /*) ;; *) build=$root/$build ;; esac
case $out in /*) ;; *) out=$root/$out ;; esac
if [ ! -f "$build/CMakeCache.txt" ]; then
  launchers=()
  if command -v ccache > /dev/null; then
    launchers=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLIERE_WITH_CUDA=ON -DLIERE_BUILD_TESTS=ON \
    -DLIERE_BUILD_BENCH=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch" "${launchers[@]}"
else
  cmake -S "$root" -B "$build" > /dev/null  # configured before: again, for programs added since
fi
targets=$(cmake --build "$build" --target help)
for t in test_cuda train_cifar train_arrows bench_attention_device bench_cudnn_attention; do
  grep -q "\.\.\. $t\$" <<< "$targets" || {
    echo "gpu_prepare.sh: $build has no target $t (the CUDA backend needs nvcc; the benchmark LIERE_BUILD_BENCH=ON)" >&2
    exit 2
  }
done
cmake --build "$build" -j "$jobs" --target test_cuda train_cifar train_arrows bench_attention_device \
  bench_cudnn_attention
rm -rf "$out"
mkdir -p "$out/tests" "$out/examples" "$out/bench" "$out/lib"
cp "$build/tests/test_cuda" "$out/tests/"
cp "$build/examples/train_cifar" "$build/examples/train_arrows" "$out/examples/"
cp "$build/bench/bench_attention_device" "$build/bench/bench_cudnn_attention" "$out/bench/"
for lib in libgomp.so.1 libz.so.1; do
  path=$(ldd "$out/tests/test_cuda" "$out/examples/train_cifar" | awk -v l="$lib" '$1 == l {print $3; exit}')
  [ -n "$path" ] && cp -L "$path" "$out/lib/"
done
echo "gpu_prepare.sh: $out ($(du -sh "$out" | cut -f1)) at $(git -C "$root" describe --always --dirty):"
(cd "$out" && find . -type f | sort)
