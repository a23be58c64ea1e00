#!/usr/bin/env python3
"""Report of `ecps bench recovery`: the same job and failure under each fault-tolerance mode.

usage: recovery_report.py OUT_DIR [--node-mtbf-hours=H] RUN [RUN ...]
Reads OUT_DIR/RUN/report.json and OUT_DIR/RUN/metrics.csv for each run (the first is the
reference without a failure), writes OUT_DIR/report.md and OUT_DIR/timelines.png. With a node
MTBF it adds the comparison at the Young/Daly checkpoint interval (docs/scaling.md).
"""
import math
import csv
import json
import os
import statistics
import sys


def load(out, name):
    d = os.path.join(out, name)
    report = json.load(open(os.path.join(d, "report.json")))
    rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
    t = [float(r["time_s"]) for r in rows]
    samples = [float(r["samples"]) for r in rows]
    steps = [int(float(r["step"])) for r in rows]
    return report, t, samples, steps


def rate(t, s, a, b):
    """Mean samples/s between times a and b (from the cumulative sample counts)."""
    pts = [(ti, si) for ti, si in zip(t, s) if a <= ti <= b]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return float("nan")
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def series(t, s):
    """Per-interval samples/s, ignoring the drops of a rollback (samples counted again)."""
    out_t, out_r = [], []
    for i in range(1, len(t)):
        dt = t[i] - t[i - 1]
        if dt > 0:
            out_t.append(t[i])
            out_r.append(max(0.0, (s[i] - s[i - 1]) / dt))
    return out_t, out_r


def running_start(t, steps):
    for ti, st in zip(t, steps):
        if st > 0:
            return ti
    return t[0]


def young_daly(table, runs, names, node_mtbf_h):
    """Erasure coding against checkpointing at its optimal interval, for a stated MTBF.

    A job of N nodes fails every M = node MTBF / N. Checkpointing every tau costs the save's
    pause delta each time and, per failure, the reload R plus on average tau/2 of lost work:
    overhead(tau) = delta/tau + (tau/2 + R)/M, least at tau* = sqrt(2 delta M) (Young, Daly's
    first order). Erasure coding costs its steady slowdown s all the time and, per failure,
    the training it loses while it rebuilds: L = detection + rebuild x (1 - throughput during):
    overhead = s + L/M. Time to full throughput after a failure: R + tau*/2 against the
    measured recovery.
    """
    by_mode = {}
    for r in table:
        by_mode.setdefault(r["mode"], []).append(r)
    ec = next((r for r in by_mode.get("erasure_code", []) if "recovery" in r), None)
    ckpts = [n for n in names if runs[n][0]["mode"] == "checkpoint"]
    if ec is None or not ckpts:
        return []
    # R: a checkpoint run's time from the kill to full throughput again (detection, every
    # server reloading, the workers rewinding and catching up). The drill kills at a step both
    # intervals divide, so little of it is lost work.
    rows = {r["name"]: r for r in table}
    deltas, reloads = [], []
    for n in ckpts:
        report = runs[n][0]
        cp = (report.get("final_status") or {}).get("checkpoint") or {}
        if cp.get("done") and cp.get("seconds"):
            deltas.append(float(cp["seconds"]))
        recovery = rows[n].get("recovery")
        if recovery is not None and recovery == recovery:
            reloads.append(float(recovery))
    if not deltas or not reloads:
        return []
    ec_report = runs[ec["name"]][0]
    nodes = sum(1 for n in ec_report["final_status"]["nodes"]
                if n.get("state") != "NODE_STANDBY" and n.get("role") in ("ROLE_SERVER", "ROLE_WORKER"))
    m = node_mtbf_h * 3600.0 / max(1, nodes)
    delta, reload_s = statistics.median(deltas), statistics.median(reloads)
    tau = math.sqrt(2 * delta * m)
    ck_over = delta / tau + (tau / 2 + reload_s) / m
    ck_full = reload_s + tau / 2
    s = max(0.0, 1.0 - ec["steady_rel"])
    during = ec["during"] if ec["during"] == ec["during"] else 0.0
    lost = ec["detect"] + ec["recovery"] * max(0.0, 1.0 - during)
    ec_over = s + lost / m
    return ["", "## Against checkpointing at its optimal interval (Young/Daly)", "",
            f"Node MTBF {node_mtbf_h:.0f} h (`fault_tolerance.checkpoint.node_mtbf_hours`), "
            f"{nodes} nodes: the job fails every M = {m / 3600:.1f} h. Measured here: a "
            f"checkpoint pauses training delta = {delta:.2f} s (median of {len(deltas)}), a "
            f"failure costs the checkpoint runs R = {reload_s:.2f} s to full throughput "
            f"(detection, reload, rewind; median of {len(reloads)}). tau* = sqrt(2 delta M) = "
            f"{tau / 60:.1f} min.", "",
            "| | steady-state overhead | time to full throughput after a failure |",
            "| --- | --- | --- |",
            f"| checkpoint every tau* | {100 * ck_over:.3f}% (delta/tau* {100 * delta / tau:.3f}% + "
            f"(tau*/2 + R)/M {100 * (tau / 2 + reload_s) / m:.3f}%) | {ck_full:.0f} s (R + tau*/2) |",
            f"| erasure_code | {100 * ec_over:.3f}% (slowdown {100 * s:.2f}% + lost {lost:.2f} s / M) "
            f"| {ec['recovery']:.1f} s (measured) |",
            "", f"EC / checkpoint: overhead {ec_over / ck_over:.2f}x (target <= 0.33x), time to full "
            f"throughput {ck_full / ec['recovery']:.0f}x shorter (target >= 10x).", ""]


