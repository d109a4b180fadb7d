#!/usr/bin/env python3
"""tests/gpu_verdict_test.py — bench/gpu_verdict.py, the one page a GPU session reports from (CTest: gpu_verdict).

No GPU needed: it runs the verdict on folders made here, shaped like gpu_run.sh's, and on the H200's folder of
2026-11-27 under bench/results/. What it checks, each a way the page could read well while the run went wrong:

* test_cuda: PASSED only when every run's exit status is 0 or 77; a run stopped at its time limit (124) after an
  earlier run's "All tests passed", a summary counting a failure, a value over its bound, each read FAILED; a log
  without a status NOT CONFIRMED;
* the targets' values against ratios computed here from the JSON lines (the first successful run of each side; a
  failed run is not used; a missing side is "no data"), each verdict against its threshold;
* a half-written last line of a .partial file is skipped with its line named, the rest read.

    tests/gpu_verdict_test.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
VERDICT = os.path.join(HERE, "..", "bench", "gpu_verdict.py")
H200 = os.path.join(HERE, "..", "bench", "results", "gpu_2026-11-27_h200_6281435")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def verdict(folder):
    r = subprocess.run([sys.executable, VERDICT, folder], capture_output=True, text=True)
    check(r.returncode == 0, f"gpu_verdict.py exit status {r.returncode} on {folder}: {r.stderr}")
    return r.stdout


def test_cuda_line(out):
    lines = [l for l in out.splitlines() if re.match(r"test_cuda: (PASSED|FAILED|NOT CONFIRMED)", l)]
    check(len(lines) == 1, f"one test_cuda verdict line, got {lines}")
    return lines[0] if lines else ""


def folder_with(root, name, files):
    d = os.path.join(root, name)
    os.makedirs(d)
    for f, text in files.items():
        with open(os.path.join(d, f), "w") as fh:
            fh.write(text)
    return d


PASS = "All tests passed (10 assertions in 2 test cases)\n"


def test_cuda_cases(root):
    ok = folder_with(root, "ok", {"test_cuda.log": "  1e-06 <= 0.0001  cuda: a case\n" + PASS +
                                  "test_cuda exit status 0\n" + PASS + "test_cuda (staged copies) exit status 77\n"})
    check(test_cuda_line(verdict(ok)).startswith("test_cuda: PASSED (2 runs)"), "0 and 77 read PASSED")

    cut = folder_with(root, "cut", {"test_cuda.log": PASS + "test_cuda exit status 0\n" +
                                    "test_cuda (staged copies) exit status 124\n"})
    line = test_cuda_line(verdict(cut))
    check(line.startswith("test_cuda: FAILED") and "exit status 124" in line,
          f"a run stopped at its limit after a pass reads FAILED: {line}")

    failed = folder_with(root, "failed", {"test_cuda.log": "test cases: 23 | 22 passed | 1 failed\n"
                                          "assertions: 9 | 8 passed | 1 failed\ntest_cuda exit status 0\n"})
    check(test_cuda_line(verdict(failed)).startswith("test_cuda: FAILED"), "a summary counting a failure: FAILED")

    over = folder_with(root, "over", {"test_cuda.log": "  0.0002 <= 0.0001  cuda: a case\n" + PASS +
                                      "test_cuda exit status 0\n"})
    out = verdict(over)
    check(test_cuda_line(out).startswith("test_cuda: FAILED"), "a value over its bound: FAILED")
    check("OVER ITS BOUND: 0.0002 <= 0.0001" in out, "the value over its bound named")

    debug = folder_with(root, "debug", {"test_cuda.log": PASS + "test_cuda exit status 0\n",
                                        "test_cuda_debug.log": "test_cuda [parity] debug exit status 1\n"})
    check(test_cuda_line(verdict(debug)).startswith("test_cuda: FAILED"), "the debug run's failure: FAILED")

    old = folder_with(root, "old", {"test_cuda.log": PASS})
    check(test_cuda_line(verdict(old)).startswith("test_cuda: NOT CONFIRMED"), "no exit status: NOT CONFIRMED")


def first_rate(runs, impl, model, enc, prec):
    for r in runs:
        if r.get("type") == "run" and (r.get("impl"), r.get("model"), r.get("enc"), r.get("precision")) == \
                (impl, model, enc, prec) and r.get("returncode", 0) == 0 and r.get("img_per_s"):
            return float(r["img_per_s"])
    return None


def target_lines(out):
    """{(issue, model label, enc, precision label, kind): (shown value, verdict)} from the issue lines."""
    got = {}
    for m in re.finditer(r"^issue (\d+): (\S+) (\S+) (\S+) (liere / PyTorch|liere / abs|img/s) (\S+) "
                         r"\(target >= ([0-9.]+)\): (met|NOT met|no data)$", out, re.M):
        got[(int(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5))] = (m.group(6), float(m.group(7)),
                                                                                  m.group(8))
    return got


def expect_target(got, key, value, threshold):
    check(key in got, f"the target line {key}")
    if key not in got:
        return
    shown, thr, v = got[key]
    check(thr == threshold, f"{key}: threshold {thr}, expected {threshold}")
    if value is None:
        check(shown == "–" and v == "no data", f"{key}: {shown} {v}, expected no data")
        return
    check(abs(float(shown) - value) <= (0.5 if key[4] == "img/s" else 0.005), f"{key}: shown {shown}, computed {value}")
    check(v == ("met" if value >= threshold else "NOT met"), f"{key}: {v} for {value} against {threshold}")


def compare_cases(root):
    runs = [json.loads(l) for l in open(os.path.join(H200, "gpu_compare.jsonl")) if l.strip()]
    out = verdict(H200)
    got = target_lines(out)
    check(len(got) == 8, f"8 target lines on the H200's folder, got {len(got)}")
    for model, label in (("tiny", "ViT-Tiny"), ("base", "ViT-B")):
        for prec, plabel in (("fp32", "float"), ("tf32", "TF32"), ("bf16", "bf16")):
            mine, torch = first_rate(runs, "liere", model, "liere8", prec), first_rate(runs, "torch", model, "liere8",
                                                                                          prec)
            key = (21 if prec != "bf16" else 22, label, "liere8", plabel, "liere / PyTorch")
            expect_target(got, key, mine / torch if mine and torch else None, 2.0)
    mine, ab = first_rate(runs, "liere", "tiny", "liere64", "fp32"), first_rate(runs, "liere", "tiny", "abs", "fp32")
    expect_target(got, (21, "ViT-Tiny", "liere64", "float", "liere / abs"), mine / ab, 0.9)
    expect_target(got, (22, "ViT-Tiny", "liere8", "bf16", "img/s"), first_rate(runs, "liere", "tiny", "liere8", "bf16"),
                  20000.0)

    # A failed liere run is passed over for the next successful one; a missing PyTorch side is "no data"; a half line
    # of a .partial file is skipped and named.
    rows = [{"type": "run", "impl": "liere", "model": "tiny", "enc": "liere8", "precision": "fp32", "img_per_s": 9e9,
             "returncode": 1},
            {"type": "run", "impl": "liere", "model": "tiny", "enc": "liere8", "precision": "fp32",
             "img_per_s": 500.0},
            {"type": "run", "impl": "torch", "model": "tiny", "enc": "liere8", "precision": "fp32", "img_per_s": 200.0},
            {"type": "run", "impl": "liere", "model": "tiny", "enc": "liere8", "precision": "tf32", "img_per_s": 900.0},
            {"type": "run", "impl": "liere", "model": "tiny", "enc": "abs", "precision": "fp32", "img_per_s": 600.0},
            {"type": "run", "impl": "liere", "model": "tiny", "enc": "liere64", "precision": "fp32",
             "img_per_s": 570.0}]
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"type": "run", "impl": "tor'
    d = folder_with(root, "partial", {"gpu_compare.jsonl.partial": text})
    out = verdict(d)
    got = target_lines(out)
    check(f"gpu_compare.jsonl.partial:{len(rows) + 1}: not JSON" in out, "the half line named")
    check(f"compare: {len(rows)} runs" in out, "the whole lines read")
    expect_target(got, (21, "ViT-Tiny", "liere8", "float", "liere / PyTorch"), 2.5, 2.0)
    expect_target(got, (21, "ViT-Tiny", "liere8", "TF32", "liere / PyTorch"), None, 2.0)
    expect_target(got, (21, "ViT-Tiny", "liere64", "float", "liere / abs"), 0.95, 0.9)
    expect_target(got, (22, "ViT-Tiny", "liere8", "bf16", "img/s"), None, 20000.0)


def main():
    root = tempfile.mkdtemp(prefix="gpu_verdict_test_")
    try:
        test_cuda_cases(root)
        compare_cases(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"gpu_verdict_test: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
