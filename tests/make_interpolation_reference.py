#!/usr/bin/python3
"""Writes tests/data/interpolation_reference.bin: PyTorch's F.interpolate(..., align_corners=False) on small
grids, the reference that tests/test_interpolation.cpp checks liere::GridInterpolation against.

    /usr/bin/python3 tests/make_interpolation_reference.py        (Debian's torch 1.13, CPU)

Modes as in the LieRE code: 1D 'linear', 2D 'bicubic', 3D 'trilinear'. The inputs are fixed random values
(seeded), rounded to float32 so that the float32 and float64 runs see the same numbers.

File format, all little-endian:
    char[8]   magic "LIEREINT"
    uint32    version (1)
    uint32    number of cases
    then per case:
    uint32    dims (1, 2 or 3; the mode follows from it)
    uint32    channels C
    uint32    in_sizes[dims]        (W) / (H, W) / (D, H, W)
    uint32    out_sizes[dims]
    float32   input[C * prod(in_sizes)]            layout (C, *in_sizes), row-major (PyTorch's (1, C, ...))
    float32   output_f32[C * prod(out_sizes)]      F.interpolate on the float32 input, layout (C, *out_sizes)
    float64   output_f64[C * prod(out_sizes)]      F.interpolate on the same input as float64
"""
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

MODES = {1: "linear", 2: "bicubic", 3: "trilinear"}

# (in_sizes, out_sizes, channels)
CASES = [
    ((4, 4), (7, 7), 3),
    ((8, 8), (14, 14), 3),
    ((8, 8), (5, 5), 3),      # downsampling: PyTorch does not antialias
    ((9, 9), (23, 23), 2),
    ((14, 14), (16, 16), 2),  # ViT 224 → 256 pixels with 16-pixel patches
    ((6, 10), (9, 4), 2),     # one axis up, one down
    ((8, 8), (8, 12), 2),     # one axis unchanged
    ((1, 5), (3, 7), 2),      # a single row
    ((2, 4, 4), (4, 6, 6), 3),
    ((4, 6, 6), (3, 4, 5), 2),  # 3D downsampling
    ((3, 4, 4), (3, 7, 2), 2),  # 3D, one axis unchanged
    ((5,), (9,), 3),
    ((9,), (4,), 3),           # 1D downsampling
    ((1,), (3,), 2),
]


def main():
    gen = torch.Generator().manual_seed(20250713)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "interpolation_reference.bin")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"LIEREINT")
        f.write(struct.pack("<II", 1, len(CASES)))
        for in_sizes, out_sizes, channels in CASES:
            dims = len(in_sizes)
            x = (torch.rand((1, channels) + in_sizes, generator=gen, dtype=torch.float64) * 2 - 1).float()
            y32 = F.interpolate(x, size=out_sizes, mode=MODES[dims], align_corners=False)
            y64 = F.interpolate(x.double(), size=out_sizes, mode=MODES[dims], align_corners=False)
            f.write(struct.pack("<II", dims, channels))
            f.write(struct.pack("<%dI" % dims, *in_sizes))
            f.write(struct.pack("<%dI" % dims, *out_sizes))
            f.write(x.numpy().astype("<f4").tobytes())
            f.write(y32.numpy().astype("<f4").tobytes())
            f.write(y64.numpy().astype("<f8").tobytes())
    print("wrote %s (%d bytes, %d cases, torch %s)" % (path, os.path.getsize(path), len(CASES), torch.__version__))


if __name__ == "__main__":
    main()
