#!/usr/bin/python3
"""Where a training step's GPU time goes: a table from the Nsight Compute CSV that bench/gpu_run.sh writes
(train_cifar --bench-steps 1 under `ncu --metrics gpu__time_duration.sum --csv`: two warm-up steps and one timed).

The steps are told apart by the optimizer: each ends with a run of k_adam launches (one per parameter). The table is
the last complete step: each kernel's GPU time (summed over its launches), its launches, and its share of the step.
The times are kernel durations with ncu serialising the launches: the sum is the GPU's busy time, not the wall time.

  python3 bench/gpu_profile.py gpu_out/profile_liere8.csv [--top 25] [--markdown]
"""
import argparse
import collections
import csv
import gzip
import re
import sys


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r), None)
    if head is None:
        sys.exit(f"{path}: no 'Kernel Name' / 'Metric Value' header: not an ncu --csv file")
    h = rows[head]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    out = []
    for line, r in enumerate(rows[head + 1:], start=head + 2):
        if len(r) != len(h):
            continue
        unit = r[ui]
        scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}.get(unit)
        if scale is None:
            sys.exit(f"{path}:{line}: unit '{unit}': expected ns, us or ms (run ncu with --print-units base)")
        name = re.sub(r"\(.*", "", r[ki]).strip()
        name = re.sub(r"^void ", "", name)
        out.append((name, float(r[vi].replace(",", "")) * scale))
    return out


def last_step(kernels):
    """The launches of the last complete step: after the second-to-last run of k_adam, through the last run."""
    is_adam = ["k_adam" in n for n, _ in kernels]
    ends = [i for i in range(len(kernels)) if is_adam[i] and (i + 1 == len(kernels) or not is_adam[i + 1])]
    if len(ends) < 2:
        return kernels, "all launches (fewer than two optimizer steps found)"
    return kernels[ends[-2] + 1: ends[-1] + 1], f"step {len(ends)} of {len(ends)}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--markdown", action="store_true", help="a Markdown table (for docs/)")
    a = p.parse_args()
    step, which = last_step(read(a.csv))
    tot, cnt = collections.Counter(), collections.Counter()
    for n, ms in step:
        tot[n] += ms
        cnt[n] += 1
    total = sum(tot.values())
    print(f"{a.csv}: {which}: {len(step)} launches, {total:.2f} ms of kernel time")
    if a.markdown:
        print("\n| kernel | ms | launches | share |\n|---|---:|---:|---:|")
    for n, ms in tot.most_common(a.top):
        short = n if len(n) <= 70 else n[:67] + "..."
        if a.markdown:
            print(f"| `{short}` | {ms:.3f} | {cnt[n]} | {100 * ms / total:.1f}% |")
        else:
            print(f"{ms:9.3f} ms {cnt[n]:6d} {100 * ms / total:5.1f}%  {short}")
    rest = total - sum(ms for _, ms in tot.most_common(a.top))
    if rest > 0:
        print(f"| the other {len(tot) - a.top} kernels | {rest:.3f} | | {100 * rest / total:.1f}% |" if a.markdown
              else f"{rest:9.3f} ms        {100 * rest / total:5.1f}%  the other {len(tot) - a.top} kernels")


if __name__ == "__main__":
    main()
