#!/usr/bin/python3
"""PyTorch peer of the GPU training benchmark (train_cifar --bench-steps N --device cuda): the model of
torch_vit_step.py (ViT-Tiny/CIFAR shape: B 128, 32x32, patch 4, 100 classes; --model base for ViT-B) on a CUDA
device, Adam, one fixed random batch on the device; img/s over --steps steps after --warmup, with
torch.cuda.synchronize() around the timed loop. --tf32 allows TF32 matrix products (PyTorch's default is off).

  python3 bench/torch_vit_gpu.py --enc abs,rope-mixed,liere8,liere64 --steps 30 [--model base] [--tf32]
Prints one JSON object per encoding.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from torch_vit_step import B, CLASSES, ViT, make_step  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--enc", default="abs,rope-mixed,liere8,liere64")
    p.add_argument("--model", default="tiny", choices=["tiny", "base"])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=B)
    p.add_argument("--tf32", action="store_true")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_vit_gpu: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    size = dict(dim=192, heads=3, mlp=768) if a.model == "tiny" else dict(dim=768, heads=12, mlp=3072)
    for enc in a.enc.split(","):
        model = ViT(enc, **size).cuda()
        x = torch.randn(a.batch, 3, 32, 32, device="cuda")
        y = torch.randint(0, CLASSES, (a.batch,), device="cuda")
        step = make_step(model, x, y)
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
        print(json.dumps({"peer": "pytorch " + torch.__version__, "device": torch.cuda.get_device_name(),
                          "model": a.model, "enc": enc, "batch": a.batch, "tf32": a.tf32, "steps": a.steps,
                          "img_per_s": round(a.batch * a.steps / s, 1), "step_ms": round(1000 * s / a.steps, 2)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
