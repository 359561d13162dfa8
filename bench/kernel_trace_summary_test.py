"""CPU tests of kernel_trace_summary.py on a hand-made trace whose figures are worked out below.

  python3 -m pytest bench/kernel_trace_summary_test.py    (or without pytest:
  python3 bench/kernel_trace_summary_test.py)

Graph 7 runs twice, 4 kernel nodes a launch (ns; nodes 11..14; C and D are one kernel, add_kernel):

  launch 1  A [1000, 3000]  B [2500, 4000]  C [4500, 5000]  D [4600, 4900]   correlation 100
            exposed: A 2000 (its duration), B 4000-3000 = 1000 (overlaps A, as under PDL),
            C 5000-4000 = 1000 (of which 500 idle), D 0 (inside C); sum 4000 = span 5000-1000
  launch 2  A [10000, 11000]  B [10800, 12000]  C [12000, 12400]  D [12100, 12600]  corr. 101
            exposed: A 1000, B 1000, C 400, D 12600-12400 = 200; sum 2600 = span
  gap between launches: 10000 - 5000 = 5000

Around them: one kernel outside graphs and one copy, both in the gap (memset_kernel [7000, 7500],
memcpy HtoD [6000, 6300]), and graph 9 with a single launch.
"""

import contextlib
import io
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_trace_summary as summary  # noqa: E402

RMS = "void kiln::kernels::RmsNormKernel<128>(const __nv_bfloat16*, int)"
GEMV = ("void kiln::kernels::GemvKernel<kiln::kernels::GemvTraits<__nv_bfloat16, 4, 8, true>, "
        "128>(kiln::kernels::GemvArgs)")
ADD = "add_kernel"


def record(name, start, end, graph_id=7, node=0, correlation=0, kind="kernel"):
    return {"kind": kind, "name": name, "start": start, "end": end, "device": 0, "stream": 13,
            "graph_id": graph_id, "graph_node_id": node, "correlation": correlation,
            "grid": [1, 1, 1], "block": [128, 1, 1], "regs": 32, "smem_dyn": 0}


TRACE = [
    record(RMS, 1000, 3000, node=11, correlation=100),
    record(GEMV, 2500, 4000, node=12, correlation=100),
    record(ADD, 4500, 5000, node=13, correlation=100),
    record(ADD, 4600, 4900, node=14, correlation=100),
    record("memset_kernel", 7000, 7500, graph_id=0, correlation=55),
    record("memcpy HtoD", 6000, 6300, graph_id=0, correlation=54, kind="memcpy"),
    record(RMS, 10000, 11000, node=11, correlation=101),
    record(GEMV, 10800, 12000, node=12, correlation=101),
    record(ADD, 12000, 12400, node=13, correlation=101),
    record(ADD, 12100, 12600, node=14, correlation=101),
    record(RMS, 20000, 20500, graph_id=9, node=3, correlation=102),
]


def write_trace(directory, records):
    path = os.path.join(directory, "trace.jsonl")
    with open(path, "w") as f:
        # Out of order on purpose: the summary must sort by start itself.
        for r in reversed(records):
            f.write(json.dumps(r) + "\n")
    return path


def kernels():
    return [summary.Kernel(r["name"], r["start"], r["end"], r["graph_id"], r["graph_node_id"],
                           r["correlation"], r["kind"]) for r in TRACE]


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_node_repeat_splits_launches_and_exposed_sums_to_span():
    launches = summary.split_launches([k for k in kernels() if k.graph_id == 7], gap_ns=1e6)
    assert [[k.node for k in launch] for launch in launches] == [[11, 12, 13, 14]] * 2
    exposed = [[(e, i) for _, e, i in summary.exposed_times(launch)] for launch in launches]
    assert exposed == [[(2000, 0), (1000, 0), (1000, 500), (0, 0)],
                       [(1000, 0), (1000, 0), (400, 0), (200, 0)]]


def test_long_gap_splits_launches_that_share_no_node():
    one_node_each = [summary.Kernel("k", 0, 100, 5, 1, 0),
                     summary.Kernel("k", 2_000_100, 2_000_200, 5, 2, 0)]
    assert len(summary.split_launches(one_node_each, gap_ns=1000e3)) == 2
    assert len(summary.split_launches(one_node_each, gap_ns=5000e3)) == 1


