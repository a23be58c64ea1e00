#!/usr/bin/python3
"""The peer of bench/worker_bench: the same DLRM training step in PyTorch (Debian's
python3-torch, run with /usr/bin/python3), for bench/worker_vs_torch.sh.

Same model as ecps' Dlrm (kernels/dlrm.h): bottom MLP with ReLU after every layer, one
embedding row per sparse feature, the dot products of the strictly lower triangle of
[bottom output, embeddings] concatenated after the bottom output, top MLP with ReLU on hidden
layers and a linear logit, mean BCE. Same optimizers: sparse Adagrad (lr 0.05, on the rows a
batch touches) and dense Adam (lr 1e-3). Same batch (2048) and id distribution (Zipf with
exponent 1.05 per table, from a fixed seed). Batches are made before timing, as
worker_bench's are.

  dlrm_torch.py --model small|heavy --threads N [--steps S] [--warmup W]

Prints one line: "torch <model> threads=N samples_per_s=X".
"""
import argparse
import sys
import time

import numpy as np
import torch

MODELS = {
    # worker_bench's QuickstartJob: 26 tables x 100,000 rows, dim 16.
    "small": dict(dim=16, rows=100000, bottom=[128, 64, 16], top=[128, 64]),
    # HeavyJob: ECRec's compute-heavy model, 26 x 20,000 rows so that it fits.
    "heavy": dict(dim=128, rows=20000, bottom=[512, 256, 128], top=[1024, 1024, 512, 256]),
}
TABLES, DENSE, BATCH = 26, 13, 2048


def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class Dlrm(torch.nn.Module):
    def __init__(self, dim, rows, bottom, top):
        super().__init__()
        self.bottom = mlp([DENSE] + bottom, last_relu=True)
        self.tables = torch.nn.ModuleList(
            torch.nn.Embedding(rows, dim, sparse=True) for _ in range(TABLES))
        vectors = TABLES + 1
        self.rows_i, self.cols_j = torch.tril_indices(vectors, vectors, offset=-1)
        self.top = mlp([dim + vectors * (vectors - 1) // 2] + top + [1], last_relu=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        z = torch.stack([x] + [t(sparse[:, i]) for i, t in enumerate(self.tables)], dim=1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.rows_i, self.cols_j]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def zipf_ids(rng, rows, n, s=1.05):
    # Inverse-CDF sampling of a truncated Zipf over [0, rows).
    weights = 1.0 / np.arange(1, rows + 1) ** s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.searchsorted(cdf, rng.random(n)).astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True), as ecps' dense math does")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.flush_denormal and not torch.set_flush_denormal(True):
        sys.exit("dlrm_torch: this CPU cannot flush denormals")
    torch.manual_seed(42)
    cfg = MODELS[a.model]
    model = Dlrm(**cfg)
    sparse_opt = torch.optim.Adagrad([t.weight for t in model.tables], lr=0.05)
    dense_opt = torch.optim.Adam(list(model.bottom.parameters()) + list(model.top.parameters()),
                                 lr=1e-3)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    rng = np.random.default_rng(42)
    batches = []
    for _ in range(8):
        dense = torch.from_numpy(rng.standard_normal((BATCH, DENSE), dtype=np.float32))
        sparse = torch.from_numpy(
            np.stack([zipf_ids(rng, cfg["rows"], BATCH) for _ in range(TABLES)], axis=1))
        labels = torch.from_numpy((rng.random(BATCH) < 0.25).astype(np.float32))
        batches.append((dense, sparse, labels))

    def step(i):
        dense, sparse, labels = batches[i % len(batches)]
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss = loss_fn(model(dense, sparse), labels)
        loss.backward()
        sparse_opt.step()
        dense_opt.step()

    for i in range(a.warmup):
        step(i)
    start = time.perf_counter()
    for i in range(a.steps):
        step(i)
    elapsed = time.perf_counter() - start
    print("torch %s threads=%d samples_per_s=%.0f" % (a.model, a.threads,
                                                     a.steps * BATCH / elapsed))


if __name__ == "__main__":
    main()
