#!/usr/bin/python3
"""Plots of the kvserve / llama.cpp peer comparison, from the scripts' --json files.

Each input is optional; a figure is written for each input given:
  --peer-json   bench/peer/run_peer.py --json: prefill_vs_llamacpp.png and
                decode_vs_llamacpp.png (tokens/s per model and thread count, kvserve and
                llama.cpp side by side: bar = median, error bar = min-max over the rounds,
                kvserve/llama.cpp ratio of the medians above each group);
  --rows-json   bench/peer/server_rows.py --json: server_rows.png (the rows' TTFTs, log scale,
                and the concurrent row's generated tokens/s);
  --sweep-json  bench/peer/server_sweep.py --json: ttft_vs_prompt_length.png (cold and
                prefix-hit TTFT against prompt length, both servers) and
                throughput_vs_concurrency.png (generated tokens/s and mean client TTFT
                against the number of concurrent requests, both servers).
PNG files go to --out (default: bench/plots next to this script).

Needs matplotlib (bench only; on Debian 12: apt-get install python3-matplotlib). Uses the Agg
backend: no display needed.

  /usr/bin/python3 bench/plots.py --peer-json run_peer.json --rows-json server_rows.json \
      --sweep-json server_sweep.json
"""
import argparse
import json
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=wrong-import-position
from matplotlib import ticker  # noqa: E402  pylint: disable=wrong-import-position

HERE = os.path.dirname(os.path.abspath(__file__))
SIDES = ("kvserve", "llama.cpp")
COLORS = {"kvserve": "#1f77b4", "llama.cpp": "#ff7f0e"}
BENCH_LABELS = {"kvserve": "kvserve (kvserve_model_bench)", "llama.cpp": "llama.cpp (llama-bench)"}
SERVER_LABELS = {"kvserve": "kvserve", "llama.cpp": "llama.cpp (llama-server)"}


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def plain_log_y(ax):
    """A logarithmic y axis labelled 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5... (not 10^-1 only)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def summary(values):
    """(median, distance down to the minimum, distance up to the maximum)."""
    m = statistics.median(values)
    return m, m - min(values), max(values) - m


def grouped_bars(ax, groups, series, ylabel, labels, digits=0, log=False):
    """groups: x labels; series: {side: [values list per group or None]}. Bars at the medians
    with min-max error bars; the kvserve/llama.cpp ratio of medians above each group.
    log: a logarithmic y axis. The caller adds the legend (bottom_legend)."""
    width = 0.38
    xs = range(len(groups))
    tops = [0.0] * len(groups)
    lows = []
    medians = {}
    if log:
        plain_log_y(ax)
    for i, side in enumerate(SIDES):
        if side not in series:
            continue
        stats = [summary(v) if v else (0.0, 0.0, 0.0) for v in series[side]]
        medians[side] = [s[0] for s in stats]
        offsets = [x + (i - 0.5) * width for x in xs]
        lows += [s[0] - s[1] for s in stats if s[0] > 0]
        ax.bar(offsets, medians[side], width, color=COLORS[side], label=labels[side],
               yerr=[[s[1] for s in stats], [s[2] for s in stats]], capsize=3,
               error_kw={"elinewidth": 1})
        for j, s in enumerate(stats):
            tops[j] = max(tops[j], s[0] + s[2])
            ax.annotate(f"{s[0]:,.{digits}f}", (offsets[j], s[0] + s[2]), textcoords="offset points",
                        xytext=(0, 2), ha="center", va="bottom", fontsize=7)
    if len(medians) == 2:
        for j, top in enumerate(tops):
            k, l = medians["kvserve"][j], medians["llama.cpp"][j]
            if l:
                ax.annotate(f"{k / l:.2f}x", (j, top), textcoords="offset points",
                            xytext=(0, 13), ha="center", fontsize=8, fontweight="bold")
    if log and lows:
        ax.set_ylim(min(lows) / 2, max(tops) * 4)
    elif max(tops) > 0:
        ax.set_ylim(0, max(tops) * 1.2)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3, which="both" if log else "major")



def save(fig, out, name):
    """Writes fig as out/name (PNG), closes it and returns the path."""
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def bottom_legend(fig, ax):
    """The figure's legend in one row under the axes (no overlap with bars or labels)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))


