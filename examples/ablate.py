#!/usr/bin/env python3
"""examples/ablate.py — the paper's ablations as one reproducible suite (issue 15).

Runs each experiment's cells (one cell = one encoding/config x one seed = one call of a built trainer),
on Fashion-MNIST (train_cifar --data fashion-mnist, Debian's dataset-fashion-mnist) and the arrow task
(train_arrows), then writes per experiment:

    OUT/<experiment>.json   every cell's accuracy with its 95% bootstrap CI, the paired tests, the budget
    OUT/<experiment>.md     the same as a Markdown table (for docs/experiments.md)
    OUT/<experiment>.png    a bar chart with the CIs (examples/plot_metrics --bars)

Experiments (paper LieRE, ICML 2025), in the order they run:
    fig6    block-size sweep: LieRE with 2, 4, 8, 16, 32, 64 blocks (+ RoPE-Mixed)
    table4  parameter sharing: layer x head / head / layer / one set for the stem
    table7  initialisation U[0, 2pi) against U[0, 1), paired, LieRE-8 and RoPE-Mixed (official = b 2)
    table5  patch shuffling at evaluation: Fashion-MNIST and the arrow task
    fig4    data fraction, the same number of steps
    fig7    evaluation at other image sizes under each position policy (official / extrapolate / interpolate)
    table6  model scale

Statistics: a cell's CI is the trainers' 1000-resample percentile bootstrap over the test examples; a
comparison of two cells on the same test set is examples/compare_runs (paired bootstrap over examples,
10 000 resamples, two-sided p; its floor is 2/10001 ≈ 0.0002, written "≤ 2e-4": a bound, not an estimate). With several seeds the predictions of the
seeds are also stacked (seed x example pairs) for one pooled paired test. These intervals cover the test-set
sampling only, not the training randomness: the seeds show that part.

Resuming: each cell lives in OUT/cells/<id>/ (id = tag + hash of its command); it is finished when its
result.json exists (written atomically, after the trainer's own atomic outputs). A rerun skips finished
cells; a training cell that was stopped mid-way continues from its last epoch checkpoint (--resume).
Stop with Ctrl-C (or SIGTERM) at any time: the running cells are stopped, no further cell starts, and the CPU
a stopped cell had used is kept (OUT/cells/<id>/cpu_earlier_attempts.json) and counted in its cpu_s and its
experiment's budget when it finishes on a later run.

Budgets: every experiment has a CPU budget (CPU-minutes, measured per cell with wait4); a cell is not
started once its experiment has spent its budget (unless --ignore-budget), and is reported as not run.

    examples/ablate.py --build build --out ablate_out --jobs 2
    examples/ablate.py --only fig6,table4 --seeds 1
    examples/ablate.py --quick --out /tmp/ablate_quick       # seconds: tiny model, a few cells each

Only the Python 3 standard library is used.
"""

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

# ---- the budgets ---------------------------------------------------------------------------------------

# Fashion-MNIST, every training cell (full suite): a ViT with patch 4 (7 x 7 tokens + CLS), dim 128, depth 2,
# 2 heads (head dim 64, so that LieRE-64 is one dense block), MLP 256; AdamW lr 1e-3, wd 0.05, cosine, batch
# 128, crop+flip; one pass over a fixed (per seed), class-stratified 30% of the training set (18 000 images,
# 140 steps); tested on all 10 000 test images (and again with shuffled patches). About 45 CPU-s per cell.
FM_MODEL = ["--model", "custom", "--dim", "128", "--depth", "2", "--heads", "2", "--mlp", "256", "--patch", "4"]
FM_TRAIN = ["--batch", "128", "--lr", "1e-3", "--wd", "0.05", "--warmup", "0", "--epochs", "1"]
FM_FRACTION = 0.3
FM_TEST_LIMIT = 0  # all 10 000
FIG7_TEST_LIMIT = 5000
FIG7_RES = [20, 24, 32, 40]
# The arrow task (paper Table 3's recipe at 108 x 108, docs/experiments.md): 6 epochs x 6400 fresh images.
ARROW_ARGS = ["--res", "108", "--epochs", "6", "--train-samples", "6400"]

# --quick: the same experiments, a tiny model and a few cells each, for tests/ (seconds).
Q_FM_MODEL = ["--model", "custom", "--dim", "64", "--depth", "1", "--heads", "1", "--mlp", "64", "--patch", "4"]
Q_FM_TRAIN = ["--batch", "32", "--lr", "1e-3", "--wd", "0.05", "--warmup", "0", "--epochs", "1"]
Q_FM_FRACTION = 0.01
Q_TEST_LIMIT = 300
Q_FIG7_RES = [20, 32]
Q_ARROW_ARGS = ["--res", "108", "--epochs", "1", "--train-samples", "128", "--test-n", "100", "--dim", "64",
                "--depth", "1", "--heads", "1", "--mlp", "64", "--warmup", "0"]

# CPU-minutes per experiment (full suite); --quick: 1 each. Cells reused from an earlier experiment are
# charged to the first experiment that lists them.
BUDGET_MIN = {"fig6": 11, "table4": 5, "table7": 5, "table5": 14, "fig4": 5, "fig7": 4, "table6": 8}

