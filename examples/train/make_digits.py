#!/usr/bin/env python3
"""Writes digits.npz from scikit-learn's handwritten digits (Debian's python3-sklearn).

1797 images of 8x8 pixels (values 0..16, scaled here to [0, 1]) with their labels 0..9.
The split is fixed: numpy's RandomState(0) permutes the 1797 indices; the first 1437 are
the training set, the last 360 the test set. Arrays: x_train f32 [1437, 1, 8, 8],
y_train i64 [1437], x_test f32 [360, 1, 8, 8], y_test i64 [360].

Usage: make_digits.py [OUT.npz]   (default: digits.npz)
"""
import sys

import numpy as np

try:
    from sklearn.datasets import load_digits
except ImportError:
    sys.exit("error: scikit-learn is missing (Debian: apt-get install python3-sklearn)")

out = sys.argv[1] if len(sys.argv) > 1 else "digits.npz"
digits = load_digits()
x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
y = digits.target.astype(np.int64)
order = np.random.RandomState(0).permutation(len(y))
train, test = order[:1437], order[1437:]
np.savez(out, x_train=x[train], y_train=y[train], x_test=x[test], y_test=y[test])
print(f"wrote {out}: {len(train)} training and {len(test)} test images")
