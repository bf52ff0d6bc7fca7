"""Normalises one corpus case's output (tests/corpus/run): OUT ERR STATUS -> JSON on stdout.

Keeps every prediction at the precision plansim prints it and drops only what varies between runs of the same
build: the wall-clock fields of a simulation (sim.build_s, sim.simulate_s). A failed case is
recorded as its exit status and standard error."""
import json
import sys

WALL_CLOCK = ("build_s", "simulate_s")


def strip_wall_clock(node):
    if isinstance(node, dict):
        sim = node.get("sim")
        if isinstance(sim, dict):
            for key in WALL_CLOCK:
                sim.pop(key, None)
        for value in node.values():
            strip_wall_clock(value)
    elif isinstance(node, list):
        for value in node:
            strip_wall_clock(value)


def main():
    out_path, err_path, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if status != 0:
        with open(err_path, errors="replace") as f:
            result = {"exit": status, "stderr": f.read()}
    else:
        with open(out_path) as f:
            result = json.load(f)
        strip_wall_clock(result)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


main()
