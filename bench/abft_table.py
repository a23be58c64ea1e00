#!/usr/bin/env python3
"""Tabulates abft_bench's JSON (--benchmark_repetitions=N --benchmark_format=json): per GEMM,
the median time unchecked and each scheme's overhead against it (median, with the range over
repetitions of the scheme's time); per model, each worker.abft mode's overhead on the step;
and the targets of docs/abft.md."""
import json
import re
import statistics
import sys
from collections import defaultdict


def main(path):
    runs = defaultdict(list)
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        runs[b["run_name"]].append(b)
    def med(name):
        return statistics.median(r["real_time"] for r in runs[name])
    def span(name):
        t = [r["real_time"] for r in runs[name]]
        return min(t), max(t)
    names = ["forward", "weight_grad", "input_grad"]
    print("| model | layer | GEMM | m x n x k | intensity | unchecked us | global | panel | auto (picks) |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])  # model -> time per scheme
    for name in sorted(runs, key=lambda n: [int(x) for x in re.findall(r":(\d+)", n)]):
        m = re.match(r"BM_Gemm/model:(\d)/layer:(\d+)/gemm:(\d)/scheme:0(/min_time:[0-9.]+)?$", name)
        if not m:
            continue
        model, layer, gemm = m.groups()[:3]
        base = med(name)
        row = []
        for s in range(4):
            n = name.replace("scheme:0", "scheme:%d" % s)
            totals[model][s] += med(n)
            if s:
                lo, hi = span(n)
                row.append("%+.1f%% (%+.1f..%+.1f)" % (100 * (med(n) / base - 1),
                                                     100 * (lo / base - 1), 100 * (hi / base - 1)))
        r0 = runs[name.replace("scheme:0", "scheme:3")][0]
        picks = "panel" if r0["auto_is_panel"] else "global"
        print("| %s | %s | %s | | %.1f | %.1f | %s | %s | %s (%s) |" % (
            "heavy" if model == "1" else "quickstart", layer, names[int(gemm)],
            r0["intensity"], base, row[0], row[1], row[2], picks))
    print()
    print("| model | GEMMs unchecked ms | global | panel | auto | worse/auto |")
    print("|---|---|---|---|---|---|")
    for model, t in sorted(totals.items()):
        o = [100 * (t[s] / t[0] - 1) for s in range(4)]
        print("| %s | %.2f | %+.1f%% | %+.1f%% | %+.1f%% | %.2fx |" % (
            "heavy" if model == "1" else "quickstart", t[0] / 1000, o[1], o[2], o[3],
            max(o[1], o[2]) / o[3] if o[3] > 0 else float("inf")))
    print()
    print("| model | step off ms (range) | detect | auto | all panel |")
    print("|---|---|---|---|---|")
    for model in ("0", "1"):
        base = "BM_Step/model:%s/mode:0/real_time" % model
        if base not in runs:
            continue
        lo, hi = span(base)
        cells = []
        for mode in (1, 2, 3):
            n = "BM_Step/model:%s/mode:%d/real_time" % (model, mode)
            a, b = span(n)
            cells.append("%+.1f%% (%+.1f..%+.1f)" % (100 * (med(n) / med(base) - 1),
                                                   100 * (a / med(base) - 1),
                                                   100 * (b / med(base) - 1)))
        print("| %s | %.1f (%.1f..%.1f) | %s |" % ("heavy" if model == "1" else "quickstart",
                                                  med(base), lo, hi, " | ".join(cells)))


if __name__ == "__main__":
    main(sys.argv[1])
