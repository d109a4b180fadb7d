#!/usr/bin/env python3
"""tests/ablate_quick_test.py — examples/ablate.py end to end in --quick mode (CTest: ablate_quick).

Stops a first run with SIGTERM during its second cell (the driver must stop that cell, start no other and exit
with 130), then runs every experiment of the suite with a tiny model, continuing it, and checks what it wrote: one JSON and one PNG per
experiment, accuracies inside their CIs, paired differences equal to the difference of the two rows, the
evaluation-only cell (--epochs 0 --init-from) equal to the model it loads; then that a second run finishes
nothing again, and that a cell whose result is removed (an interrupted cell) is run again, alone, with the
same result. Exit 77 (skipped) without Fashion-MNIST.

    tests/ablate_quick_test.py --build build --out /tmp/ablate_quick
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "..", "examples", "ablate.py")
EXPERIMENTS = ["fig6", "table4", "table7", "table5", "fig4", "fig7", "table6"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(build, out):
    cmd = [sys.executable, DRIVER, "--quick", "--build", build, "--out", out, "--resamples", "2000"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(r.stdout[-3000:])
    if r.returncode != 0:
        sys.stdout.write(r.stderr[-3000:])
        fail("%s exited with %d" % (" ".join(cmd), r.returncode))
    return r.stdout


def stop_early(build, out):
    """SIGTERM while the second cell runs: the driver stops that cell, starts no other, and exits with 130.
    Returns the stopped cell's id (None if the cell had finished before the signal came)."""
    os.makedirs(out, exist_ok=True)
    log_path = os.path.join(out, "stop_early.log")
    cmd = [sys.executable, DRIVER, "--quick", "--build", build, "--out", out, "--resamples", "2000"]
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.time()
    while time.time() - t0 < 120:
        with open(log_path) as f:
            if f.read().count("] start ") >= 2:
                break
        check(p.poll() is None, "the driver ended before its second cell started")
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("the driver did not stop within 60 s of SIGTERM")
    with open(log_path) as f:
        log = f.read()
    sys.stdout.write(log)
    check(rc == 130, "a stopped driver should exit with 130, got %d" % rc)
    started = [l.split()[-1] for l in log.splitlines() if "] start " in l]
    # jobs 1: the two cells seen, and at most one more if the second finished just before the signal
    check(len(started) <= 3, "cells started after SIGTERM: %s" % started)
    stopped = [c for c in started if not os.path.exists(os.path.join(out, "cells", c, "result.json"))]
    check(len(stopped) <= 1, "more than one unfinished cell: %s" % stopped)
    for c in stopped:
        check(os.path.exists(os.path.join(out, "cells", c, "cpu_earlier_attempts.json")),
              "the stopped cell %s has no record of its CPU" % c)
    return stopped[0] if stopped else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        print("skipped: /usr/share/datasets/fashion-mnist is missing (apt-get install dataset-fashion-mnist)")
        return 77
    shutil.rmtree(a.out, ignore_errors=True)

    stopped = stop_early(a.build, a.out)
    log = run(a.build, a.out)  # continues where the stopped run left off
    check("failed: 0" in log, "a cell failed")
    docs = {}
    for x in EXPERIMENTS:
        j = os.path.join(a.out, x + ".json")
        check(os.path.exists(j), "no " + j)
        with open(j) as f:
            docs[x] = json.load(f)
        d = docs[x]
        png = d.get("png")
        check(png and os.path.exists(png), x + ": no PNG")
        with open(png, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", x + ": not a PNG")
        check(d["budget"]["cells_done"] == d["budget"]["cells"] and d["budget"]["cells"] >= 1,
              x + ": cells not finished: %s" % d["budget"])
        check(d["rows"], x + ": no rows")
        for r in d["rows"]:
            check(r["acc"] is not None and 0 <= r["lo"] <= r["acc"] <= r["hi"] <= 1,
                  x + ": accuracy outside its CI: %s" % r)
        check(d["comparisons"], x + ": no paired comparisons")
        for c in d["comparisons"]:
            check(c["diff"] is not None and 0 < c["p"] <= 1 and c["diff_lo"] <= c["diff"] <= c["diff_hi"],
                  x + ": bad comparison %s" % c)
    # A paired difference is the difference of the two rows' accuracies (same cells, same evaluations).
    t5 = docs["table5"]
    before = [r for r in t5["rows"] if r["series"] == "before" and r["group"] == "FM liere8"][0]
    after = [r for r in t5["rows"] if r["series"] == "after" and r["group"] == "FM liere8"][0]
    c = [c for c in t5["comparisons"] if c["what"] == "FM liere8: before - after"][0]
    check(abs(c["diff"] - (before["acc"] - after["acc"])) < 1e-9, "table5: diff %s != rows %s - %s" % (c, before, after))
    # --epochs 0 --init-from evaluates the trained model: at 28 px its accuracy is the training cell's.
    f7 = [r for r in docs["fig7"]["rows"] if r["group"] == "28" and r["series"] == "liere8 official"][0]
    t8 = [r for r in docs["table5"]["rows"] if r["group"] == "FM liere8" and r["series"] == "before"][0]
    check(f7["acc"] == t8["acc"] and f7["test_n"] == t8["test_n"],
          "fig7 evaluation-only cell %s != the model it loads %s" % (f7, t8))

    # The stopped cell finished on the second run; its cpu_s counts the stopped attempt too.
    if stopped is not None:
        with open(os.path.join(a.out, "cells", stopped, "result.json")) as f:
            r = json.load(f)
        check(r["cpu_s_earlier_attempts"] >= 0 and r["cpu_s"] >= r["cpu_s_earlier_attempts"],
              "the stopped cell's CPU is not counted: %s" % r)

    # Resume: nothing to do the second time.
    log = run(a.build, a.out)
    check("cells run: 0," in log, "the second run ran cells again")
    # An interrupted cell (no result.json) runs again, alone, and gives the same numbers.
    cell = before["cell"]
    os.remove(os.path.join(a.out, "cells", cell, "result.json"))
    log = run(a.build, a.out)
    check("cells run: 1," in log, "expected exactly one cell to run again")
    with open(os.path.join(a.out, "table5.json")) as f:
        again = [r for r in json.load(f)["rows"] if r["cell"] == cell and r["series"] == "before"][0]
    check(again["acc"] == before["acc"] and again["lo"] == before["lo"], "a rerun cell changed: %s vs %s" % (again, before))
    print("ablate_quick: OK (%d experiments)" % len(EXPERIMENTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
