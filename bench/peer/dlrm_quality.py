#!/usr/bin/python3
"""The quality peer of ecps for bench/quality_vs_torch.sh: trains the DLRM of
bench/peer/dlrm_torch.py in PyTorch (Debian's python3-torch, run with /usr/bin/python3) on a
Criteo TSV file exactly as an ecps job with one worker in file order reads it, and prints the
held-out AUC and logloss; or evaluates a model `ecps export` wrote.

What it shares with ecps (docs/model.md):
- the row mapping: column C(t+1)'s hex value `raw` goes to row 1 + H(salt[t], raw) mod
  (rows - 1), row 0 for a missing value (ecps-splitmix64-v1, kernels/row_hash.h);
  integers x -> log(1 + max(x, 0)), a missing one 0;
- the held-out split: data line r is held out when r % m == m - 1, m = round(1 / fraction);
  the training lines in file order, `epochs` passes cut into batches across the passes'
  ends (ecps' last batch of a pass is not cut short);
- the initialisation scheme: weights Xavier-uniform, biases 0, embedding rows
  U(-sqrt(1/rows), +sqrt(1/rows)) (not the same bits: ecps draws them from its own hash);
- the optimizers: sparse Adagrad (accumulator from 0, eps 1e-8) on the rows a batch touches,
  dense Adam (betas 0.9, 0.999, eps 1e-8), on the gradient of the batch's mean BCE;
- the metrics: exact AUC (ties count one half), logloss with p clamped to [1e-7, 1 - 1e-7].

  dlrm_quality.py train DATA --seeds 1,2,3 [--epochs E] [--batch B] [--rows R] ...
      prints "torch seed=S auc=A logloss=L" per seed
  dlrm_quality.py export DATA EXPORT_DIR [--eval-fraction F]
      prints "export auc=A logloss=L" of the exported model on the held-out split
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dlrm_torch import DENSE, TABLES, Dlrm  # noqa: E402

MASK = (1 << 64) - 1
GOLDEN = 0x632BE59BD9B4E019
ROW_SEED = 0xC817E0


def mix64_int(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def mix64(x):  # numpy uint64 arrays wrap modulo 2^64
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def salt(table):
    return mix64_int(ROW_SEED) ^ ((table + GOLDEN + (ROW_SEED << 6)) & MASK)


def rows_of(raw, present, table, rows):
    """ecps-splitmix64-v1 of one column's raw values (uint64); row 0 where not present."""
    s = salt(table)
    h = mix64(np.uint64(mix64_int(s)) ^ (raw + np.uint64((GOLDEN + (s << 6)) & MASK)))
    return np.where(present, 1 + (h % np.uint64(rows - 1)).astype(np.int64), 0)


def load(path, rows, eval_fraction):
    """(train, held_out), each (dense float32 [n, 13], rows int64 [n, 26], labels float32 [n])."""
    labels, dense, raw, present = [], [], [], []
    with open(path) as f:
        for line in f:
            c = line.rstrip("\r\n").split("\t")
            labels.append(float(c[0]))
            dense.append([math.log1p(max(float(x), 0.0)) if x else 0.0 for x in c[1:14]])
            raw.append([int(x, 16) if x else 0 for x in c[14:40]])
            present.append([bool(x) for x in c[14:40]])
    raw = np.array(raw, dtype=np.uint64)
    present = np.array(present)
    sparse = np.stack([rows_of(raw[:, t], present[:, t], t, rows) for t in range(TABLES)], axis=1)
    labels = np.array(labels, dtype=np.float32)
    dense = np.array(dense, dtype=np.float32)
    m = max(1, round(1 / eval_fraction)) if eval_fraction > 0 else 0
    r = np.arange(len(labels))
    held = (r % m == m - 1) if m else np.zeros(len(labels), bool)
    pick = lambda sel: (dense[sel], sparse[sel], labels[sel])  # noqa: E731
    return pick(~held), pick(held)