def plot_peer(records, out):
    """run_peer.py --json: [{"model", "threads", "kind", "side", "tokens_per_s": [...]}]."""
    written = []
    for kind, name in (("prefill", "prefill_vs_llamacpp.png"), ("decode", "decode_vs_llamacpp.png")):
        rows = [r for r in records if r["kind"] == kind]
        if not rows:
            continue
        keys = []
        for r in rows:
            if (r["model"], r["threads"]) not in keys:
                keys.append((r["model"], r["threads"]))
        series = {side: [next((r["tokens_per_s"] for r in rows if r["side"] == side and
                               (r["model"], r["threads"]) == key), None) for key in keys]
                  for side in SIDES}
        rounds = max(len(r["tokens_per_s"]) for r in rows)
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(keys) + 2), 4.5))
        grouped_bars(ax, [f"{m}\n{t} thread{'s' if t != 1 else ''}" for m, t in keys], series,
                     "tokens/s", BENCH_LABELS)
        what = ("prefill, 512-token prompt (llama-bench pp512)" if kind == "prefill" else
                "decode (llama-bench tg128; kvserve 64 steps after 32 tokens)")
        ax.set_title(f"{what}\nmedian, min-max over {rounds} round{'s' if rounds != 1 else ''}; "
                     "ratio = kvserve / llama.cpp", fontsize=9)
        bottom_legend(fig, ax)
        written.append(save(fig, out, name))
    return written


def values(samples, side, key, **match):
    return [s["values"][key] for s in samples
            if s["side"] == side and all(s.get(k) == v for k, v in match.items())]


def plot_rows(data, out):
    """server_rows.py --json: TTFT rows (log scale) and the concurrent row's tokens/s."""
    samples = data["samples"]
    rows = {s["row"] for s in samples}
    ttft_rows = []
    if "cold" in rows:
        ttft_rows.append(("cold", "ttft_s", "cold, 2,032 tokens"))
    if "cached" in rows:
        ttft_rows.append(("cached", "ttft_s", "2,000 cached\n+ 32 new"))
    if "concurrent" in rows:
        n = data.get("concurrent", 8)
        ttft_rows.append(("concurrent", "ttft_client_mean_s", f"{n} at once, shared\nfresh prefix: "
                          "mean,\nclient"))
        ttft_rows.append(("concurrent", "ttft_server_mean_s", f"{n} at once, shared\nfresh prefix: "
                          "mean,\nserver timings"))
    if not ttft_rows:
        return []
    panels = 2 if "concurrent" in rows else 1
    fig, axes = plt.subplots(1, panels, figsize=(4 + 2.2 * len(ttft_rows), 4.8),
                             gridspec_kw={"width_ratios": [len(ttft_rows), 1.3][:panels]})
    axes = axes if panels > 1 else [axes]
    series = {side: [values(samples, side, key, row=row) for row, key, _ in ttft_rows]
              for side in SIDES}
    grouped_bars(axes[0], [label for _, _, label in ttft_rows], series, "TTFT, s (log scale)",
                 SERVER_LABELS, digits=3, log=True)
    axes[0].set_title("TTFT (lower is better)", fontsize=9)
    if panels > 1:
        series = {side: [values(samples, side, "tokens_per_s", row="concurrent")] for side in SIDES}
        grouped_bars(axes[1], [f"{data.get('concurrent', 8)} at once"], series,
                     "generated tokens/s", SERVER_LABELS, digits=1)
        axes[1].set_title("concurrent row: generated tokens/s\n(higher is better)", fontsize=9)
    rounds = data.get("rounds", max(s["round"] for s in samples) + 1)
    fig.suptitle(f"server rows, {data['model']}, {data['threads']} threads; median, min-max over "
                 f"{rounds} round{'s' if rounds != 1 else ''}", fontsize=10)
    bottom_legend(fig, axes[0])
    return [save(fig, out, "server_rows.png")]


