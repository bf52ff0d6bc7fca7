#!/usr/bin/env python3
"""faults-compare.py - the all-reduce vs parameter-server comparison of docs/faults.md.

Runs `plansim simulate --iterations N --json` for ResNet-50 (batch 256) on one DGX-1 node (8 V100,
NVLink hybrid cube mesh: the first node of topologies/dgx1-v100-x8.json), 8 data-parallel
workers, under
all-reduce (NCCL's usual algorithm) and parameter servers (4 shards co-located on GPUs 0, 2,
4, 6, 2 replicas each) in sync, backup_k = 7 and async modes, with 0, 1 and 2 stragglers
(GPUs 3 and 5, 2x slower) and one failure (a worker, GPU 5; or a server, GPU 2, about 10.5
iterations in); prints the markdown tables and writes docs/faults.svg (throughput relative
to each method's healthy run).

usage: scripts/faults-compare.py [PLANSIM] (default build/cli/plansim)
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANSIM = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/cli/plansim")
MODEL = os.path.join(ROOT, "models/resnet50.json")
CLUSTER = os.path.join(ROOT, "topologies/dgx1-v100-x8.json")
ITERS = 40
SERVERS = [0, 2, 4, 6]
METHODS = [
    ("all-reduce (ring/hierarchical)", {"allreduce": "auto"}),
    ("PS sync", {"parameter_server": {"servers": SERVERS, "mode": "sync", "replicas": 2}}),
    ("PS backup k=7", {"parameter_server": {"servers": SERVERS, "mode": "backup",
                                             "backup_k": 7, "replicas": 2}}),
    ("PS async", {"parameter_server": {"servers": SERVERS, "mode": "async", "replicas": 2}}),
]
SCENARIOS = [
    ("healthy", []),
    ("1 straggler", ["--slow", "3=2"]),
    ("2 stragglers", ["--slow", "3=2", "--slow", "5=2"]),
    ("worker fails", ["--fail", "5@%g"]),   # %g: 10.5 healthy iterations of the method
    ("server fails", ["--fail", "2@%g"]),
]


def simulate(strategy, extra):
    cmd = [PLANSIM, "simulate", MODEL, CLUSTER, strategy, "--json", "--iterations", str(ITERS)]
    out = subprocess.run(cmd + extra, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mi, (name, sync) in enumerate(METHODS):
            st = {"format": "plansim.strategy/1",
                  "mesh": {"axes": {"dp": 8}, "devices": {"first": 0, "count": 8}},
                  "layout": {"batch": "dp"}, "pipeline": {"micro_batches": 1},
                  "overlap_grad_reduce": True, "gradient_sync": sync}
            path = os.path.join(tmp, "s%d.json" % mi)
            with open(path, "w") as f:
                json.dump(st, f)
            for sc, extra in SCENARIOS:
                if "%g" in " ".join(extra):
                    t = 10.5 * per_iter(results[(name, "healthy")])
                    extra = [a % t if "%g" in a else a for a in extra]
                results[(name, sc)] = simulate(path, extra)
    print_tables(results)
    write_svg(results, os.path.join(ROOT, "docs/faults.svg"))


def per_iter(r):
    it = r["iterations"]
    return it["distribution"]["p50_s"]


def print_tables(results):
    print("Iteration time (median over %d iterations, s) and throughput over the run "
          "(samples/s):\n" % ITERS)
    print("| method | " + " | ".join(sc for sc, _ in SCENARIOS[:3]) + " |")
    print("|---|" + "---|" * 3)
    for name, _ in METHODS:
        cells = []
        for sc, _ in SCENARIOS[:3]:
            r = results[(name, sc)]
            cells.append("%.3f s, %.0f/s" % (per_iter(r), r["iterations"]["samples_per_s"]))
        print("| %s | %s |" % (name, " | ".join(cells)))
    for sc, _ in SCENARIOS[3:]:
        print("\n%s after 10.5 healthy iterations (%d iterations; defaults: detection 30 s, "
              "rebuild 5 s, fail-over 1 s, checkpoint every 100 iterations):\n"
              % (sc.capitalize(), ITERS))
        print("| method | recovery model | lost (s) | recovery (s) | iteration before -> after (s) "
              "| workers after | run total (s) | samples/s |")
        print("|---|---|---|---|---|---|---|---|")
        for name, _ in METHODS:
            it = results[(name, sc)]["iterations"]
            e = it["events"][0]
            print("| %s | %s | %.3f | %.2f | %.3f -> %.3f | %d | %.1f | %.0f |" % (
                name, e["recovery"], e["lost_s"], e["recovery_s"], e["iteration_before_s"],
                e["iteration_after_s"], e["workers_after"], it["total_s"], it["samples_per_s"]))


def write_svg(results, path):
    w, h, left, top, bottom = 760, 360, 60, 40, 80
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
    groups = len(SCENARIOS)
    gw = (w - left - 20) / groups
    bw = gw / (len(METHODS) + 1)
    ph = h - top - bottom
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">ResNet-50 on one DGX-1 node (8 V100): throughput '
           'over %d iterations relative to the healthy run of the same method</text>'
           % (left, ITERS)]
    for k in range(0, 6):
        y = top + ph - ph * k / 5
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, w - 20, y, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (left - 5, y + 4, k / 5))
    for gi, (sc, _) in enumerate(SCENARIOS):
        x0 = left + gi * gw
        for mi, (name, _) in enumerate(METHODS):
            base = results[(name, "healthy")]["iterations"]["samples_per_s"]
            v = results[(name, sc)]["iterations"]["samples_per_s"] / base
            bh = ph * min(v, 1.0)
            x = x0 + bw * (mi + 0.5)
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">'
                       '<title>%s, %s: %.2f</title></rect>'
                       % (x, top + ph - bh, bw * 0.9, bh, colors[mi], name, sc, v))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (x0 + gw / 2, top + ph + 16, sc))
    for mi, (name, _) in enumerate(METHODS):
        x = left + mi * 175
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/>' % (x, h - 30, colors[mi]))
        out.append('<text x="%d" y="%d">%s</text>' % (x + 14, h - 21, name))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