PAPER = {
    "fig6": "Fig. 6 / Table 10 (CIFAR-100, ViT-B): 68.84, 69.28, 70.32, 69.85, 69.65, 69.99 for b = 2 … 64: "
            "best at 8, all within ~1.5 points",
    "table4": "Table 4 (CIFAR-100, ViT-B): per layer x head best (LieRE-8 70.3, LieRE-64 70.0, RoPE-Mixed 68.8); "
              "shared across layers 69.8 / 69.5 / 68.7, across heads 69.7 / 69.7 / 69.5, all shared 69.5 / 69.4 / 68.3",
    "table7": "Table 7 (CIFAR-100): 2pi minus 1 init: LieRE-8 -1.18 points (p = 0.070), RoPE-Mixed -2.55 (p = 0.00012)",
    "table5": "Table 5 (CIFAR-100) accuracy before -> after shuffling: abs 63.9 -> 19.6, VisionLlama 65.5 -> 29.7, "
              "RoPE-Mixed 68.8 -> 17.1, LieRE-8 70.3 -> 12.3, LieRE-64 70.0 -> 10.8 (LieRE drops most)",
    "fig4": "Fig. 4 (CIFAR-100): LieRE and RoPE-Mixed ahead of abs and VisionLlama at every fraction 0.2-1.0, "
            "the gap largest with little data",
    "fig7": "Fig. 7 (ImageNet, ViT-B at 224): similar up to 320, LieRE-64 retains more above; positions by "
            "extrapolation ('sequential') beat rescaling to a fixed range",
    "table6": "Table 6 (CIFAR-100): LieRE-8 over abs by 8.4 (Tiny), 6.4 (Base), 9.4 (Large) points",
}


# ---- small helpers -------------------------------------------------------------------------------------

def write_atomic(path, text):
    """Writes text to path through path.tmp + fsync + rename: a reader sees the old file or the new one."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path, obj):
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def read_json(path):
    with open(path) as f:
        return json.load(f)


def pct(x):
    return "—" if x is None else "%.2f" % (100 * x)


def fmt_p(p, bound=False):
    """A p-value for a table; "≤ 2e-4" when it is the bootstrap's floor 2/(R+1) (no resample crossed 0: a bound,
    not an estimate), rounded up to 2 significant digits so that the bound still holds."""
    if p is None:
        return "—"
    if bound:
        e = math.floor(math.log10(p))
        up = math.ceil(p / 10 ** (e - 1) * (1 - 1e-12)) / 10  # mantissa rounded up to 2 digits
        if up >= 10:
            up, e = up / 10, e + 1
        return "≤ %se%d" % (("%.1f" % up).rstrip("0").rstrip("."), e)
    return "%.2g" % p if p >= 0.001 else "%.1e" % p


def p_bound(res):
    """Whether compare_runs' p-value is its floor (its JSON's p_bound; older files: p at 2/(R+1) and a difference)."""
    if "p_bound" in res:
        return bool(res["p_bound"])
    return res["diff"] != 0 and res["p_value"] <= 2 / (res["resamples"] + 1) * (1 + 1e-9)


# ---- cells ---------------------------------------------------------------------------------------------

class Cell:
    """One call of a trainer. `args` are the experiment's flags; the driver adds the output files."""

    def __init__(self, tag, program, args, seed, trains=True, parent=None):
        self.program, self.seed, self.trains, self.parent = program, seed, trains, parent
        self.args = list(args) + ["--seed", str(seed), "--threads", "1"]
        if parent is not None:
            self.args += ["--init-from", os.path.join("cells", parent.id, "ckpt.safetensors")]
        key = json.dumps([program] + self.args)
        self.id = "%s-s%d-%s" % (tag, seed, hashlib.sha1(key.encode()).hexdigest()[:8])
        self.keep_ckpt = False  # another cell starts from its checkpoint
        self.charge = None      # the experiment that pays for it

    def dir(self, out):
        return os.path.join(out, "cells", self.id)

    def pred(self, out, eval_name="test"):
        base = os.path.join(self.dir(out), "test")
        return base + ".pred" if eval_name == "test" else base + "." + eval_name + ".pred"

    def result_path(self, out):
        return os.path.join(self.dir(out), "result.json")

    def result(self, out):
        p = self.result_path(out)
        if not os.path.exists(p):
            return None
        r = read_json(p)
        if self.keep_ckpt and not os.path.exists(os.path.join(self.dir(out), "ckpt.safetensors")):
            return None  # a later cell needs the checkpoint (deleted by hand?): train it again
        return r