def line(ax, xs, per_x, side, label, style):
    """Median line with min-max error bars over the x values that have samples."""
    points = [(x, summary(v)) for x, v in zip(xs, per_x) if v]
    if not points:
        return
    ax.errorbar([p[0] for p in points], [p[1][0] for p in points],
                yerr=[[p[1][1] for p in points], [p[1][2] for p in points]],
                color=COLORS[side], linestyle=style, marker="o", markersize=4, capsize=3,
                label=label)


def plot_sweep(data, out):
    samples = data["samples"]
    rounds = data.get("rounds", max((s["round"] for s in samples), default=0) + 1)
    over = f"median, min-max over {rounds} round{'s' if rounds != 1 else ''}"
    written = []
    lengths = sorted({s["length"] for s in samples if "length" in s})
    if lengths:
        hit_new = data.get("new_in_hit", 32)
        fig, ax = plt.subplots(figsize=(7, 4.8))
        for side in SIDES:
            for row, what, style in (("ttft_cold", "cold", "-"),
                                     ("ttft_prefix_hit", f"prefix hit (L-{hit_new} cached)", "--")):
                line(ax, lengths, [values(samples, side, "ttft_s", row=row, length=l)
                                   for l in lengths], side, f"{SERVER_LABELS[side]}, {what}", style)
        ax.set_xlabel("prompt length L, tokens")
        ax.set_ylabel("TTFT, s (server timings, log scale)")
        plain_log_y(ax)
        ax.set_xticks(lengths)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        ax.set_title(f"TTFT against prompt length, {data['model']}, {data['threads']} threads\n"
                     f"{over}", fontsize=9)
        fig.tight_layout()
        written.append(save(fig, out, "ttft_vs_prompt_length.png"))
    counts = sorted({s["concurrency"] for s in samples if "concurrency" in s})
    if counts:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
        for side in SIDES:
            line(left, counts, [values(samples, side, "tokens_per_s", row="concurrency",
                                       concurrency=n) for n in counts], side, SERVER_LABELS[side], "-")
            line(right, counts, [values(samples, side, "ttft_client_mean_s", row="concurrency",
                                        concurrency=n) for n in counts], side, SERVER_LABELS[side], "-")
        for ax, ylabel in ((left, "generated tokens/s (all requests)"),
                           (right, "mean TTFT, s (client, streamed)")):
            ax.set_xlabel("concurrent requests N")
            ax.set_ylabel(ylabel)
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts)
            ax.set_xticklabels([str(n) for n in counts])
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"N concurrent requests, distinct {data.get('prompt_tokens', '?')}-token "
                     f"prompts, {data.get('new_tokens', '?')} new tokens each; {data['model']}, "
                     f"{data['threads']} threads; {over}", fontsize=9)
        fig.tight_layout()
        written.append(save(fig, out, "throughput_vs_concurrency.png"))
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer-json", help="bench/peer/run_peer.py --json output")
    parser.add_argument("--rows-json", help="bench/peer/server_rows.py --json output")
    parser.add_argument("--sweep-json", help="bench/peer/server_sweep.py --json output")
    parser.add_argument("--out", default=os.path.join(HERE, "plots"), help="folder of the PNGs")
    args = parser.parse_args()
    if not (args.peer_json or args.rows_json or args.sweep_json):
        parser.error("give at least one of --peer-json, --rows-json, --sweep-json")
    os.makedirs(args.out, exist_ok=True)
    written = []
    if args.peer_json:
        written += plot_peer(load(args.peer_json), args.out)
    if args.rows_json:
        written += plot_rows(load(args.rows_json), args.out)
    if args.sweep_json:
        written += plot_sweep(load(args.sweep_json), args.out)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
