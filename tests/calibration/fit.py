#!/usr/bin/env python3
"""fit.py - fits the simulator's physical parameters to ../shared/calibration.

Runs psim-calibrate (the C simulator itself, no model of it) with --param
overrides and minimises, by Nelder-Mead, the mean Korthikanti et al. 2022
error + the vTrain mean absolute percentage error (every STRIDE-th row) + half
the Table 4 layer-time error, with a penalty for any Korthikanti row beyond 4%.
The parameters are physical ones shared by every row: GEMM efficiency
ceiling, memory-bound efficiency, per-kernel device cost, host issue cost per
call, collective rank skew per peer, per-iteration overhead. No per-row terms.

  tests/calibration/fit.py BUILD/tests/calibration/psim-calibrate [--evals N] [--stride N]
"""
import subprocess
import sys

NAMES = ["gemm_max", "mem", "launch_s", "host_issue_s", "coll_sync_s", "iteration_s"]
START = [0.7738, 0.8491, 21.56e-6, 67.41e-6, 11.49e-6, 5.033e-3]
LOW = [0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
HIGH = [0.95, 1.0, 60e-6, 150e-6, 40e-6, 0.05]


def objective(exe, x, stride, log):
    for v, lo, hi in zip(x, LOW, HIGH):
        if not lo <= v <= hi:
            return 1e9
    args = [exe, "--vtrain-stride", str(stride), "--no-memory"]
    for n, v in zip(NAMES, x):
        args += ["--param", "%s=%r" % (n, v)]
    out = subprocess.run(args, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("SUMMARY")][-1].split()
    f = dict(zip(line[1::2], map(float, line[2::2])))
    j = (f["korthikanti_mean"] + 2 * max(0.0, f["korthikanti_max"] - 0.04) + f["vtrain_mape"]
         + 0.5 * f["layer_mean"])
    print("%.5f %s %s" % (j, " ".join("%.4g" % v for v in x), line[1:]), file=log, flush=True)
    return j


def nelder_mead(f, x0, evals):
    n = len(x0)
    pts = [list(x0)]
    for i in range(n):
        p = list(x0)
        p[i] *= 1.15 if p[i] else 1.0
        if p[i] == 0:
            p[i] = (HIGH[i] - LOW[i]) * 0.1
        pts.append(p)
    vals = [f(p) for p in pts]
    used = len(pts)
    while used < evals:
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        c = [sum(p[i] for p in pts[:-1]) / n for i in range(n)]
        r = [c[i] + (c[i] - pts[-1][i]) for i in range(n)]
        fr = f(r)
        used += 1
        if fr < vals[0]:
            e = [c[i] + 2 * (c[i] - pts[-1][i]) for i in range(n)]
            fe = f(e)
            used += 1
            pts[-1], vals[-1] = (e, fe) if fe < fr else (r, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = r, fr
        else:
            k = [c[i] + 0.5 * (pts[-1][i] - c[i]) for i in range(n)]
            fk = f(k)
            used += 1
            if fk < vals[-1]:
                pts[-1], vals[-1] = k, fk
            else:
                for j in range(1, n + 1):
                    pts[j] = [pts[0][i] + 0.5 * (pts[j][i] - pts[0][i]) for i in range(n)]
                    vals[j] = f(pts[j])
                    used += 1
    best = min(range(len(vals)), key=lambda i: vals[i])
    return pts[best], vals[best]


def main():
    exe = sys.argv[1]
    evals = int(sys.argv[sys.argv.index("--evals") + 1]) if "--evals" in sys.argv else 60
    stride = int(sys.argv[sys.argv.index("--stride") + 1]) if "--stride" in sys.argv else 7
    x, j = nelder_mead(lambda x: objective(exe, x, stride, sys.stdout), START, evals)
    print("BEST %.5f" % j, " ".join("%s=%r" % (n, v) for n, v in zip(NAMES, x)))


if __name__ == "__main__":
    main()
