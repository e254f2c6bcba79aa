#!/usr/bin/env python3
"""Edits a safetensors checkpoint to make the bad inputs the run-time tests
need (no third-party modules).

    st_edit.py IN OUT drop NAME          remove tensor NAME
    st_edit.py IN OUT extra NAME         add a 1-element F32 tensor NAME
    st_edit.py IN OUT reshape NAME       give NAME the shape [numel] (1-D)
    st_edit.py IN OUT dtype NAME         relabel NAME as F64 (half as many elements)
    st_edit.py IN OUT poison NAME [V]    set NAME's first element to V (F32; default inf)
    st_edit.py IN OUT header             break the JSON header
    st_edit.py IN OUT truncate           cut the file in the middle of the data
"""
import json
import struct
import sys


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    tensors = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items()}
    return tensors, meta, raw


def save(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        dt, shape, b = tensors[k]
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    src, dst, op = sys.argv[1:4]
    name = sys.argv[4] if len(sys.argv) > 4 else None
    tensors, meta, raw = load(src)
    if op == "drop":
        del tensors[name]
    elif op == "extra":
        tensors[name] = ("F32", [1], struct.pack("<f", 1.0))
    elif op == "reshape":
        dt, shape, b = tensors[name]
        n = 1
        for d in shape:
            n *= d
        tensors[name] = (dt, [n], b)
    elif op == "dtype":
        dt, shape, b = tensors[name]
        tensors[name] = ("F64", [len(b) // 8], b)
    elif op == "poison":
        dt, shape, b = tensors[name]
        v = float(sys.argv[5]) if len(sys.argv) > 5 else float("inf")
        tensors[name] = (dt, shape, struct.pack("<f", v) + b[4:])
    elif op == "header":
        (n,) = struct.unpack("<Q", raw[:8])
        open(dst, "wb").write(raw[:8] + b"{" + b"!" * (n - 1) + raw[8 + n:])
        return
    elif op == "truncate":
        open(dst, "wb").write(raw[:len(raw) // 2])
        return
    else:
        sys.exit("unknown edit " + op)
    save(dst, tensors, meta)


if __name__ == "__main__":
    main()