def auc(p, y):
    order = np.argsort(p, kind="mergesort")
    ps = p[order]
    ranks = np.empty(len(p))
    i = 0
    while i < len(ps):  # average ranks over ties
        j = i
        while j + 1 < len(ps) and ps[j + 1] == ps[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = y > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def logloss(p, y):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def evaluate(model, held, batch=4096):
    dense, sparse, labels = held
    probs = []
    with torch.no_grad():
        for i in range(0, len(labels), batch):
            logit = model(torch.from_numpy(dense[i:i + batch]), torch.from_numpy(sparse[i:i + batch]))
            probs.append(torch.sigmoid(logit).double().numpy())
    p = np.concatenate(probs)
    return auc(p, labels), logloss(p, labels)


def make_model(a):
    return Dlrm(a.dim, a.rows, [int(x) for x in a.bottom.split(",")],
                [int(x) for x in a.top.split(",")])


def train(a, data, seed):
    torch.manual_seed(seed)
    model = make_model(a)
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.Embedding):
            bound = math.sqrt(1.0 / a.rows)
            torch.nn.init.uniform_(m.weight, -bound, bound)
    sparse_params = [p for n, p in model.named_parameters() if n.startswith("tables.")]
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("tables.")]
    sparse_opt = torch.optim.Adagrad(sparse_params, lr=a.sparse_lr, eps=1e-8,
                                     initial_accumulator_value=0.0)
    dense_opt = torch.optim.Adam(dense_params, lr=a.dense_lr, betas=(0.9, 0.999), eps=1e-8)
    (dense, sparse, labels), held = data
    stream = np.tile(np.arange(len(labels)), a.epochs)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for i in range(0, len(stream), a.batch):
        idx = stream[i:i + a.batch]
        logit = model(torch.from_numpy(dense[idx]), torch.from_numpy(sparse[idx]))
        loss = loss_fn(logit, torch.from_numpy(labels[idx]))
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
    return evaluate(model, held)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(body[lo:hi], dtype=np.float32).reshape(info["shape"])
    return out


def load_export(a, export_dir):
    """The DLRM of an `ecps export` folder: tables from embeddings.safetensors, the MLPs'
    weights from model.onnx's initializers (Dlrm's names, out x in)."""
    import onnx
    from onnx import numpy_helper
    tables = read_safetensors(os.path.join(export_dir, "embeddings.safetensors"))
    graph = onnx.load(os.path.join(export_dir, "model.onnx"), load_external_data=False).graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer
            if t.name.startswith(("bottom.", "top."))}
    a.rows = tables["table_000"].shape[0]
    a.dim = tables["table_000"].shape[1]
    layers = lambda part: sorted(  # noqa: E731
        {int(k.split(".")[1]) for k in init if k.startswith(part + ".")})
    a.bottom = ",".join(str(init["bottom.%d.weight" % l].shape[0]) for l in layers("bottom"))
    a.top = ",".join(str(init["top.%d.weight" % l].shape[0]) for l in layers("top")[:-1])
    model = make_model(a)
    with torch.no_grad():
        for part, seq in (("bottom", model.bottom), ("top", model.top)):
            linears = [m for m in seq if isinstance(m, torch.nn.Linear)]
            for lin, l in zip(linears, layers(part)):
                lin.weight.copy_(torch.from_numpy(init["%s.%d.weight" % (part, l)].copy()))
                lin.bias.copy_(torch.from_numpy(init["%s.%d.bias" % (part, l)].copy()))
        for t, emb in enumerate(model.tables):
            emb.weight.copy_(torch.from_numpy(tables["table_%03d" % t].copy()))
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["train", "export"])
    ap.add_argument("data")
    ap.add_argument("export_dir", nargs="?")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--bottom", default="64,16")
    ap.add_argument("--top", default="64,32")
    ap.add_argument("--sparse-lr", type=float, default=0.05)
    ap.add_argument("--dense-lr", type=float, default=0.001)
    ap.add_argument("--eval-fraction", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.mode == "export":
        model = load_export(a, a.export_dir)
        # The export's own worked examples of the row mapping, against this script's.
        with open(os.path.join(a.export_dir, "manifest.json")) as f:
            examples = json.load(f)["row_mapping"]["examples"]
        for e in examples:
            raw = np.array([int(e["raw"], 16)], dtype=np.uint64)
            got = rows_of(raw, np.array([True]), e["table"], a.rows)[0]
            if got != e["row"]:
                sys.exit("dlrm_quality: row mapping differs from the export's: table %d raw %s "
                         "row %d, here %d" % (e["table"], e["raw"], e["row"], got))
        _, held = load(a.data, a.rows, a.eval_fraction)
        print("export auc=%.6f logloss=%.6f" % evaluate(model, held))
        return
    data = load(a.data, a.rows, a.eval_fraction)
    for seed in [int(s) for s in a.seeds.split(",")]:
        print("torch seed=%d auc=%.6f logloss=%.6f" % ((seed,) + train(a, data, seed)), flush=True)


if __name__ == "__main__":
    main()
