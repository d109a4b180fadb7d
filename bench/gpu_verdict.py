#!/usr/bin/python3
"""The issues' GPU targets read from one gpu_run.sh output folder: what was met, what was not, what has no data.

  python3 bench/gpu_verdict.py gpu_out            # the folder gpu_run.sh wrote (or the tgz's contents)

It reads test_cuda.log and test_cuda_debug.log: the Catch2 summaries, the exit status gpu_run.sh writes after each
run, and every "value <= bound  case" line (the largest value / bound). test_cuda is PASSED only when every run's
status is 0 or 77 (77: some part skipped, the rest passed), no summary counts a failure and no value is over its
bound; a log without a status (a run cut short, or an older gpu_run.sh) reads NOT CONFIRMED. Then it reads
gpu_compare.jsonl (or, from a run cut short, its .partial) and the side-by-sides in gpu_compare.log, and prints one
line per target of issues 21 and 22 (B 128, CIFAR shape, liere with its first --threads value):

  issue 21  ViT-Tiny LieRE-8 / PyTorch >= 2 (float, TF32); LieRE-64 / abs >= 0.9 (float); ViT-B LieRE-8 / PyTorch
            >= 2 (float, TF32)
  issue 22  ViT-Tiny LieRE-8 bf16 >= 20 000 img/s and / PyTorch bf16 >= 2; ViT-B LieRE-8 bf16 / PyTorch bf16 >= 2

then every encoding's ratios (the issues ask for every row, not only the good ones) and each side-by-side's mean
img/s with the switch on against off. Exit status 0 whatever the verdicts (1: no folder or nothing to read).
"""
import argparse
import json
import os
import re
import sys

TARGETS = [  # (issue, model, encoding, precision, kind, threshold); kind: torch (liere / PyTorch), abs, img_s
    (21, "tiny", "liere8", "fp32", "torch", 2.0), (21, "tiny", "liere8", "tf32", "torch", 2.0),
    (21, "tiny", "liere64", "fp32", "abs", 0.9), (21, "base", "liere8", "fp32", "torch", 2.0),
    (21, "base", "liere8", "tf32", "torch", 2.0), (22, "tiny", "liere8", "bf16", "img_s", 20000.0),
    (22, "tiny", "liere8", "bf16", "torch", 2.0), (22, "base", "liere8", "bf16", "torch", 2.0),
]
LABEL = {"tiny": "ViT-Tiny", "base": "ViT-B", "fp32": "float", "tf32": "TF32", "bf16": "bf16", "fp16": "fp16"}


