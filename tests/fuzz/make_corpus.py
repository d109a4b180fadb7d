#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (small valid files and a few broken
ones of every format; the CIFAR seeds start from the first record of the real CIFAR-100 train.bin in tests/data).
Standard library only; the output is deterministic, so re-running it changes nothing."""
import gzip
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def cifar():
    with open(os.path.join(HERE, "..", "data", "cifar100-train-record0.bin"), "rb") as f:
        rec100 = f.read()  # coarse 11, fine 19, 3072 pixels
    rec10 = bytes([3]) + rec100[2:]
    put("cifar", "cifar100_record", rec100)
    put("cifar", "cifar10_record", rec10)
    put("cifar", "cifar10_two_records", rec10 + bytes([9]) + rec100[2:])
    put("cifar", "truncated", rec10[:1000])
    put("cifar", "bad_label", bytes([10]) + rec100[2:])


def idx():
    n, rows, cols = 3, 4, 5
    images = struct.pack(">IIII", 0x803, n, rows, cols) + bytes(range(n * rows * cols))
    labels = struct.pack(">II", 0x801, n) + bytes([0, 9, 4])

    def pair(a, b):
        return struct.pack("<H", len(a)) + a + b

    put("idx", "raw", pair(images, labels))
    put("idx", "gzip", pair(gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)))
    put("idx", "gzip_truncated", pair(gzip.compress(images, mtime=0)[:30], labels))
    put("idx", "bad_magic", pair(struct.pack(">IIII", 0x802, n, rows, cols) + images[16:], labels))
    put("idx", "count_mismatch", pair(images, struct.pack(">II", 0x801, 2) + bytes([1, 2])))
    put("idx", "bad_label", pair(images, struct.pack(">II", 0x801, n) + bytes([0, 10, 1])))


def safetensors(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] -> the file."""
    header, data = {}, b""
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*xs):
    return struct.pack("<%df" % len(xs), *xs)


def checkpoints():
    w, b = f32(*[0.5 * i for i in range(6)]), f32(1, 2, 3)
    model = [("w", "F32", [2, 3], w), ("b", "F32", [3], b)]
    optim = [("optim.w.m", "F32", [2, 3], w), ("optim.w.v", "F32", [2, 3], w),
             ("optim.b.m", "F32", [3], b), ("optim.b.v", "F32", [3], b)]
    meta = {"format": "liere-checkpoint-1", "optim.step": "7", "optim.lr": "0.001", "epoch": "2"}
    put("safetensors", "checkpoint", safetensors(model + optim, meta))
    put("safetensors", "weights_only", safetensors(model, {"format": "liere-checkpoint-1"}))
    put("safetensors", "f64_and_others",
        safetensors([("x", "F64", [2], struct.pack("<2d", 1.5, -2)), ("i", "I32", [1, 1], b"\1\0\0\0"),
                     ("z", "F32", [0, 4], b""), ("s", "BF16", [], b"\0\0")]))
    put("safetensors", "bad_step", safetensors(model + optim, dict(meta, **{"optim.step": "seven"})))
    put("safetensors", "truncated", safetensors(model + optim, meta)[:-5])
    put("safetensors", "wrong_shape", safetensors([("w", "F32", [3, 2], w), ("b", "F32", [3], b)]))
    put("safetensors", "overlap", safetensors(model)[:8] + b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        b'"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' + f32(1))


def json_texts():
    put("json", "object", '{"a": [1, 2.5e-3, -0, true, false, null], "b": {"c": "d\\u00e9\\ud83d\\ude00\\n"}}')
    put("json", "jsonl", '{"epoch":1,"train_loss":2.1,"lr":0.001}\n\n{"epoch":2,"train_loss":NaN,"x":"y"}\r\n'
                         '{"epoch":3,"v":-Infinity,"w":inf,"n":null}\n')
    put("json", "bom_jsonl", '\ufeff{"a":1}\n{"a":1e999}\n')
    put("json", "nested", "[" * 70 + "]" * 70)
    put("json", "bad", '{"a":1,}\n{"a" 1}\n')
    put("json", "numbers", '[0,-1,1.5,1e10,1E+2,-0.0e-0,123456789012345678901234567890]')


