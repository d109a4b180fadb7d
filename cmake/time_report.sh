#!/bin/sh
# cmake/time_report.sh LOG — the log of cmake/time_compile.sh as a table: CPU seconds (user + system) per output
# file, largest first, and the total.
awk '{cpu = $1 + $2; total += cpu; printf "%7.1f %7.1f  %s\n", cpu, $3, $4}
     END {printf "%7.1f          total CPU seconds (user + system), %d commands\n", total, NR}' "$1" | sort -rn
