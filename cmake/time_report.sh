#!/bin/sh
# cmake/time_report.sh LOG — the log of cmake/time_compile.sh as a table: CPU seconds (user + system) per output
# file, largest first, and the total; then the CPU seconds per part of the build (docs/testing.md, "Build time").
awk '{cpu = $1 + $2; total += cpu; printf "%7.1f %7.1f  %s\n", cpu, $3, $4}
     END {printf "%7.1f          total CPU seconds (user + system), %d commands\n", total, NR}' "$1" | sort -rn
echo
awk '{cpu = $1 + $2; o = $4; p = "other"
      if (o ~ /liere_cuda/) p = "cuda (liere::cuda)"
      else if (o ~ /liere_torch/) p = "torch (liere_torch)"
      else if (o ~ /liere_compiled/) p = "compiled library (liere::compiled)"
      else if (o ~ /liere_data_tools|liere_video/) p = "data tools (liere_data_tools, liere_video)"
      else if (o ~ /test_|liere_tests_|liere_catch_main|liere_test_util|liere_test_pch|readme_example/) p = "tests"
      else p = "programs (examples, liere_app)"
      s[p] += cpu; n[p]++}
     END {for (p in s) printf "%7.1f  %s, %d commands\n", s[p], p, n[p]}' "$1" | sort -rn
