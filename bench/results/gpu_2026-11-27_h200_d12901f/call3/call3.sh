#!/bin/bash
# The session of 2026-11-28's third device call: the compare at the final code, host threads side by side, abs's profile.
set -u
out=${OUT:-/tmp/out}
here=$(pwd)
train=$here/gpu_bin/examples/train_cifar
dirs=""
for d in /usr/local/cuda/lib64 $(find /usr/local /opt /usr/lib -name 'libcublasLt.so.*' -printf '%h\n' 2>/dev/null | sort -u) \
         "$here/gpu_bin/lib"; do
  [ -d "$d" ] && dirs="$dirs:$d"
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}$dirs"
ldd "$train" | grep "not found"
echo "== $(date -u +%T) compare" | tee $out/call3.log
PYTHONUNBUFFERED=1 timeout 200 python3 bench/gpu_compare.py --build-dir gpu_bin --steps 20 --run-timeout 60 \
  --models tiny,base --enc abs,liere8,liere64 --precisions fp32,tf32,bf16 --threads 16 \
  --json $out/gpu_compare.jsonl 2>&1 | tee $out/gpu_compare.log
echo "== $(date -u +%T) host threads, ViT-Tiny float" | tee -a $out/call3.log
for round in 1 2; do
  for v in "liere 64 16" "liere 64 1" "liere 64 16 passive" "absolute 0 16" "absolute 0 1"; do
    set -- $v
    blk=(); [ "$2" != 0 ] && blk=(--block $2)
    env=(); [ "${4:-}" = passive ] && env=(OMP_WAIT_POLICY=passive)
    line=$(env "${env[@]}" timeout 60 "$train" --data cifar100 --model tiny --patch 4 --batch 128 --device cuda \
      --bench-steps 20 --threads $3 --pe $1 "${blk[@]}" --precision fp32 2>&1 | grep -E "step_ms")
    echo "round $round pe=$1 block=$2 threads=$3 ${4:-} $line"
  done
done 2>&1 | tee -a $out/call3.log
echo "== $(date -u +%T) profile abs" | tee -a $out/call3.log
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 80 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base "$train" --data cifar100 \
  --model tiny --patch 4 --batch 128 --device cuda --bench-steps 1 --threads 16 --pe absolute > /tmp/profile_abs.csv \
  2>> $out/call3.log
gzip -c /tmp/profile_abs.csv > $out/profile_abs.csv.gz
echo "== $(date -u +%T) done" | tee -a $out/call3.log
