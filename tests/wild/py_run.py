#!/usr/bin/env python3
"""Runs a model with hodu's Python InferenceSession (run_wild.py's "py" column).

usage: py_run.py MODEL OUT_DIR [--threads N] NAME=INPUT.npy ...
Writes OUT_DIR/<sanitized output name>.npy; a hodu error prints "error: ..." and exits 1.
"""
import os
import sys

import numpy as np


def main():
    model, out_dir, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    threads = None
    if rest[:1] == ["--threads"]:
        threads, rest = int(rest[1]), rest[2:]
    import hodu
    feeds = {}
    for arg in rest:
        name, path = arg.split("=", 1)
        feeds[name] = np.load(path)
    try:
        sess = hodu.InferenceSession(model, threads=threads)
        outputs = sess.run(None, feeds)
    except hodu.HoduError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.makedirs(out_dir, exist_ok=True)
    for meta, value in zip(sess.get_outputs(), outputs):
        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in meta.name) or "output"
        np.save(os.path.join(out_dir, name + ".npy"), np.asarray(value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
