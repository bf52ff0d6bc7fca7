#!/usr/bin/env python3
"""fit_modern.py - fits the stack profiles' physical/software parameters
(docs/stacks.md, docs/accuracy-modern.md) on the modern public rows.

    tests/calibration/fit_modern.py [BUILD_DIR] [SOURCE]

SOURCE (e.g. torchtitan) runs and fits that source's rows only (its stack).

Parameters: per stack, the launch overhead per kernel (s); per stack and device
type, gemm_scale (multiplies the device type's GEMM gemm_max) and attn_scale
(multiplies the flash kernel's published efficiency). Never per row. Rows held
out (every fourth row of each source, modern_rows.c) are never fitted on; the
script prints both errors.

Method: psim-calibrate-modern runs every row four times (all scales 1; GEMM
scale 0.8; attention scale 0.5; launch overhead 60 us) and writes per-row
tokens/s. Per row the time per token is taken as linear in the parameters'
effects, T = T0 + G (1/g - 1) + A (1/a - 1) + K (L - L0), with G, A, K from
those runs; a grid search minimises the mean absolute error of 1/T on the fitted
rows. The result is then checked by the full program (the summary's fitted and
held-out columns), not by this linear model.
"""
import os
import subprocess
import sys
import tempfile

L0 = 21.56e-6  # the device types' launch overhead (sim/ir/device_types.c)
L1 = 60e-6
G1, A1 = 0.8, 0.5
# MLPerf GPT-3 rows: 54% too slow from the network model at 256-11,616 GPUs
# (docs/accuracy-modern.md), a defect of collectives, not of the stack: left out
# of the fit until that is fixed, so it cannot bend megatron-core's compute.
# The MoE rows (issue 21 item 6) are reported, never fitted on: the dense rows fix the scales.
EXCLUDED = {"mlperf-gpt3", "megatron-bridge-moe"}
ONLY = sys.argv[2] if len(sys.argv) > 2 else None


def run(build, extra):
    cache = os.environ.get("FIT_MODERN_CACHE")
    if cache:
        path = os.path.join(cache, "_".join(extra).replace("-", "") + ".tsv")
        if not os.path.exists(path):
            subprocess.run([os.path.join(build, "tests/calibration/psim-calibrate-modern"),
                            "--no-base", "--tsv", path] + extra, check=True,
                           stdout=subprocess.DEVNULL)
        return read_tsv(path)
    with tempfile.NamedTemporaryFile(suffix=".tsv", delete=False) as f:
        path = f.name
    cmd = [os.path.join(build, "tests/calibration/psim-calibrate-modern"), "--no-base",
           "--tsv", path] + extra + (["--only", ONLY] if ONLY else [])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = read_tsv(path)
    os.unlink(path)
    return rows


def read_tsv(path):
    rows = {}
    with open(path) as f:
        for line in f:
            src, ln, stack, typ, held, meas, pred, dup = line.rstrip("\n").split("\t")
            rows[(src, int(ln))] = (stack, typ, held == "1", float(meas), float(pred), dup == "1")
    return rows


def grid(lo, hi, n):
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def err(r, g, a, L):
    t = r["T0"] + r["G"] * (1 / g - 1) + r["A"] * (1 / a - 1) + r["K"] * (L - L0)
    return abs(1 / (t * r["meas"]) - 1) if t > 0 else 10.0


# Physical bounds: no GEMM beyond 90% of the dense peak (gemm_max x gemm_scale;
# gemm_max 0.70-0.80, sim/ir/device_types.c), flash kernels between 40% and
# 130% of the papers' efficiency.
G_RANGE, A_RANGE = (0.6, 1.28), (0.4, 1.3)
MIN_ROWS = 4  # a device type with fewer fitted rows takes its stack's shared scales


def fit_type(rows, L):
    best = None
    for g in grid(G_RANGE[0], G_RANGE[1], 35):
        for a in grid(A_RANGE[0], A_RANGE[1], 37):
            e = sum(err(r, g, a, L) for r in rows) / len(rows)
            if best is None or e < best[0]:
                best = (e, g, a)
    return best


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    # every run but the launch probe at L0: the model's T0, G and A are taken at L = L0
    # (without --launch a row runs at its stack's own overhead, 5 us for megatron-core,
    # and the fit credited it K x 16.6 us it never had; session 22)
    l0 = ["--launch", str(L0)]
    base = run(build, ["--gemm", "1", "--attn", "1"] + l0)
    rg = run(build, ["--gemm", str(G1), "--attn", "1"] + l0)
    ra = run(build, ["--gemm", "1", "--attn", str(A1)] + l0)
    rl = run(build, ["--gemm", "1", "--attn", "1", "--launch", str(L1)])
    data = {}
    for k, (stack, typ, held, meas, p0, dup) in base.items():
        if k[0] in EXCLUDED:
            continue
        if p0 <= 0 or dup or rg[k][4] <= 0 or ra[k][4] <= 0 or rl[k][4] <= 0:
            continue
        t0 = 1 / p0
        r = {"T0": t0, "G": (1 / rg[k][4] - t0) / (1 / G1 - 1), "A": (1 / ra[k][4] - t0) / (1 / A1 - 1),
             "K": (1 / rl[k][4] - t0) / (L1 - L0), "meas": meas, "held": held, "src": k[0]}
        data.setdefault(stack, {}).setdefault(typ, []).append(r)
    for stack, types in sorted(data.items()):
        best = None
        for L in grid(5e-6, 150e-6, 30):
            every = [r for rows in types.values() for r in rows if not r["held"]]
            shared = fit_type(every, L)[1:]
            tot, n, fits = 0.0, 0, {}
            for typ, rows in types.items():
                train = [r for r in rows if not r["held"]]
                fits[typ] = fit_type(train, L)[1:] if len(train) >= MIN_ROWS else shared
                tot += sum(err(r, fits[typ][0], fits[typ][1], L) for r in train)
                n += len(train)
            if best is None or tot / n < best[0]:
                best = (tot / n, L, fits, shared)
        e, L, fits, shared = best
        print(f"{stack}: launch_overhead {L * 1e6:.1f} us, shared gemm_scale {shared[0]:.3f} "
              f"attn_scale {shared[1]:.3f}, fitted rows mean abs {100 * e:.1f}%")
        for typ, (g, a) in sorted(fits.items()):
            rows = types[typ]
            tr = [err(r, g, a, L) for r in rows if not r["held"]]
            ho = [err(r, g, a, L) for r in rows if r["held"]]
            print(f"  {typ}: gemm_scale {g:.3f} attn_scale {a:.3f}  fitted {100 * sum(tr) / max(1, len(tr)):.1f}% "
                  f"({len(tr)}) held-out {100 * sum(ho) / max(1, len(ho)):.1f}% ({len(ho)})")


if __name__ == "__main__":
    main()
