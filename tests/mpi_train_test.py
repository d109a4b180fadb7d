#!/usr/bin/env python3
"""Data-parallel training under mpirun, end to end (issue 23; docs/scaling.md): train_arrows with a tiny model.

  part equality: -np 2 and -np 1 with the same global batch give the same per-step losses (20 steps, relative
                 difference <= 1e-5; dropout on), two -np 2 runs the same losses exactly, and a run checkpointed at
                 -np 2 continues at -np 1 with the losses of an uninterrupted run; --batch not divisible by the
                 ranks and ranks with different flags stop before any work with a message; an infinite generator
                 (--lr 1e38) is named once, by rank 0.
  part failure:  one rank killed with SIGKILL, or stopped with SIGSTOP, mid-run: mpirun ends within 60 s with a
                 message, and the last checkpoint is intact (it resumes).

Exit 77 (CTest: skipped) when there is no mpiexec.
"""
import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--build", required=True)
p.add_argument("--mpiexec", default="")
p.add_argument("--np-flag", default="-np")
p.add_argument("--out", required=True)
p.add_argument("--part", choices=["equality", "failure"], required=True)
a = p.parse_args()

if not a.mpiexec or not os.path.exists(a.mpiexec):
    print("skipped: no mpiexec (configure found no MPI)")
    sys.exit(77)
prog = os.path.join(a.build, "examples", "train_arrows")
if not os.path.exists(prog):
    print("skipped: train_arrows is not built")
    sys.exit(77)
os.makedirs(a.out, exist_ok=True)
for f in os.listdir(a.out):  # a resumed run appends to its metrics file: start from none
    if f.endswith(".jsonl") or f.endswith(".safetensors"):
        os.remove(os.path.join(a.out, f))

launcher = [a.mpiexec]
version = subprocess.run([a.mpiexec, "--version"], capture_output=True, text=True).stdout
if "Open MPI" in version or "OpenRTE" in version:
    # two ranks on a machine with fewer cores; root (containers) needs the explicit permission
    launcher += ["--oversubscribe"]
    if os.geteuid() == 0:
        launcher += ["--allow-run-as-root"]
env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")

# 10 steps per epoch of 16 samples (res 48: 4x4 patches of 12), dim 32, 2 layers, dropout 0.2.
MODEL = ["--pe", "liere", "--block", "8", "--dim", "32", "--depth", "2", "--heads", "2", "--mlp", "64", "--drop", "0.2",
         "--res", "48", "--train-samples", "160", "--batch", "16", "--test-n", "40", "--eval-batch", "16",
         "--threads", "1", "--seed", "7", "--warmup", "1", "--log-every", "1"]
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(n, extra, name, expect_rc=0):
    cmd = launcher + [a.np_flag, str(n), prog] + MODEL + extra
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != expect_rc:
        print("command:", " ".join(cmd), "\nrc", r.returncode, "\nstdout:", r.stdout[-3000:], "\nstderr:", r.stderr[-3000:])
        raise SystemExit("FAILED: %s exited with %d, expected %d" % (name, r.returncode, expect_rc))
    return r


def losses(path):
    return [json.loads(l)["train_loss"] for l in open(path) if '"step"' in l]


def metrics(name):
    return os.path.join(a.out, name + ".jsonl")


