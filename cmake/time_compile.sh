#!/bin/sh
# cmake/time_compile.sh — a compiler/linker launcher that logs the CPU time of every compile and link of a build
# (docs/testing.md, "Build time"). Usage, with an absolute log path as the launcher's first argument:
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLIERE_BUILD_TESTS=ON -DLIERE_CUDA_PTX_ONLY=ON \
#     "-DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/cmake/time_compile.sh;$PWD/build/times.log" \
#     "-DCMAKE_CUDA_COMPILER_LAUNCHER=$PWD/cmake/time_compile.sh;$PWD/build/times.log" \
#     "-DCMAKE_CXX_LINKER_LAUNCHER=$PWD/cmake/time_compile.sh;$PWD/build/times.log"
# Each line of the log: user seconds, system seconds, wall seconds, the output file (-o), children (nvcc's cicc,
# ptxas, ...) included. Summarise with cmake/time_report.sh LOG.
log=$1
shift
out=?
prev=
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
exec /usr/bin/time -a -o "$log" -f "%U %S %e $out" "$@"