class Runner:
    def __init__(self, opts):
        self.opts = opts
        self.out = os.path.abspath(opts.out)
        self.bin = os.path.abspath(os.path.join(opts.build, "examples"))
        self.lock = threading.Lock()
        self.procs = set()
        self.spent = {}     # experiment -> CPU seconds of its finished cells (charged to it)
        self.failed = []
        self.ran = 0
        self.skipped = 0
        self.stopping = False  # set by kill_all: start no further cell

    def exe(self, program):
        p = os.path.join(self.bin, program)
        if not os.access(p, os.X_OK):
            sys.exit("ablate.py: %s is not built (build it: cmake --build %s --target %s)" % (p, self.opts.build, program))
        return p

    def command(self, cell):
        d = cell.dir(self.out)
        cmd = [self.exe(cell.program)] + [a.replace("cells/", os.path.join(self.out, "cells") + "/", 1)
                                          if a.startswith("cells/") else a for a in cell.args]
        cmd += ["--summary-json", os.path.join(d, "summary.json"), "--predictions", cell.pred(self.out),
                "--metrics", os.path.join(d, "metrics.jsonl")]
        if cell.trains:
            ckpt = os.path.join(d, "ckpt.safetensors")
            cmd += ["--save", ckpt]
            if os.path.exists(ckpt):
                cmd += ["--resume", ckpt]  # stopped mid-way: continue after its last finished epoch
        return cmd

    def run(self, cell, label):
        """Runs one cell (or finds it finished). Returns its result dict, or None."""
        r = cell.result(self.out)
        if r is not None:
            with self.lock:
                self.skipped += 1
            return r
        with self.lock:
            exp = cell.charge
            if self.stopping:
                return None
            if not self.opts.ignore_budget and self.spent.get(exp, 0.0) >= 60 * self.budget_min(exp):
                print("  [%s] not run: the budget of %s (%g CPU-min) is spent" % (label, exp, self.budget_min(exp)),
                      flush=True)
                return None
        os.makedirs(cell.dir(self.out), exist_ok=True)
        cmd = self.command(cell)
        print("  [%s] start %s" % (label, cell.id), flush=True)
        t0 = time.time()
        with open(os.path.join(cell.dir(self.out), "log.txt"), "w") as log:
            log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
            log.flush()
            env = dict(os.environ, OMP_NUM_THREADS="1")
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.out)
            with self.lock:
                self.procs.add(p)
                if self.stopping:  # the stop came while it was being started
                    p.send_signal(signal.SIGTERM)
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            with self.lock:
                self.procs.discard(p)
        wall = time.time() - t0
        cpu = usage.ru_utime + usage.ru_stime
        # CPU of earlier, unfinished attempts of this cell (stopped or failed): counted in its cpu_s and budget.
        prior_path = os.path.join(cell.dir(self.out), "cpu_earlier_attempts.json")
        prior = read_json(prior_path)["cpu_s"] if os.path.exists(prior_path) else 0.0
        if p.returncode != 0:
            write_json_atomic(prior_path, {"cpu_s": round(prior + cpu, 2)})
            with self.lock:
                self.spent[exp] = self.spent.get(exp, 0.0) + cpu
                if self.stopping:
                    print("  [%s] stopped (%.0f CPU-s so far; it continues on the next run)" % (label, prior + cpu),
                          flush=True)
                    return None
                self.failed.append(cell.id)
            print("  [%s] FAILED (exit %d), see %s" % (label, p.returncode, os.path.join(cell.dir(self.out), "log.txt")),
                  flush=True)
            return None
        summary = read_json(os.path.join(cell.dir(self.out), "summary.json"))
        result = {"id": cell.id, "program": cell.program, "args": cell.args, "seed": cell.seed,
                  "command": " ".join(shlex.quote(c) for c in cmd), "cpu_s": round(prior + cpu, 2),
                  "cpu_s_earlier_attempts": round(prior, 2), "wall_s": round(wall, 2),
                  "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "summary": summary}
        write_json_atomic(cell.result_path(self.out), result)
        ckpt = os.path.join(cell.dir(self.out), "ckpt.safetensors")
        if not cell.keep_ckpt and os.path.exists(ckpt):
            os.remove(ckpt)
        with self.lock:
            self.ran += 1
            self.spent[exp] = self.spent.get(exp, 0.0) + cpu
        print("  [%s] done  %s: test %s%%, %.0f CPU-s, %.0f s" % (label, cell.id, pct(summary.get("test_acc")), cpu, wall),
              flush=True)
        return result

    def budget_min(self, exp):
        return 1.0 if self.opts.quick else BUDGET_MIN[exp]

    def kill_all(self):
        """Stops the running cells and starts no further one."""
        with self.lock:
            self.stopping = True
            for p in self.procs:
                try:
                    p.send_signal(signal.SIGTERM)
                except OSError:
                    pass

    # Paired bootstrap of two predictions files (examples/compare_runs), cached in OUT/cmp/.
    def compare(self, pred_a, pred_b, name):
        if not (os.path.exists(pred_a) and os.path.exists(pred_b)):
            return None
        os.makedirs(os.path.join(self.out, "cmp"), exist_ok=True)
        out = os.path.join(self.out, "cmp", name + ".json")
        if os.path.exists(out) and os.path.getmtime(out) >= max(os.path.getmtime(pred_a), os.path.getmtime(pred_b)):
            return read_json(out)
        cmd = [self.exe("compare_runs"), pred_a, pred_b, "--resamples", str(self.opts.resamples), "--json", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("compare_runs failed: %s\n%s" % (" ".join(cmd), r.stderr))
        return read_json(out)


# ---- predictions files (for stacking seeds) --------------------------------------------------------------

def read_pred(path):
    with open(path) as f:
        lines = f.read().split("\n")
    if not lines[0].startswith("# liere-predictions v1"):
        raise RuntimeError("%s:1: not a predictions file" % path)
    rows = [tuple(int(v) for v in l.split()) for l in lines[1:] if l.strip()]
    return [(lab, pr) for _, lab, pr in rows]


def stack_preds(paths, out):
    """The predictions of several seeds on the same test set, one after another: one paired sample."""
    rows = []
    for p in paths:
        rows += read_pred(p)
    text = "# liere-predictions v1 n=%d columns: index label pred\n" % len(rows)
    text += "".join("%d %d %d\n" % (i, lab, pr) for i, (lab, pr) in enumerate(rows))
    write_atomic(out, text)
    return out


# ---- the experiments -----------------------------------------------------------------------------------

class Experiment:
    """cells: list of (cell, series, group); comparisons are built by `compare(self, ctx)` after the run."""

    X_LABEL = {"fig6": "LieRE block size", "table4": "sharing of the encoding's parameters", "table7": "encoding",
               "table5": "task and encoding", "fig4": "fraction of the training set (same number of steps)",
               "fig7": "test image size, px (trained at 28)", "table6": "model"}

    def __init__(self, name, title, setup):
        self.name, self.title, self.setup = name, title, setup
        self.x_label = self.X_LABEL[name]
        self.entries = []       # dicts: cell, series, group, metric (summary key), eval_name
        self.pairs = []         # dicts: a, b (entries' keys), what
        self.notes = []

    def add(self, cell, series, group, metric="test_acc", eval_name="test", ci=None):
        self.entries.append({"cell": cell, "series": series, "group": str(group), "metric": metric,
                             "eval": eval_name, "ci": ci or metric + "_ci95"})

    def entry(self, series, group, metric=None):
        for e in self.entries:
            if e["series"] == series and e["group"] == str(group) and (metric is None or e["metric"] == metric):
                return e
        return None

    def pair(self, a, b, what):
        """A paired test of entry a against entry b. The same `what` for several seeds: also pooled."""
        if a is not None and b is not None:
            self.pairs.append({"a": a, "b": b, "what": what, "seed": a["cell"].seed})


def build(opts):
    q = opts.quick
    fm = ["--data", "fashion-mnist"] + (Q_FM_MODEL + Q_FM_TRAIN if q else FM_MODEL + FM_TRAIN)
    frac = Q_FM_FRACTION if q else FM_FRACTION
    tl = Q_TEST_LIMIT if q else FM_TEST_LIMIT
    fm_tl = ["--test-limit", str(tl)] if tl else []
    seeds_all = list(range(opts.seeds)) if opts.seeds else None

    def seeds(default):
        return seeds_all if seeds_all is not None else default

    cache = {}

    def fm_cell(pe, seed, fraction=None, epochs=None, extra=()):
        """A Fashion-MNIST training cell; the same flags give the same (shared) cell."""
        f = frac if fraction is None else fraction
        args = fm + ["--data-fraction", repr(f)] + fm_tl + ["--shuffle-eval"] + list(pe) + list(extra)
        if epochs is not None:
            i = args.index("--epochs")
            args[i + 1] = str(epochs)
        c = Cell("fm", "train_cifar", args, seed)
        return cache.setdefault(c.id, c)

    L8 = ["--pe", "liere", "--block", "8"]
    L64 = ["--pe", "liere", "--block", "64"]
    RM = ["--pe", "rope-mixed"]
    ABS = ["--pe", "absolute"]
    VL = ["--pe", "visionllama"]
    RMO = ["--pe", "rope-mixed-official"]
    budget_line = ("%s; every training cell: one pass over a fixed, class-stratified %g%% of the 60 000 training "
                   "images, tested on %s test images" % (" ".join(fm), 100 * frac, tl or "all 10 000"))
    exps = []

    # Fig. 6: block sizes.
    e = Experiment("fig6", "Block-size sweep (paper Fig. 6 / Table 10), Fashion-MNIST", budget_line)
    blocks = [2, 64] if q else [2, 4, 8, 16, 32, 64]
    for s in seeds([0] if q else [0, 1]):
        for b in blocks:
            e.add(fm_cell(["--pe", "liere", "--block", str(b)], s), "seed %d" % s, b)
        e.add(fm_cell(RM, s), "seed %d" % s, "rope-mixed")
        ref = 2 if q else 8
        for b in blocks:
            if b != ref:
                e.pair(e.entry("seed %d" % s, b), e.entry("seed %d" % s, ref), "block %d - block %d" % (b, ref))
        e.pair(e.entry("seed %d" % s, ref), e.entry("seed %d" % s, "rope-mixed"), "block %d - rope-mixed" % ref)
    exps.append(e)

    # Table 4: sharing.
    e = Experiment("table4", "Parameter sharing (paper Table 4), Fashion-MNIST", budget_line)
    shares = ["layer-head", "shared"] if q else ["layer-head", "head", "layer", "shared"]
    encs = [("liere8", L8)] if q else [("liere8", L8), ("rope-mixed", RM)]
    for s in seeds([0]):
        for name, pe in encs:
            ser = name if s == 0 else "%s s%d" % (name, s)
            for sh in shares:
                e.add(fm_cell(pe + ["--sharing", sh], s) if sh != "layer-head" else fm_cell(pe, s), ser, sh)
            for sh in shares[1:]:
                e.pair(e.entry(ser, sh), e.entry(ser, "layer-head"), "%s: %s - layer-head" % (name, sh))
        if len(encs) > 1:
            for sh in shares:
                e.pair(e.entry(encs[0][0] if s == 0 else "%s s%d" % (encs[0][0], s), sh),
                       e.entry(encs[1][0] if s == 0 else "%s s%d" % (encs[1][0], s), sh), "liere8 - rope-mixed, %s" % sh)
    exps.append(e)

    # Table 7: init 2pi against 1, paired.
    e = Experiment("table7", "Initialisation U[0, 2pi) vs U[0, 1) (paper Table 7), Fashion-MNIST", budget_line)
    encs = [("liere8", L8)] if q else [("liere8", L8), ("rope-mixed-official", RMO)]
    for name, pe in encs:
        for s in seeds([0] if q else [0, 1]):
            e.add(fm_cell(pe, s), "init 2pi", name if s == 0 else "%s s%d" % (name, s))
            e.add(fm_cell(pe + ["--init", "uniform:1"], s), "init 1", name if s == 0 else "%s s%d" % (name, s))
            g = name if s == 0 else "%s s%d" % (name, s)
            e.pair(e.entry("init 2pi", g), e.entry("init 1", g), "%s: 2pi - 1" % name)
    exps.append(e)

    # Table 5: patch shuffling, Fashion-MNIST and the arrow task.
    e = Experiment("table5", "Patch shuffling at evaluation (paper Table 5)", budget_line + "; arrows: train_arrows " +
                   " ".join(Q_ARROW_ARGS if q else ARROW_ARGS))
    encs = [("abs", ABS), ("liere8", L8)] if q else [("abs", ABS), ("visionllama", VL), ("rope-mixed", RM),
                                                     ("liere8", L8), ("liere64", L64)]
    for name, pe in encs:
        c = fm_cell(pe, 0)
        e.add(c, "before", "FM " + name)
        e.add(c, "after", "FM " + name, metric="test_acc_shuffled", eval_name="test_shuffled")
        e.pair(e.entry("before", "FM " + name), e.entry("after", "FM " + name), "FM %s: before - after" % name)
    arrow_encs = [("liere8", L8)] if q else [("abs", ABS), ("liere8", L8)]
    for name, pe in arrow_encs:
        c = Cell("arrows", "train_arrows", (Q_ARROW_ARGS if q else ARROW_ARGS) + ["--shuffle-eval"] + pe, 0)
        c = cache.setdefault(c.id, c)
        e.add(c, "before", "arrows " + name)
        e.add(c, "after", "arrows " + name, metric="test_acc_shuffled", eval_name="test_shuffled")
        e.pair(e.entry("before", "arrows " + name), e.entry("after", "arrows " + name),
               "arrows %s: before - after" % name)
    exps.append(e)

    # Fig. 4: data fraction at the same number of steps (epochs x fraction constant).
    e = Experiment("fig4", "Data fraction at a fixed number of steps (paper Fig. 4), Fashion-MNIST", budget_line)
    fracs = [(frac / 2, 2)] if q else [(0.05, 6), (0.1, 3)]
    encs = [("abs", ABS), ("liere8", L8)] if q else [("abs", ABS), ("rope-mixed", RM), ("liere8", L8)]
    for name, pe in encs:
        e.add(fm_cell(pe, 0), name, "%g" % frac)
        for f, ep in fracs:
            e.add(fm_cell(pe, 0, fraction=f, epochs=ep), name, "%g" % f)
    for f in [frac] + [f for f, _ in fracs]:
        for other in [n for n, _ in encs if n != "liere8"]:
            e.pair(e.entry("liere8", "%g" % f), e.entry(other, "%g" % f), "fraction %g: liere8 - %s" % (f, other))
    exps.append(e)

    # Fig. 7: other image sizes; one trained model per encoding, evaluated under each position policy
    # (at the training size the three policies give the same positions, so training is shared).
    res = Q_FIG7_RES if q else FIG7_RES
    e = Experiment("fig7", "Evaluation at other image sizes under each position policy (paper Fig. 7), Fashion-MNIST",
                   budget_line + "; evaluated with --epochs 0 --init-from on the first %d test images at %s px" %
                   (Q_TEST_LIMIT if q else FIG7_TEST_LIMIT, ", ".join(map(str, res))))
    encs = [("liere8", L8)] if q else [("abs", ABS), ("rope-mixed", RM), ("liere8", L8), ("liere64", L64)]
    policies = ["official", "extrapolate", "interpolate"]
    evl = list(fm)
    i = evl.index("--epochs")
    evl = evl[:i] + ["--epochs", "0"] + evl[i + 2:]
    for name, pe in encs:
        parent = fm_cell(pe, 0)
        parent.keep_ckpt = True
        for pol in (["official"] if name == "abs" else policies):
            c = Cell("fig7", "train_cifar", evl + ["--test-limit", str(Q_TEST_LIMIT if q else FIG7_TEST_LIMIT),
                                                   "--eval-res", ",".join(map(str, res)), "--positions", pol] + pe,
                     0, trains=False, parent=parent)
            c = cache.setdefault(c.id, c)
            ser = name if name == "abs" else "%s %s" % (name, pol)
            for r in sorted(res + [28]):
                if r == 28:  # the training size
                    e.add(c, ser, r)
                else:
                    e.add(c, ser, r, metric="test_acc_res_%d" % r, eval_name="test@%d" % r,
                          ci="test_acc_res_%d_ci95" % r)
    for name, _ in encs:
        if name == "abs":
            continue
        for r in res:
            for pol in policies[1:]:
                e.pair(e.entry("%s %s" % (name, pol), r), e.entry("%s official" % name, r),
                       "%s at %d: %s - official" % (name, r, pol))
    if not q:
        for r in res:
            e.pair(e.entry("liere64 extrapolate", r), e.entry("rope-mixed extrapolate", r),
                   "at %d, extrapolate: liere64 - rope-mixed" % r)
            e.pair(e.entry("liere8 extrapolate", r), e.entry("abs", r), "at %d: liere8 extrapolate - abs" % r)
    exps.append(e)

    # Table 6: scale.
    e = Experiment("table6", "Model scale (paper Table 6), Fashion-MNIST", budget_line +
                   "; larger: --dim 192 --depth 4 --heads 3 --mlp 768 (ViT-Tiny's width and heads, 4 of its 12 layers)")
    bigger = ["--dim", "64", "--depth", "2"] if q else ["--dim", "192", "--depth", "4", "--heads", "3", "--mlp", "768"]
    encs = [("abs", ABS), ("liere8", L8)]
    for name, pe in encs:
        e.add(fm_cell(pe, 0), name, "dim 128 depth 2" if not q else "small")
        e.add(fm_cell(pe, 0, extra=bigger), name, "dim 192 depth 4" if not q else "larger")
    for g in (["dim 128 depth 2", "dim 192 depth 4"] if not q else ["small", "larger"]):
        e.pair(e.entry("liere8", g), e.entry("abs", g), "%s: liere8 - abs" % g)
    exps.append(e)

    if opts.only:
        want = opts.only.split(",")
        unknown = [w for w in want if w not in [x.name for x in exps]]
        if unknown:
            sys.exit("ablate.py: unknown experiment(s) %s; known: %s" % (", ".join(unknown), ", ".join(x.name for x in exps)))
        exps = [x for x in exps if x.name in want]
    for x in exps:
        for en in x.entries:
            if en["cell"].charge is None:
                en["cell"].charge = x.name
    return exps


# ---- running and reporting -----------------------------------------------------------------------------

def run_all(runner, exps, jobs):
    """Every cell once, in the experiments' order; cells that start from another's checkpoint after it."""
    order, seen = [], set()
    for x in exps:
        for en in x.entries:
            c = en["cell"]
            if c.id not in seen:
                seen.add(c.id)
                order.append((x.name, c))
    for n, c in order:  # what earlier runs of the suite have spent: finished cells, and stopped ones so far
        prior = os.path.join(c.dir(runner.out), "cpu_earlier_attempts.json")
        if os.path.exists(c.result_path(runner.out)):
            runner.spent[c.charge] = runner.spent.get(c.charge, 0.0) + read_json(c.result_path(runner.out))["cpu_s"]
        elif os.path.exists(prior):
            runner.spent[c.charge] = runner.spent.get(c.charge, 0.0) + read_json(prior)["cpu_s"]
    # Seed 0 of every experiment first, then the further seeds, then Table 6 (the brief's priorities).
    rank = {x.name: k for k, x in enumerate(exps)}
    order.sort(key=lambda nc: (nc[1].seed > 0 or nc[0] == "table6", rank[nc[0]]))
    if runner.opts.reverse:
        order.reverse()
    first = [(n, c) for n, c in order if c.parent is None]
    second = [(n, c) for n, c in order if c.parent is not None]
    total = len(order)
    counter = {"k": 0}

    def go(item):
        n, c = item
        with runner.lock:
            counter["k"] += 1
            k = counter["k"]
        if c.parent is not None and c.parent.result(runner.out) is None:
            print("  [%s %d/%d] not run: %s has no checkpoint" % (n, k, total, c.parent.id), flush=True)
            return
        runner.run(c, "%s %d/%d" % (n, k, total))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        for phase in (first, second):
            futures = [pool.submit(go, it) for it in phase]
            for f in futures:
                f.result()
    except BaseException:  # Ctrl-C or SIGTERM: stop the running cells, start none of the queued ones
        runner.kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def metric_of(summary, key):
    v = summary.get(key)
    return v if isinstance(v, (int, float)) else None


def report(runner, x):
    out = runner.out
    rows, series = [], []
    cpu_new, cells_done, cells_missing = 0.0, set(), set()
    for en in x.entries:
        c = en["cell"]
        r = read_json(c.result_path(out)) if os.path.exists(c.result_path(out)) else None
        row = {"series": en["series"], "group": en["group"], "cell": c.id, "seed": c.seed, "metric": en["metric"],
               "acc": None, "lo": None, "hi": None}
        if r is None:
            cells_missing.add(c.id)
        else:
            s = r["summary"]
            row["acc"] = metric_of(s, en["metric"])
            ci = s.get(en["ci"])
            if isinstance(ci, list) and len(ci) == 2:
                row["lo"], row["hi"] = ci
            for k in ("pe_params", "total_params", "test_n", "test_loss"):
                if k in s:
                    row[k] = s[k]
            row["cpu_s"] = r["cpu_s"]
            row["command"] = r["command"]
            if c.id not in cells_done:
                cells_done.add(c.id)
                if c.charge == x.name:
                    cpu_new += r["cpu_s"]
        rows.append(row)
        if en["series"] not in series:
            series.append(en["series"])

    def pred_of(en):  # only of finished cells (a cell that runs again may hold an older file)
        return en["cell"].pred(out, en["eval"]) if en["cell"].id in cells_done else os.path.join(out, "none")

    comparisons = []
    for pr in x.pairs:
        a, b = pr["a"], pr["b"]
        name = "%s__%s__%s__%s" % (a["cell"].id, a["eval"].replace("@", "at"), b["cell"].id, b["eval"].replace("@", "at"))
        res = runner.compare(pred_of(a), pred_of(b), name)
        comparisons.append({"what": pr["what"], "seed": pr["seed"], "a": a["cell"].id, "b": b["cell"].id,
                            "diff": res and res["diff"], "diff_lo": res and res["diff_lo"],
                            "diff_hi": res and res["diff_hi"], "p": res and res["p_value"],
                            "p_bound": res and p_bound(res),
                            "only_a_right": res and res["only_a_right"], "only_b_right": res and res["only_b_right"],
                            "n": res and res["examples"]})
    # Several seeds of one comparison: the seeds' predictions stacked, one pooled paired test.
    pooled = {}
    for pr in x.pairs:
        pooled.setdefault(pr["what"], []).append(pr)
    for key, prs in pooled.items():
        if len(set(p["seed"] for p in prs)) < 2:
            continue
        pa = [pred_of(p["a"]) for p in prs]
        pb = [pred_of(p["b"]) for p in prs]
        if not all(os.path.exists(p) for p in pa + pb):
            continue
        os.makedirs(os.path.join(out, "stacked"), exist_ok=True)
        tag = hashlib.sha1(json.dumps(pa + pb).encode()).hexdigest()[:10]
        sa = stack_preds(pa, os.path.join(out, "stacked", tag + "_a.pred"))
        sb = stack_preds(pb, os.path.join(out, "stacked", tag + "_b.pred"))
        res = runner.compare(sa, sb, "stacked_" + tag)
        comparisons.append({"what": key, "seed": "pooled (%d seeds x %d examples)" % (len(prs), res["examples"] // len(prs)),
                            "a": [p["a"]["cell"].id for p in prs], "b": [p["b"]["cell"].id for p in prs],
                            "diff": res["diff"], "diff_lo": res["diff_lo"], "diff_hi": res["diff_hi"],
                            "p": res["p_value"], "p_bound": p_bound(res), "only_a_right": res["only_a_right"],
                            "only_b_right": res["only_b_right"], "n": res["examples"]})

    doc = {"experiment": x.name, "title": x.title, "paper": PAPER[x.name], "setup": x.setup,
           "budget": {"cpu_min": runner.budget_min(x.name), "cpu_s_new_cells": round(cpu_new, 1),
                      "cells": len(cells_done) + len(cells_missing), "cells_done": len(cells_done),
                      "cells_not_run": sorted(cells_missing)},
           "rows": rows, "comparisons": comparisons}
    write_json_atomic(os.path.join(out, x.name + ".json"), doc)
    write_atomic(os.path.join(out, x.name + ".md"), markdown(doc))
    png = plot(runner, x, rows, series)
    doc["png"] = png
    write_json_atomic(os.path.join(out, x.name + ".json"), doc)
    return doc


def markdown(doc):
    lines = ["### %s" % doc["title"], "", "Setup: %s." % doc["setup"], "",
             "Budget: %g CPU-min; %d of %d cells finished, %.1f CPU-min in cells first run here." %
             (doc["budget"]["cpu_min"], doc["budget"]["cells_done"], doc["budget"]["cells"],
              doc["budget"]["cpu_s_new_cells"] / 60), "",
             "| series | group | accuracy % (95% CI) | PE params | CPU-s |", "|---|---|---:|---:|---:|"]
    for r in doc["rows"]:
        acc = "not run" if r["acc"] is None else "%s (%s – %s)" % (pct(r["acc"]), pct(r["lo"]), pct(r["hi"]))
        lines.append("| %s | %s | %s | %s | %s |" % (r["series"], r["group"], acc, r.get("pe_params", "—"),
                                                    "%.0f" % r["cpu_s"] if "cpu_s" in r else "—"))
    lines += ["", "| paired comparison A - B | seed | difference, points (95% CI) | p | only A / only B right |",
              "|---|---|---:|---:|---:|"]
    for c in doc["comparisons"]:
        if c["diff"] is None:
            lines.append("| %s | %s | not run | | |" % (c["what"], c["seed"]))
        else:
            lines.append("| %s | %s | %+.2f (%+.2f – %+.2f) | %s | %d / %d |" % (
                c["what"], c["seed"], 100 * c["diff"], 100 * c["diff_lo"], 100 * c["diff_hi"], fmt_p(c["p"], c.get("p_bound", False)),
                c["only_a_right"], c["only_b_right"]))
    lines += ["", "Paper: %s." % doc["paper"], ""]
    return "\n".join(lines)


def plot(runner, x, rows, series):
    """One bar chart per experiment: groups = the rows' groups, one bar per series, 95% CIs."""
    d = os.path.join(runner.out, "plot_data")
    os.makedirs(d, exist_ok=True)
    files, labels = [], []
    for k, s in enumerate(series):
        pts = [r for r in rows if r["series"] == s and r["acc"] is not None]
        if not pts:
            continue
        f = os.path.join(d, "%s_%d.jsonl" % (x.name, k))
        write_atomic(f, "".join(json.dumps({x.x_label: r["group"], "accuracy %": 100 * r["acc"],
                                            "lo": 100 * (r["lo"] if r["lo"] is not None else r["acc"]),
                                            "hi": 100 * (r["hi"] if r["hi"] is not None else r["acc"])}) + "\n"
                                for r in pts))
        files.append(f)
        labels.append(s)
    if not files:
        return None
    accs = [r["acc"] for r in rows if r["acc"] is not None]
    lo = [r["lo"] for r in rows if r["lo"] is not None] + accs
    y_min = max(0.0, 10 * int(100 * min(lo) / 10) - 10)
    png = os.path.join(runner.out, x.name + ".png")
    cmd = [runner.exe("plot_metrics"), "--bars", "--out", png, "--x", x.x_label, "--y", "accuracy %", "--lo", "lo",
           "--hi", "hi", "--title", x.title + " — 95% CIs", "--y-min", "%g" % y_min, "--y-max", "100",
           "--width", str(max(900, 110 * len(set(r["group"] for r in rows))))]
    for l in labels:
        cmd += ["--label", l]
    r = subprocess.run(cmd + files, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("plot_metrics failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return png


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--build", default="build", help="the CMake build directory (programs in BUILD/examples/)")
    ap.add_argument("--out", default="ablate_out", help="where cells, tables and charts go (default: ablate_out)")
    ap.add_argument("--only", help="comma-separated experiments: fig6,table4,table7,table5,fig4,fig7,table6")
    ap.add_argument("--seeds", type=int, default=0, help="seeds per configuration (default: per experiment)")
    ap.add_argument("--jobs", type=int, default=1, help="cells run at the same time, one thread each (default: 1)")
    ap.add_argument("--quick", action="store_true", help="tiny model, a few cells per experiment (seconds; for tests)")
    ap.add_argument("--ignore-budget", action="store_true", help="run every cell whatever its experiment has spent")
    ap.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples of the paired tests")
    ap.add_argument("--reverse", action="store_true",
                    help="run the cells in reverse order (a second driver on the same --out meets the first in the "
                         "middle instead of repeating its cell)")
    ap.add_argument("--list", action="store_true", help="list the cells and their state, run nothing")
    ap.add_argument("--report-only", action="store_true", help="write the tables and charts from finished cells")
    opts = ap.parse_args()
    if opts.jobs < 1 or opts.seeds < 0 or opts.resamples < 1:
        ap.error("--jobs and --resamples must be >= 1, --seeds >= 0")
    if not opts.quick and not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        print("ablate.py: warning: /usr/share/datasets/fashion-mnist is missing (apt-get install dataset-fashion-mnist)",
              file=sys.stderr)

    exps = build(opts)
    runner = Runner(opts)
    os.makedirs(os.path.join(runner.out, "cells"), exist_ok=True)
    if opts.list:
        for x in exps:
            print("%s — %s (budget %g CPU-min)" % (x.name, x.title, runner.budget_min(x.name)))
            for en in x.entries:
                c = en["cell"]
                state = "done" if c.result(runner.out) else "to run"
                print("  %-10s %-22s %-18s %s  %s" % (en["series"], en["group"], en["metric"], c.id, state))
        return 0
    t0 = time.time()
    if not opts.report_only:
        def on_signal(signum, frame):
            runner.kill_all()
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            run_all(runner, exps, opts.jobs)
        except KeyboardInterrupt:
            runner.kill_all()
            print("ablate.py: interrupted; finished cells are kept, run the same command again to continue",
                  file=sys.stderr)
            return 130
    for x in exps:
        doc = report(runner, x)
        print("%s: %d/%d cells, %.1f CPU-min new, %s, %s" % (
            x.name, doc["budget"]["cells_done"], doc["budget"]["cells"], doc["budget"]["cpu_s_new_cells"] / 60,
            os.path.join(runner.out, x.name + ".json"), doc["png"] or "no chart (no finished cell)"))
    print("cells run: %d, already finished: %d, failed: %d; %.0f s" % (runner.ran, runner.skipped, len(runner.failed),
                                                                         time.time() - t0))
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