def ckpt_epoch(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return int(json.loads(f.read(n))["__metadata__"]["epoch"])


def rel(x, y):
    return abs(x - y) / max(abs(x), abs(y), 1e-30)


if a.part == "equality":
    run(1, ["--epochs", "2", "--metrics", metrics("np1")], "-np 1")
    run(2, ["--epochs", "2", "--metrics", metrics("np2")], "-np 2")
    run(2, ["--epochs", "2", "--metrics", metrics("np2b")], "-np 2 again")
    l1, l2, l2b = losses(metrics("np1")), losses(metrics("np2")), losses(metrics("np2b"))
    check(len(l1) == 20 and len(l2) == 20, "20 steps logged at -np 1 and -np 2 (got %d, %d)" % (len(l1), len(l2)))
    worst = max(rel(x, y) for x, y in zip(l1, l2))
    check(worst <= 1e-5, "-np 2 vs -np 1 per-step losses: max relative difference %.3g <= 1e-5" % worst)
    check(l2 == l2b, "two -np 2 runs: identical per-step losses")
    check(len(set(l1)) > 10, "the losses change from step to step (the model trains)")

    # Resume: epoch 1 at -np 2 (saved), epoch 2 at -np 1 from the checkpoint, against the uninterrupted -np 2 run.
    # (--warmup 1: epoch 1 is all warmup whatever --epochs, so its schedule is the same in both.)
    ck = os.path.join(a.out, "np2_epoch1.safetensors")
    if os.path.exists(ck):
        os.remove(ck)
    run(2, ["--epochs", "1", "--save", ck, "--metrics", metrics("part1")], "-np 2 epoch 1")
    check(ckpt_epoch(ck) == 1, "the -np 2 checkpoint says epoch 1")
    run(1, ["--epochs", "2", "--resume", ck, "--metrics", metrics("part2")], "-np 1 resumed")
    lr = losses(metrics("part2"))
    check(losses(metrics("part1")) == l2[:10], "the first epoch at -np 2 equals the uninterrupted -np 2 run's")
    worst = max(rel(x, y) for x, y in zip(lr, l2[10:])) if len(lr) == 10 else 1.0
    check(len(lr) == 10 and worst <= 1e-5,
          "resumed at -np 1: steps 11-20 match the uninterrupted -np 2 run (max relative difference %.3g)" % worst)

    # Bad input: a batch the ranks cannot share, and ranks with different flags: a message and exit 2 at once.
    t0 = time.time()
    r = run(2, ["--epochs", "1", "--batch", "15"], "--batch 15 at -np 2", expect_rc=2)
    check("--batch 15 does not divide among the 2 ranks" in r.stderr and time.time() - t0 < 30,
          "--batch 15 at -np 2: a clear message before any work (%.1f s)" % (time.time() - t0))
    check("epoch 1" not in r.stderr, "--batch 15 at -np 2: no training started")
    # A generator that overflows (--lr 1e38: infinite after the first update) stops the forward on every rank alike
    # (the ranks hold the same weights): rank 0 alone names it, and the ranks end without MPI_Abort.
    r = run(2, ["--epochs", "1", "--lr", "1e38", "--clip", "0", "--warmup", "0"], "-np 2 --lr 1e38", expect_rc=1)
    named = r.stderr.count("a generator of layer 0, head 0")
    check(named == 1 and "MPI_ABORT" not in r.stderr,
          "an infinite generator at -np 2: named once (%d times), no MPI_Abort" % named)
    cmd = launcher + [a.np_flag, "1", prog] + MODEL + ["--epochs", "1"] + [":", a.np_flag, "1", prog] + MODEL + \
        ["--epochs", "1", "--lr", "0.002"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    check(r.returncode == 2 and "--lr is '0.001' on rank 0 and '0.002' on rank 1" in r.stderr,
          "ranks with different --lr: exit 2 naming the flag (rc %d)" % r.returncode)

else:
    def interrupt(sig, name, extra):
        ck = os.path.join(a.out, name + ".safetensors")
        if os.path.exists(ck):
            os.remove(ck)
        cmd = launcher + [a.np_flag, "2", prog] + MODEL + ["--epochs", "400", "--save", ck] + extra
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.time() + 120
        while not os.path.exists(ck) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(0.5)
        # the ranks are mpirun's children (Open MPI; a launcher with another process tree is not handled)
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        check(len(kids) == 2 and os.path.exists(ck), "%s: two ranks running and a checkpoint written" % name)
        if len(kids) != 2:
            proc.kill()
            return
        victim = int(kids[1])
        t0 = time.time()
        os.kill(victim, sig)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            os.kill(victim, signal.SIGKILL)
            check(False, "%s: the job ended within 60 s" % name)
            return
        took = time.time() - t0
        if sig == signal.SIGSTOP:
            try:
                os.kill(victim, signal.SIGKILL)  # in case it is still there, stopped
            except ProcessLookupError:
                pass
        check(proc.returncode != 0, "%s: the job failed (rc %d) after %.1f s (<= 60 s)" % (name, proc.returncode, took))
        tail = out[-2500:]
        print(tail)
        return ck, tail

    r = interrupt(signal.SIGKILL, "killed", [])
    if r:
        ck, out = r
        check("exited on signal 9" in out or "no answer from the other ranks" in out,
              "killed rank: a message says what happened")
        e = ckpt_epoch(ck)
        run(1, ["--epochs", str(e + 1), "--resume", ck], "resume from the killed run's checkpoint")
        check(True, "killed rank: the last checkpoint (epoch %d) is intact and resumes" % e)
    r = interrupt(signal.SIGSTOP, "stalled", ["--comm-timeout", "5"])
    if r:
        ck, out = r
        check("no answer from the other ranks" in out, "stalled rank: 'no answer from the other ranks' after 5 s")
        e = ckpt_epoch(ck)
        run(1, ["--epochs", str(e + 1), "--resume", ck], "resume from the stalled run's checkpoint")
        check(True, "stalled rank: the last checkpoint (epoch %d) is intact and resumes" % e)

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
