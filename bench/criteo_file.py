#!/usr/bin/env python3
"""Writes a Criteo-format TSV file (Kaggle/Terabyte layout: label, 13 integer columns, 26
hexadecimal categorical columns, tab separated) drawn from a hidden logistic model, for
benchmarks that need a file of a chosen size.

  /usr/bin/python3 bench/criteo_file.py OUT LINES [SEED]

Each categorical column has a vocabulary of its own (1,000 to 200,000 values, Zipf-like
popularity), so that tables smaller than a vocabulary hash several values into one row; each
value has a hidden weight, as each integer column has, and the label is drawn from the
sigmoid of their sum. About 5% of the fields are empty, as in Criteo's data. Needs numpy.
"""
import sys

import numpy as np


def main():
    out, lines = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    rng = np.random.default_rng(seed)
    vocab = np.geomspace(1000, 200000, 26).astype(np.int64)
    cat_weights = [rng.normal(0, 0.6, v) for v in vocab]
    int_weights = rng.normal(0, 0.3, 13)
    chunk = 100000
    with open(out, "w") as f:
        for start in range(0, lines, chunk):
            n = min(chunk, lines - start)
            ints = rng.lognormal(1.0, 1.2, (n, 13)).astype(np.int64)
            logit = -1.2 + (np.log1p(ints) - 1.5) @ int_weights * 0.5
            cats = np.empty((n, 26), dtype=np.int64)
            for j in range(26):
                # Zipf-like: the rank of a value is a power of a uniform draw.
                ranks = (vocab[j] * rng.random(n) ** 2.5).astype(np.int64)
                cats[:, j] = ranks
                logit += cat_weights[j][ranks] / 3.0
            labels = rng.random(n) < 1 / (1 + np.exp(-logit))
            empty = rng.random((n, 39)) < 0.05
            rows = []
            for i in range(n):
                fields = [str(int(labels[i]))]
                for j in range(13):
                    fields.append("" if empty[i, j] else str(ints[i, j]))
                for j in range(26):
                    fields.append("" if empty[i, 13 + j] else "%08x" % (cats[i, j] * 2654435761 % (1 << 32)))
                rows.append("\t".join(fields))
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