def test_summary_means():
    s = summary.summarise(kernels())
    assert s["graph_id"] == 7  # the graph with the most launches
    assert s["graph_launches"] == {7: 2, 9: 1}
    assert s["num_non_graph_kernels"] == 2
    assert s["num_launches"] == 2 and s["kernels_per_launch"] == [4, 4]
    assert s["launches_with_one_correlation"] == 2
    assert close(s["mean_span_us"], 3.3)  # (4000 + 2600) / 2 ns
    assert close(s["mean_gap_us"], 5.0) and close(s["median_gap_us"], 5.0)
    # The one gap (5 us, under --gap-us) held the copy and the kernel outside graphs.
    assert s["short_gaps"] == 1
    between = {r["name"]: (r["count_per_gap"], r["dur_us_per_gap"]) for r in s["between_launches"]}
    assert list(between) == ["memset_kernel", "memcpy HtoD"]
    assert between["memset_kernel"][0] == 1 and close(between["memset_kernel"][1], 0.5)
    assert close(between["memcpy HtoD"][1], 0.3)
    assert summary.summarise(kernels(), gap_us=4.0)["between_launches"] == []
    by_name = {r["name"]: r for r in s["kernels"]}
    assert list(by_name) == ["RmsNormKernel<128>", "GemvKernel<...>", "add_kernel"]
    add = by_name["add_kernel"]
    assert add["count_per_launch"] == 2
    assert close(add["dur_us"], 0.85)  # (500 + 300 + 400 + 500) / 2
    assert close(add["exposed_us"], 0.8)  # (1000 + 0 + 400 + 200) / 2
    assert close(add["idle_us"], 0.25)
    assert close(sum(r["share"] for r in s["kernels"]), 1.0)
    positions = [(p["graph_node_id"], p["dur_us"], p["exposed_us"]) for p in s["positions"]]
    expected = [(11, 1.5, 1.5), (12, 1.35, 1.0), (13, 0.45, 0.7), (14, 0.4, 0.1)]
    assert [p[0] for p in positions] == [e[0] for e in expected]
    assert all(close(p[1], e[1]) and close(p[2], e[2]) for p, e in zip(positions, expected))


def test_skip_and_graph_choice():
    s = summary.summarise(kernels(), skip=1)
    assert s["num_launches"] == 1 and s["mean_gap_us"] is None
    assert close(s["mean_span_us"], 2.6)
    s = summary.summarise(kernels(), graph_id=9)
    assert s["num_launches"] == 1 and s["kernels"][0]["name"] == "RmsNormKernel<128>"


def test_short_name():
    assert summary.short_name(RMS) == "RmsNormKernel<128>"
    assert summary.short_name(GEMV) == "GemvKernel<...>"
    assert summary.short_name(GEMV, max_template=200) == (
        "GemvKernel<GemvTraits<__nv_bfloat16, 4, 8, true>, 128>")
    assert summary.short_name("void other::Copy(float*)") == "other::Copy"
    assert summary.short_name(ADD) == ADD


def test_main_prints_tables_and_writes_json():
    with tempfile.TemporaryDirectory() as directory:
        trace = write_trace(directory, TRACE)
        out = os.path.join(directory, "summary.json")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert summary.main(["--trace", trace, "--json", out, "--by-position",
                                 "--positions", "2"]) == 0
        with open(out) as f:
            written = json.load(f)
    text = printed.getvalue()
    assert "RmsNormKernel<128>" in text and "mean span 3.3 us" in text
    assert "between launches" in text and "memcpy HtoD" in text
    assert written["num_launches"] == 2 and len(written["positions"]) == 4
    position_rows = text.split(" pos  start us")[1].strip().splitlines()[1:]
    assert [row.split()[-1] for row in position_rows] == ["RmsNormKernel<128>", "GemvKernel<...>"]


if __name__ == "__main__":
    for name, test in list(globals().items()):
        if name.startswith("test_"):
            test()
            print(f"ok {name}")
