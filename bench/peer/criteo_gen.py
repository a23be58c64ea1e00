#!/usr/bin/python3
"""Writes a Criteo-format TSV file (label, I1..I13, C1..C26) whose labels a model can learn,
for bench/quality_vs_torch.sh.

Each categorical column draws its value from a Zipf-distributed vocabulary of `--vocab`
values (more than the tables' rows, so the row mapping collides, as on real Criteo data),
written as 8 hex digits as Criteo's are; about 5% of each column is missing. The integer
columns are counts (geometric), about 10% missing. A hidden model labels the lines: a bias,
one weight per categorical value, one per log-count, and a product of two categorical
weights (an interaction a DLRM's dot products can capture), through a sigmoid.

  criteo_gen.py OUT --lines N [--seed S] [--vocab V]
"""
import argparse

import numpy as np

TABLES, DENSE = 26, 13


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--lines", type=int, required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=50000)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    n, v = a.lines, a.vocab
    # Zipf over [0, vocab) by inverse CDF, exponent 1.1.
    cdf = np.cumsum(1.0 / np.arange(1, v + 1) ** 1.1)
    cdf /= cdf[-1]
    ids = np.searchsorted(cdf, rng.random((n, TABLES)))
    missing = rng.random((n, TABLES)) < 0.05
    # The hex text of value k of table t: a fixed random 32-bit code per (t, k).
    codes = rng.integers(1, 2**32, size=(TABLES, v), dtype=np.uint64)
    weights = rng.normal(0, 0.6, size=(TABLES, v)) * (rng.random(TABLES) < 0.6)[:, None]
    counts = rng.geometric(rng.uniform(0.02, 0.5, DENSE), size=(n, DENSE)) - 1
    dense_missing = rng.random((n, DENSE)) < 0.1
    dense_w = rng.normal(0, 0.25, DENSE)
    t = np.arange(TABLES)
    cat = np.where(missing, 0.0, weights[t, ids])
    logit = -1.2 + cat.sum(axis=1) + np.log1p(np.where(dense_missing, 0, counts)) @ dense_w
    logit += 1.5 * cat[:, 0] * cat[:, 1]
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    with open(a.out, "w") as f:
        for i in range(n):
            dense = ["" if dense_missing[i, j] else str(counts[i, j]) for j in range(DENSE)]
            sparse = ["" if missing[i, j] else "%08x" % codes[j, ids[i, j]] for j in range(TABLES)]
            f.write("\t".join([str(labels[i])] + dense + sparse) + "\n")
    print("criteo_gen: %d lines, %.3f positive, %s" % (n, labels.mean(), a.out))


if __name__ == "__main__":
    main()