def main():
    out = sys.argv[1]
    node_mtbf_h = None
    names = []
    for a in sys.argv[2:]:
        if a.startswith("--node-mtbf-hours="):
            node_mtbf_h = float(a.split("=", 1)[1])
        else:
            names.append(a)
    runs = {n: load(out, n) for n in names}
    ref_report, ref_t, ref_s, ref_steps = runs[names[0]]
    table = []
    plot = []
    ref_rate = None
    for name in names:
        report, t, s, steps = runs[name]
        start = running_start(t, steps) + 2.0  # past warm-up
        failures = report.get("failures") or []
        f = failures[0] if failures else None
        end_steady = f["failed_at_s"] if f else t[-1] * 0.9
        steady = rate(t, s, start, end_steady)
        if ref_rate is None:
            ref_rate = steady
        bytes_ = [int(n.get("server", {}).get("bytes", 0))
                  for n in report["final_status"]["nodes"]
                  if n.get("role") == "ROLE_SERVER" and n.get("state") != "NODE_STANDBY"]
        mem = statistics.mean(bytes_) / 1e6 if bytes_ else float("nan")
        configured = report["steps"] * (report["samples"] / max(1, report["steps"]))
        row = {"name": name, "mode": report["mode"], "ok": report["ok"], "steady": steady,
               "steady_rel": steady / ref_rate, "mem": mem,
               "scrub": (report.get("scrub", {}).get("clean")
                         if report.get("scrub", {}).get("done") else None)}
        if f:
            fail = f["failed_at_s"]
            step_at_fail = max(st for ti, st in zip(t, steps) if ti <= fail)
            # Full recovery: training past the failure step again at >= 90% of steady rate
            # over the next 2 s.
            full = None
            for ti, st in zip(t, steps):
                if ti > fail and st >= step_at_fail and rate(t, s, ti, ti + 2.0) >= 0.9 * steady:
                    full = ti
                    break
            full = full if full is not None else float("nan")
            # Time lost: how much longer this run trained than its own steady rate needed
            # for the samples it was configured to train.
            samples_needed = ref_report["samples"]
            lost = report["train_seconds"] - samples_needed / steady
            row.update({"detect": f.get("detection_s", float("nan")),
                        "recovery": full - fail,
                        "during": rate(t, s, fail, full) / steady if full == full else float("nan"),
                        "lost": lost})
            plot.append((name, [ti - fail for ti in series(t, s)[0]], series(t, s)[1]))
        else:
            plot.append((name, [ti - (t[-1] * 0.4) for ti in series(t, s)[0]], series(t, s)[1]))
        table.append(row)

    def fmt(x, spec):
        return "n/a" if x is None or x != x else format(x, spec)

    lines = ["# Recovery benchmark", "",
             f"Job: `{ref_report['job']}` ({ref_report['steps']} steps, {ref_report['servers']} "
             f"servers in the reference run, {ref_report['workers']} worker(s)). Every run but "
             f"`{names[0]}` had the same server killed at the same step.", "",
             "| run | mode | finished | steady samples/s | vs none | memory/server MB | "
             "detection s | time to full throughput s | throughput during recovery | time lost s "
             "| scrub |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in table:
        lines.append(
            f"| {r['name']} | {r['mode']} | {'yes' if r['ok'] else 'NO'} | {fmt(r['steady'], '.0f')} "
            f"| {fmt(r['steady_rel'], '.3f')} | {fmt(r['mem'], '.1f')} | {fmt(r.get('detect'), '.2f')} "
            f"| {fmt(r.get('recovery'), '.1f')} | {fmt(r.get('during'), '.2f')} "
            f"| {fmt(r.get('lost'), '.1f')} | {'n/a' if r['scrub'] is None else ('clean' if r['scrub'] else 'MISMATCH')} |")
    lines += ["", "- steady: samples/s from 2 s after training starts until the failure.",
              "- time to full throughput: from the kill until training is past the step it had "
              "reached and runs at >= 90% of its steady rate.",
              "- time lost: training time minus the time the reference's samples take at this "
              "run's steady rate.",
              ]
    if node_mtbf_h:
        lines += young_daly(table, runs, names, node_mtbf_h)
    lines += ["", "![timelines](timelines.png)", ""]
    open(os.path.join(out, "report.md"), "w").write("\n".join(lines))
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is not installed", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for name, x, y in plot:
        # A 1 s moving average: workers report progress every heartbeat, so single
        # intervals alternate between too many and too few samples.
        smooth = []
        for i in range(len(x)):
            window = [y[j] for j in range(len(x)) if x[i] - 1.0 < x[j] <= x[i]]
            smooth.append(sum(window) / len(window))
        ax.plot(x, smooth, label=name, linewidth=1.2)
    ax.axvline(0, color="red", linewidth=1, label="failure")
    ax.set_xlabel("seconds from the failure")
    ax.set_ylabel("samples/s (1 s average)")
    ax.set_title("Throughput around a server failure, by fault-tolerance mode")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "timelines.png"), dpi=100)


if __name__ == "__main__":
    main()
