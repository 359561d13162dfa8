#!/usr/bin/env python3
"""Summarise a kiln_kernel_trace file: what each kernel adds to a CUDA graph launch's critical path.

Reads the JSON lines that libkiln_kernel_trace.so writes (bench/kernel_trace.cc), splits one CUDA
graph's kernels into its launches, and reports, per kernel name and per position in the launch,
the mean duration and the mean exposed time. Standard library only.

  python3 bench/kernel_trace_summary.py --trace /tmp/trace.jsonl [--graph-id N] [--skip 2]
      [--by-position [--positions 40]] [--json summary.json]

Grouping into launches: records with graph_id 0 (kernels and copies outside graphs) are left
out. One graph id's kernels, in start order (ties by graph_node_id), belong to the current launch
until either
  (a) a graph_node_id already in the current launch comes again: the graph was replayed, or
  (b) a kernel starts more than --gap-us (default 1000 us) after the latest end in the launch: a
      safety net for replays that do not run every kernel node.
As a check, the header counts the launches whose kernels all carry one correlation id (CUPTI gives
a graph's kernels the correlation id of the API call that launched the graph).

Exposed time: with a launch's kernels in start order, the exposed time of kernel k is
end(k) - max(end(j) for j before k), clipped at 0; the first kernel's is its duration. It is the
time k adds to the launch's critical path: a kernel that overlaps earlier ones under programmatic
dependent launch exposes only its tail, and a kernel after an idle gap exposes the gap too (the
"idle" column: start(k) - max(end(j) for j before k), clipped at 0). The exposed times of a launch
sum to its span, last end - first start, so the "share" column sums to 100 %.

Positions are graph nodes (graph_node_id), ordered by their mean start within the launch. Means
over launches: per position, over the launches that ran the node; per name, totals per launch
averaged over all launches used. The gap between launches (mean, and the median, which leaves out
the rare long gaps such as a benchmark's prompt steps between its runs) is the next launch's first
start minus this one's last end (kernels of other graphs or outside graphs in between are not
subtracted).
"""

import argparse
import bisect
import functools
import json
import sys
from dataclasses import dataclass


@dataclass(slots=True)
class Kernel:
    name: str
    start: int  # ns, GPU-global
    end: int  # ns
    graph_id: int
    node: int  # graph_node_id
    correlation: int
    kind: str = "kernel"  # or "memcpy"


def load_trace(path):
    kernels = []
    with open(path) as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                kernels.append(Kernel(r["name"], int(r["start"]), int(r["end"]),
                                      int(r["graph_id"]), int(r["graph_node_id"]),
                                      int(r.get("correlation", 0)), r.get("kind", "kernel")))
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{line_number}: not a kernel record ({e})")
    return kernels


def split_launches(kernels, gap_ns):
    """Returns one graph's kernels as a list of launches (rules (a) and (b) above)."""
    launches, current, nodes, latest_end = [], [], set(), 0
    for k in sorted(kernels, key=lambda k: (k.start, k.node)):
        if current and (k.node in nodes or k.start - latest_end > gap_ns):
            launches.append(current)
            current, nodes = [], set()
        if not current:
            latest_end = k.end
        current.append(k)
        nodes.add(k.node)
        latest_end = max(latest_end, k.end)
    if current:
        launches.append(current)
    return launches


def exposed_times(launch):
    """Returns [(kernel, exposed_ns, idle_ns)] for a launch's kernels in start order."""
    out, latest_end = [], None
    for k in launch:
        if latest_end is None:
            out.append((k, k.end - k.start, 0))
            latest_end = k.end
        else:
            out.append((k, max(0, k.end - latest_end), max(0, k.start - latest_end)))
            latest_end = max(latest_end, k.end)
    return out


@functools.lru_cache(maxsize=None)
def short_name(name, max_template=40):
    """Drops `kiln::kernels::`, a leading `void `, the parameter list, and template arguments
    longer than max_template characters (shown as <...>)."""
    name = name.replace("kiln::kernels::", "")
    if name.startswith("void "):
        name = name[len("void "):]
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i] if i > 0 else name
                break
    out, depth, args = [], 0, []
    for c in name:
        if c == "<":
            depth += 1
            if depth == 1:
                args = []
                continue
        elif c == ">" and depth > 0:
            depth -= 1
            if depth == 0:
                text = "".join(args)
                out.append("<...>" if len(text) > max_template else f"<{text}>")
                continue
        (args if depth > 0 else out).append(c)
    return "".join(out) + ("<" + "".join(args) if depth > 0 else "")


