#!/usr/bin/env bash
# tests/bench/check_time.sh - whole-process time of `plansim check MODEL` (issue 19 target:
# <= 20 ms), beside `plansim --version` (the start-up floor: dynamic linking and library
# constructors) and /bin/true (the cost of spawning a process at all).
#
# usage: tests/bench/check_time.sh [MODEL [RUNS [BUILD_DIR]]]
#        (default models/gpt-1t.json, the largest shipped model; 50 runs; build dir "build")
# Prints, per command, the median and minimum wall time, the median CPU time (user + sys: less
# sensitive to other load on a shared machine) and the peak RSS; then "check: OK" or "check:
# OVER" against the 20 ms target (median wall time). Exits 1 when over.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=${1:-$ROOT/models/gpt-1t.json}
RUNS=${2:-50}
BUILD=${3:-$ROOT/build}
PLANSIM="$BUILD/cli/plansim"
[ -x "$PLANSIM" ] || { echo "check_time: $PLANSIM not built (meson compile -C $BUILD)" >&2; exit 2; }
exec python3 - "$PLANSIM" "$MODEL" "$RUNS" <<'PY'
import os, resource, statistics, subprocess, sys, time
plansim, model, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
TARGET_S = 0.020

def peak_rss_kib(argv):
    """Peak RSS of one run, KiB, by GNU time (a child forked from Python would report
    Python's high-water mark, which survives exec); 0 when /usr/bin/time is absent."""
    if not os.access("/usr/bin/time", os.X_OK):
        return 0
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + argv, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    return int(p.stderr.strip().splitlines()[-1])

def measure(argv):
    wall, cpu = [], []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            sys.exit("check_time: %s exited with %d" % (" ".join(argv), p.returncode))
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return statistics.median(wall), min(wall), statistics.median(cpu), peak_rss_kib(argv)

measure([plansim, "check", model])  # warm the page cache
rows = [("/bin/true", ["/bin/true"]), ("plansim --version", [plansim, "--version"]),
        ("plansim check " + os.path.basename(model), [plansim, "check", model])]
print("%-34s %10s %10s %10s %9s" % ("command (%d runs)" % runs, "median ms", "min ms", "cpu ms", "RSS MiB"))
for name, argv in rows:
    med, low, cpu, rss = measure(argv)
    print("%-34s %10.2f %10.2f %10.2f %9.1f" % (name, 1e3 * med, 1e3 * low, 1e3 * cpu, rss / 1024))
print("check: %s (median %.1f ms, target %.0f ms)" % ("OK" if med <= TARGET_S else "OVER", 1e3 * med, 1e3 * TARGET_S))
sys.exit(0 if med <= TARGET_S else 1)
PY