def predictions():
    head = "# liere-predictions v1 n=%d columns: index label pred\n"
    put("predictions", "three", head % 3 + "0 1 1\n1 2 0\n2 -1 2147483647\n")
    put("predictions", "crlf_blank", head % 2 + "0 1 1\r\n\r\n1  2\t0 \r\n")
    put("predictions", "empty_set", head % 0)
    put("predictions", "big_n", "# liere-predictions v1 n=1000000000000000000 columns: index label pred\n0 1 1\n")
    put("predictions", "bad", head % 3 + "0 1 1\n2 2 2\n1 2 x\n")


def flags():
    def cmd(*args):
        return "\0".join(args)
    put("flags", "train", cmd("--epochs", "3", "--batch=64", "--lr", "3e-4", "--pe", "liere", "--block", "8",
                               "--sharing", "head", "--init", "uniform:1", "--dry-run"))
    put("flags", "data", cmd("--data", "cifar10", "--eval-res", "24,40,48", "--shuffle-eval", "--data-fraction", "0.5",
                              "--positions=interpolate", "--cls", "skip", "--position-unit", "integer"))
    put("flags", "files", cmd("--save", "a.safetensors", "--resume=b", "--metrics", "m.jsonl", "--seed", "-5",
                               "--threads", "1", "--optimizer", "adam"))
    put("flags", "bad", cmd("--epochs", "x", "--block", "7", "--unknown", "--help"))


def ucf101():
    classes = "1 ApplyEyeMakeup\r\n2 Archery\r\n3 YoYo\r\n"
    put("ucf101", "train", classes + "\0" + "ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1\r\n"
                           "YoYo/v_YoYo_g08_c02.avi 3\r\n")
    put("ucf101", "test", classes + "\0" + "Archery/v_Archery_g01_c01.avi\r\nYoYo/v_YoYo_g01_c01.avi\r\n")
    put("ucf101", "bad", "1 A\n3 B\n\0A/x.avi 2\nB/y.avi\n")


def png(width, height, color_type, bit_depth, rows, palette=None, interlace=0):
    """A PNG file; rows: the raw scanlines (without filter bytes)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    raw = b"".join(b"\0" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if palette:
        out += chunk(b"PLTE", palette)
    return out + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def images():
    # The two JPEG seeds (color_8x6.jpg, grey_5x4.jpg) were written once with stb_image_write (quality 80 and 90)
    # and are kept as files, as is dht_325_codes.jpg (the input fuzz_image found: a Huffman table of 325 codes, which
    # the stb_image of Debian writes past its arrays for; decode_image refuses it) and jpeg_dc_overflow.jpg (found
    # later: a DC prediction whose product with the quantisation step overflows int in stb_image, made defined by
    # -fwrapv on data_tools/stb_impl.cpp; also tests/data/), jpeg_undefined_huffman.jpg (found 2026-11-28: a scan
    # using a Huffman table no DHT segment defines; decode_image refuses it) and progressive_37x29.jpg (Pillow's
    # progressive JPEG, the progressive scans' seed; both also tests/data/) and png_cut_empty_idat.png (found
    # 2026-11-28: an empty IDAT whose CRC the file's end cuts short); the other PNG seeds are made here.
    put("image", "rgb_5x4.png", png(5, 4, 2, 8, [bytes((x * 40 + y * 9 + c * 70) % 256 for x in range(5) for c in range(3))
                                                  for y in range(4)]))
    put("image", "grey_3x3.png", png(3, 3, 0, 8, [bytes([0, 128, 255])] * 3))
    put("image", "rgba16_2x2.png", png(2, 2, 6, 16, [bytes(range(16))] * 2))
    put("image", "palette_4x2.png", png(4, 2, 3, 2, [bytes([0b00011011])] * 2, palette=bytes(range(12))))
    put("image", "huge_header.png", png(26000, 26000, 2, 8, []))
    put("image", "gif", b"GIF89a\x01\x00\x01\x00")


if __name__ == "__main__":
    images()
    cifar()
    idx()
    checkpoints()
    json_texts()
    flags()
    predictions()
    ucf101()
