#!/usr/bin/env python3
"""Plot benchmark results: a throughput bar chart and a latency percentile chart.

    python3 scripts/plot-bench.py docs/bench/peers-results/summary.json
    python3 scripts/plot-bench.py --out-dir docs/bench --prefix peers results/*.json

Input: JSON written by bench-table --summary (an array of results), or
result files of herald bench publish / natsjs-bench / rabbitmq-bench
(--results), one object each. Results of the same setting are not merged
here: give bench-table's medians.

Output: PREFIX-throughput.png (events/s per setting, grouped by batch size)
and PREFIX-latency.png (p50, p90, p99, p99.9 and max per setting, one panel
per batch size, logarithmic scale) in OUT_DIR, and PREFIX-cpu.png (the
servers' CPU per acknowledged event, when the results have it). Settings that acknowledge
without fsync are hatched and marked "no fsync".

matplotlib is installed with pip if it is missing.
"""

import argparse
import importlib
import json
import subprocess
import sys


def import_matplotlib():
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        print("plot-bench: installing matplotlib with pip", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plain_log_ticks(ax):
    """Label a logarithmic axis 1, 10, 100 rather than 10^0, 10^1, 10^2."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def load_results(paths):
    results = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, list):
            results.extend(data)
        elif isinstance(data, dict) and "system" in data:
            results.append(data)
        else:
            sys.exit(f"plot-bench: {path}: want a result or an array of results")
    if not results:
        sys.exit("plot-bench: no results")
    return results


def name_of(r):
    """A short name for a setting."""
    system, label = r["system"], r.get("label", "")
    replicas = (r.get("settings") or {}).get("replicas", "1")
    if system == "herald":
        name = "herald " + label
    elif system == "nats-jetstream":
        name = "JetStream always" if r["fsync_before_ack"] else "JetStream default"
        if replicas != "1":
            name = name.replace("JetStream", f"JetStream R{replicas}")
    elif system == "rabbitmq":
        name = "RabbitMQ quorum"
        if replicas != "1":
            name += f", {replicas} members"
    else:
        name = f"{system} {label}".strip()
    if not r["fsync_before_ack"]:
        name += " (no fsync)"
    return name


def load_title(results):
    c = results[0]["config"]
    sizes = sorted({r["config"]["event_bytes"] for r in results})
    producers = sorted({r["config"]["producers"] for r in results})
    return (
        f"{'/'.join(map(str, producers))} producers, "
        f"{'/'.join(map(str, sizes))}-byte events, {c['keys']} keys"
    )


def settings_in_order(results):
    names = []
    for r in results:
        n = name_of(r)
        if n not in names:
            names.append(n)
    return names


def batches_of(results):
    return sorted({r["config"]["batch"] for r in results})


def find(results, batch, name):
    for r in results:
        if r["config"]["batch"] == batch and name_of(r) == name:
            return r
    return None


def plot_throughput(plt, results, path):
    plot_bars(plt, results, path, lambda r: r["events_per_second"], "{:,.0f}",
              "events/s (acknowledged)", "Publish throughput: ")


def server_cpu(r):
    c = r.get("server_cpu")
    return c["us_per_event"] if c else None


def plot_cpu(plt, results, path):
    plot_bars(plt, [r for r in results if server_cpu(r) is not None], path, server_cpu, "{:.1f}",
              "server CPU per acknowledged event (µs)", "Server CPU (user+system) per event: ")


def plot_bars(plt, results, path, value, fmt, ylabel, title):
    names = settings_in_order(results)
    batches = batches_of(results)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(names) * len(batches)), 4.8))
    width = 0.8 / len(names)
    top = max(value(r) for r in results)
    labelled = set()
    for i, name in enumerate(names):
        for j, batch in enumerate(batches):
            r = find(results, batch, name)
            if r is None:
                continue
            x = j + (i - (len(names) - 1) / 2) * width
            v = value(r)
            ax.bar(
                x,
                v,
                width * 0.92,
                color=colors[i % len(colors)],
                hatch=None if r["fsync_before_ack"] else "//",
                edgecolor="black" if not r["fsync_before_ack"] else colors[i % len(colors)],
                label=None if name in labelled else name,
            )
            labelled.add(name)
            ax.text(x, v + top * 0.01, fmt.format(v), ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels([f"batch {b}" for b in batches])
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, top * 1.25)
    ax.set_title(title + load_title(results) + " (medians)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


PERCENTILES = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99_9", "p99.9"), ("max", "max")]


def plot_latency(plt, results, path):
    names = settings_in_order(results)
    batches = batches_of(results)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 4.8), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        for i, name in enumerate(names):
            r = find(results, batch, name)
            if r is None:
                continue
            ys = [r["latency_ms"][k] for k, _ in PERCENTILES]
            ax.plot(
                range(len(PERCENTILES)),
                ys,
                marker="o",
                color=colors[i % len(colors)],
                linestyle="-" if r["fsync_before_ack"] else "--",
                label=name,
            )
        ax.set_xticks(range(len(PERCENTILES)))
        ax.set_xticklabels([label for _, label in PERCENTILES])
        ax.set_yscale("log")
        plain_log_ticks(ax)
        ax.set_ylabel("batch latency, send to ack (ms)")
        ax.set_title(f"batch {batch}", fontsize=10)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Publish latency percentiles: " + load_title(results) + " (medians)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="summary.json or result files")
    p.add_argument("--out-dir", default="docs/bench", help="directory for the PNG files (default docs/bench)")
    p.add_argument("--prefix", default="peers", help="file name prefix (default peers)")
    args = p.parse_args()
    results = load_results(args.files)
    plt = import_matplotlib()
    out = [f"{args.out_dir}/{args.prefix}-throughput.png", f"{args.out_dir}/{args.prefix}-latency.png"]
    plot_throughput(plt, results, out[0])
    plot_latency(plt, results, out[1])
    if any(server_cpu(r) is not None for r in results):
        out.append(f"{args.out_dir}/{args.prefix}-cpu.png")
        plot_cpu(plt, results, out[2])
    for o in out:
        print(o)


if __name__ == "__main__":
    main()