def summarise(kernels, graph_id=None, skip=0, gap_us=1000.0, max_template=40):
    """Returns the summary dict (what --json writes), or raises ValueError when the trace holds
    no launches of the chosen graph."""
    by_graph = {}
    for k in kernels:
        if k.graph_id != 0:
            by_graph.setdefault(k.graph_id, []).append(k)
    launches_by_graph = {g: split_launches(ks, gap_us * 1e3) for g, ks in by_graph.items()}
    if not launches_by_graph:
        raise ValueError(f"no graph kernels among {len(kernels)} kernels")
    if graph_id is None:
        graph_id = max(launches_by_graph, key=lambda g: (len(launches_by_graph[g]), -g))
    if graph_id not in launches_by_graph:
        raise ValueError(f"graph {graph_id} not in the trace (graphs: {sorted(launches_by_graph)})")
    launches = launches_by_graph[graph_id][skip:]
    if not launches:
        raise ValueError(f"graph {graph_id}: no launches left after --skip {skip}")

    positions, names = {}, {}  # node -> sums; short name -> per-launch totals
    for launch in launches:
        first_start = launch[0].start
        for k, exposed, idle in exposed_times(launch):
            name = short_name(k.name, max_template)
            p = positions.setdefault(k.node, {"name": name, "n": 0, "dur": 0, "exposed": 0,
                                              "idle": 0, "start": 0})
            n = names.setdefault(name, {"count": 0, "dur": 0, "exposed": 0, "idle": 0})
            for sums in (p, n):
                sums["dur"] += k.end - k.start
                sums["exposed"] += exposed
                sums["idle"] += idle
            p["n"] += 1
            p["start"] += k.start - first_start
            n["count"] += 1

    num = len(launches)
    spans = [max(k.end for k in launch) - launch[0].start for launch in launches]
    gaps = [b[0].start - max(k.end for k in a) for a, b in zip(launches, launches[1:])]
    # What ran between consecutive launches, over the gaps up to --gap-us (a benchmark's prompt
    # steps between its runs leave longer ones): kernels outside graphs and copies, per gap.
    outside = sorted((k for k in kernels if k.graph_id == 0), key=lambda k: k.start)
    starts = [k.start for k in outside]
    between, num_short = {}, 0
    for a, b in zip(launches, launches[1:]):
        end = max(k.end for k in a)
        if b[0].start - end > gap_us * 1e3:
            continue
        num_short += 1
        for k in outside[bisect.bisect_left(starts, end):bisect.bisect_left(starts, b[0].start)]:
            e = between.setdefault(short_name(k.name, max_template), {"count": 0, "dur": 0})
            e["count"] += 1
            e["dur"] += k.end - k.start
    mean_span = sum(spans) / num
    sizes = [len(launch) for launch in launches]
    one_correlation = sum(len({k.correlation for k in launch}) == 1 for launch in launches)
    us = 1e-3
    ordered = sorted(positions.items(), key=lambda item: item[1]["start"] / item[1]["n"])
    return {
        "graph_id": graph_id,
        "graph_launches": {g: len(ls) for g, ls in launches_by_graph.items()},
        "num_kernels": len(kernels),
        "num_non_graph_kernels": len(kernels) - sum(len(ks) for ks in by_graph.values()),
        "num_launches": num,
        "skipped": skip,
        "kernels_per_launch": [min(sizes), max(sizes)],
        "launches_with_one_correlation": one_correlation,
        "mean_span_us": mean_span * us,
        "mean_gap_us": sum(gaps) / len(gaps) * us if gaps else None,
        "median_gap_us": sorted(gaps)[len(gaps) // 2] * us if gaps else None,
        "short_gaps": num_short,
        "between_launches": sorted(
            ({"name": name, "count_per_gap": e["count"] / num_short,
              "dur_us_per_gap": e["dur"] / num_short * us} for name, e in between.items()),
            key=lambda row: -row["dur_us_per_gap"]) if num_short else [],
        "mean_sum_dur_us": sum(n["dur"] for n in names.values()) / num * us,
        "kernels": sorted(
            ({"name": name, "count_per_launch": n["count"] / num, "dur_us": n["dur"] / num * us,
              "exposed_us": n["exposed"] / num * us, "idle_us": n["idle"] / num * us,
              "share": n["exposed"] / num / mean_span if mean_span else 0.0}
             for name, n in names.items()),
            key=lambda row: -row["exposed_us"]),
        "positions": [
            {"position": i, "graph_node_id": node, "name": p["name"], "launches": p["n"],
             "start_us": p["start"] / p["n"] * us, "dur_us": p["dur"] / p["n"] * us,
             "exposed_us": p["exposed"] / p["n"] * us, "idle_us": p["idle"] / p["n"] * us}
            for i, (node, p) in enumerate(ordered)],
    }


def print_summary(s, trace, by_position, num_positions):
    graphs = ", ".join(f"{g} ({n} launches)" for g, n in sorted(s["graph_launches"].items()))
    print(f"trace {trace}: {s['num_kernels']} kernels and copies, {s['num_non_graph_kernels']} "
          f"outside graphs; graphs: {graphs}")
    low, high = s["kernels_per_launch"]
    size = f"{low}" if low == high else f"{low}..{high} (varies: check the grouping)"
    print(f"graph {s['graph_id']}: {s['num_launches']} launches after skipping {s['skipped']}, "
          f"{size} kernels a launch; {s['launches_with_one_correlation']} launches with one "
          f"correlation id")
    gap = ("n/a" if s["mean_gap_us"] is None else
           f"{s['mean_gap_us']:.1f} us (median {s['median_gap_us']:.1f} us)")
    print(f"mean span {s['mean_span_us']:.1f} us, mean gap between launches {gap}, mean sum of "
          f"kernel durations {s['mean_sum_dur_us']:.1f} us\n")
    print(f"{'exposed us':>10} {'share':>6} {'dur us':>9} {'idle us':>8} {'count':>6}  name")
    for r in s["kernels"]:
        print(f"{r['exposed_us']:10.2f} {100 * r['share']:5.1f}% {r['dur_us']:9.2f} "
              f"{r['idle_us']:8.2f} {r['count_per_launch']:6.2f}  {r['name']}")
    if s["between_launches"]:
        print(f"\nbetween launches (mean over the {s['short_gaps']} gaps up to --gap-us): kernels "
              f"outside graphs and copies")
        print(f"{'dur us':>10} {'count':>6}  name")
        for r in s["between_launches"]:
            print(f"{r['dur_us_per_gap']:10.2f} {r['count_per_gap']:6.2f}  {r['name']}")
    if by_position:
        rows = s["positions"] if num_positions is None else s["positions"][:num_positions]
        print(f"\n{'pos':>4} {'start us':>9} {'dur us':>8} {'exposed us':>10} {'idle us':>8}  name")
        for r in rows:
            print(f"{r['position']:4d} {r['start_us']:9.2f} {r['dur_us']:8.2f} "
                  f"{r['exposed_us']:10.2f} {r['idle_us']:8.2f}  {r['name']}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", required=True, help="JSON lines from libkiln_kernel_trace.so")
    parser.add_argument("--graph-id", type=int, help="graph to summarise (default: most launches)")
    parser.add_argument("--skip", type=int, default=0, help="first launches to skip (warm-up)")
    parser.add_argument("--gap-us", type=float, default=1000.0,
                        help="an idle gap longer than this starts a new launch (default 1000)")
    parser.add_argument("--max-template", type=int, default=40,
                        help="template arguments longer than this print as <...> (default 40)")
    parser.add_argument("--by-position", action="store_true", help="also print each position")
    parser.add_argument("--positions", type=int, metavar="K",
                        help="print the first K positions only (implies --by-position)")
    parser.add_argument("--json", metavar="OUT", help="also write the summary as JSON")
    args = parser.parse_args(argv)
    try:
        s = summarise(load_trace(args.trace), args.graph_id, args.skip, args.gap_us,
                      args.max_template)
    except ValueError as e:
        sys.exit(f"kernel_trace_summary: {e}")
    by_position = args.by_position or args.positions is not None
    print_summary(s, args.trace, by_position, args.positions)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
