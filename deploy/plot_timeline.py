#!/usr/bin/env python3
"""Plots a job's throughput timeline with failures and recoveries marked.

usage: plot_timeline.py OUTPUT_DIR

Reads OUTPUT_DIR/metrics.csv (written by `ecps run`) and, when present, OUTPUT_DIR/report.json
(its "drills" and "failures" arrays), and writes OUTPUT_DIR/timeline.png. Throughput is the
samples_per_s column (the coordinator's rate over the last 2 s of the workers' steps) as a
thin line, and its centred moving average over 5 s on top. Not the change of the cumulative
`samples` between rows: that count moves once a heartbeat, so each row interval holds one
heartbeat's samples more or fewer than were trained in it. Needs Debian's
python3-matplotlib (Agg backend, no display). Exit codes: 0 written, 2 bad input,
3 matplotlib missing.
"""
import csv
import json
import os
import sys


# The smoothed line's span: several rows at any metrics interval up to a second, and short
# enough that a recovery's dip keeps its shape.
SMOOTH_S = 5.0


def centred_mean(times, values, span):
    """The mean of the values within span/2 of each time (fewer at the ends)."""
    out, lo, hi, total = [], 0, 0, 0.0
    for t in times:
        while hi < len(times) and times[hi] <= t + span / 2:
            total += values[hi]
            hi += 1
        while times[lo] < t - span / 2:
            total -= values[lo]
            lo += 1
        out.append(total / (hi - lo))
    return out


def main(argv):
    if len(argv) != 2:
        print("usage: plot_timeline.py OUTPUT_DIR", file=sys.stderr)
        return 2
    out = argv[1]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("python3-matplotlib is not installed (apt-get install python3-matplotlib)")
        return 3

    times, rate, phases = [], [], []
    try:
        with open(os.path.join(out, "metrics.csv"), newline="") as f:
            for row in csv.DictReader(f):
                times.append(float(row["time_s"]))
                rate.append(float(row["samples_per_s"]))
                phases.append(row["phase"])
    except (OSError, KeyError, ValueError) as e:
        print(f"cannot read {out}/metrics.csv: {e}")
        return 2
    if len(times) < 2:
        print(f"{out}/metrics.csv has fewer than two rows")
        return 2

    report = {}
    try:
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
    except (OSError, ValueError):
        pass

    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.plot(times, rate, color="tab:blue", alpha=0.35, linewidth=0.8,
            label="samples/s (last 2 s)")
    ax.plot(times, centred_mean(times, rate, SMOOTH_S), color="tab:blue", linewidth=1.8,
            label=f"samples/s ({SMOOTH_S:g} s centred mean)")

    # Shade the time the job was in the RECOVERING phase.
    start = None
    for t, phase in zip(times, phases):
        if phase == "recovering" and start is None:
            start = t
        elif phase != "recovering" and start is not None:
            ax.axvspan(start, t, color="tab:orange", alpha=0.15)
            start = None
    if start is not None:
        ax.axvspan(start, times[-1], color="tab:orange", alpha=0.15)

    labelled = set()

    def mark(x, color, style, label):
        if x is None or x < 0:
            return
        ax.axvline(x, color=color, linestyle=style, linewidth=1.2,
                   label=None if label in labelled else label)
        labelled.add(label)

    for d in report.get("drills", []):
        mark(d.get("time_s"), "black", ":", "drill")
    for fl in report.get("failures", []):
        mark(fl.get("failed_at_s"), "tab:red", "-", "failure")
        mark(fl.get("detected_at_s"), "tab:orange", "--", "detected")
        mark(fl.get("recovered_at_s"), "tab:green", "-", "recovered")
        x = fl.get("failed_at_s")
        ratio = fl.get("throughput_during_vs_before")
        if x is not None and ratio is not None:
            ax.annotate(f"{fl.get('node', '')}: {ratio:.2f}x during recovery",
                        xy=(x, max(rate) * 0.95 if rate else 0), fontsize=8,
                        xytext=(4, 0), textcoords="offset points")

    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("samples/s")
    title = report.get("job", os.path.basename(os.path.normpath(out)))
    mode = report.get("mode")
    ax.set_title(f"{title}: throughput" + (f" ({mode})" if mode else ""))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "timeline.png")
    fig.savefig(path, dpi=110)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