def read_runs(folder):
    """The compare's run records, and where they came from (None: no compare in the folder)."""
    for name in ("gpu_compare.jsonl", "gpu_compare.jsonl.partial"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            runs = []
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError as e:  # a run cut short can leave half a line
                        print(f"{path}:{n}: not JSON ({e.msg}): line skipped")
                        continue
                    if r.get("type") == "run":
                        runs.append(r)
            return runs, path
    return None, None


def rate(runs, impl, model, enc, prec):
    """img/s of the first successful run of (impl, model, enc, prec): liere's first --threads value is the first."""
    for r in runs:
        if (r.get("impl"), r.get("model"), r.get("enc"), r.get("precision")) == (impl, model, enc, prec) and \
                r.get("returncode", 0) == 0 and r.get("img_per_s"):
            return float(r["img_per_s"])
    return None


def value(runs, model, enc, prec, kind):
    mine = rate(runs, "liere", model, enc, prec)
    if kind == "img_s":
        return mine
    other = rate(runs, "torch", model, enc, prec) if kind == "torch" else rate(runs, "liere", model, "abs", prec)
    return None if mine is None or other is None else mine / other


def test_cuda_summary(folder):
    """Lines for test_cuda's logs: the summaries, each run's exit status, the largest error / bound, and last the
    verdict: FAILED (a status other than 0 or 77 — 124 is a run stopped at its time limit —, a summary that counts a
    failure, or a value over its bound), else NOT CONFIRMED (a log without an exit status), else PASSED."""
    out, failed, unsure, statuses, worst, over = [], [], [], 0, None, []
    logs = [name for name in ("test_cuda.log", "test_cuda_debug.log") if os.path.exists(os.path.join(folder, name))]
    if not logs:
        return ["test_cuda: no test_cuda.log"]
    for name in logs:
        text = open(os.path.join(folder, name), errors="replace").read()
        for m in re.finditer(r"^(All tests passed.*|test cases:.*|.*skipped: no CUDA device.*)$", text, re.M):
            line = m.group(1).strip()
            out.append(f"{name}: {line}")
            if re.search(r"\b[1-9][0-9]* failed", line):
                failed.append(f"{name}: {line}")
        runs = re.findall(r"^(test_cuda.*) exit status (\d+)\s*$", text, re.M)
        for what, rc in runs:
            statuses += 1
            note = {"0": "passed", "77": "passed, some part skipped",
                    "124": "stopped at its time limit"}.get(rc, "failed")
            out.append(f"{name}: {what} exit status {rc} ({note})")
            if rc not in ("0", "77"):
                failed.append(f"{what} exit status {rc}")
        if not runs:
            unsure.append(f"{name}: no exit status (the run was cut short, or an older gpu_run.sh wrote the log)")
        for m in re.finditer(r"^\s*([-+0-9.eE]+|nan|inf) <= ([-+0-9.eE]+)\s+(.*)$", text, re.M):
            try:
                v, b = float(m.group(1)), float(m.group(2))
            except ValueError:
                continue
            frac = v / b if b > 0 else float("inf")
            if not frac <= 1:
                over.append(m.group(0).strip())
            if worst is None or not frac <= worst[0]:
                worst = (frac, m.group(0).strip())
    if worst:
        out.append(f"test_cuda: largest error / bound {worst[0]:.3g} ({worst[1]})")
    out += [f"test_cuda: OVER ITS BOUND: {line}" for line in over]
    failed += over
    if failed:
        out.append("test_cuda: FAILED (" + "; ".join(failed) + ")")
    elif unsure:
        out.append("test_cuda: NOT CONFIRMED (" + "; ".join(unsure) + ")")
    else:
        out.append(f"test_cuda: PASSED ({statuses} runs)")
    return out


def side_by_sides(folder):
    path = os.path.join(folder, "gpu_compare.log")
    if not os.path.exists(path):
        return []
    out, title, on, off = [], None, [], []

    def flush():
        if title and (on or off):
            mean = lambda xs: sum(xs) / len(xs) if xs else None
            a, b = mean(on), mean(off)
            ratio = f"{a / b:.3f}" if a and b else "–"
            out.append(f"{title}: on {a and round(a)} img/s, off {b and round(b)} img/s, on / off {ratio}")
    for line in open(path, errors="replace"):
        m = re.match(r"== \d\d:\d\d:\d\d (.*)$", line.strip())
        if m:
            flush()
            title, on, off = m.group(1), [], []
            continue
        m = re.match(r"(\w+)=(1|0|on|off) .*?(?:img_per_s|img/s)=?([0-9.]+)", line)
        if title and m:
            (on if m.group(2) in ("1", "on") else off).append(float(m.group(3)))
    flush()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="gpu_run.sh's output folder")
    a = p.parse_args()
    if not os.path.isdir(a.folder):
        print(f"gpu_verdict.py: {a.folder}: not a folder", file=sys.stderr)
        return 1
    print("\n".join(test_cuda_summary(a.folder)))
    runs, source = read_runs(a.folder)
    if runs is None:
        print("compare: no gpu_compare.jsonl")
        return 0
    print(f"compare: {len(runs)} runs from {source}")
    for issue, model, enc, prec, kind, threshold in TARGETS:
        v = value(runs, model, enc, prec, kind)
        what = {"torch": "liere / PyTorch", "abs": "liere / abs", "img_s": "img/s"}[kind]
        verdict = "no data" if v is None else "met" if v >= threshold else "NOT met"
        shown = "–" if v is None else f"{v:.0f}" if kind == "img_s" else f"{v:.2f}"
        print(f"issue {issue}: {LABEL[model]} {enc} {LABEL[prec]} {what} {shown} (target >= {threshold:g}): {verdict}")
    print("every row (liere / PyTorch, liere / abs):")
    keys = sorted({(r.get("model"), r.get("enc"), r.get("precision")) for r in runs if r.get("impl") == "liere"},
                  key=lambda k: (k[0] != "tiny", k[2], k[1]))
    for model, enc, prec in keys:
        t, b = value(runs, model, enc, prec, "torch"), value(runs, model, enc, prec, "abs")
        mine = rate(runs, "liere", model, enc, prec)
        print(f"  {LABEL.get(model, model)} {enc} {LABEL.get(prec, prec)}: {mine and round(mine)} img/s, "
              f"/ PyTorch {'–' if t is None else f'{t:.2f}'}, / abs {'–' if b is None else f'{b:.2f}'}")
    for line in side_by_sides(a.folder):
        print("side by side: " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
