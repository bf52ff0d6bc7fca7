#!/usr/bin/env python3
"""export_specs.py MODEL PLAN GSPMD OPS - checks that a gspmd export lays out every op of a plan
given per op (Alpa, MCMC) as the plan places it: for each op with a per-op configuration, its
output tensor's PartitionSpec names mesh axes whose sizes multiply to the op's split of that dim,
and for every device of the op, its coordinates on those axes (mixed radix, major first, over
the mesh's device_ids) give the shard index the plan's device list gives it. OPS: ops (comma
separated) that must be among those checked. Prints "N ops checked" or each mismatch; exit 1 on
any. (tests/cli/export.sh, tests/cli/export_gspmd.sh; docs/export.md, gspmd.)"""
import json, sys
model, plan, exp = (json.load(open(f)) for f in sys.argv[1:4])
dims, outs = {}, {}  # tensor -> dims; op -> its output tensor
for sec in ("inputs", "weights", "tensors"):
    dims.update({k: v["dims"] for k, v in model.get(sec, {}).items()})
for op in model["ops"]:
    if "block" not in op:
        outs[op["name"]] = op["out"][0]
        continue
    inner = {k: v["dims"] for k, v in op.get("tensors", {}).items()}
    for r in range(op["repeat"]):
        for o in op["ops"]:
            t = o["out"][0]
            if t in inner and t not in op["outputs"]:
                name = "%s.%d.%s" % (op["block"], r, t)
                outs["%s.%d.%s" % (op["block"], r, o["name"])], dims[name] = name, inner[t]
mesh, specs = exp["mesh"], exp["partition_specs"]
names, shape, ids = mesh["axis_names"], mesh["shape"], mesh["device_ids"]
size = dict(zip(names, shape))
def mesh_coords(dev):
    p, c = ids.index(dev), {}
    for a in reversed(range(len(shape))):
        c[names[a]], p = p % shape[a], p // shape[a]
    return c
def devices(v):
    return list(range(v["first"], v["first"] + v["count"])) if isinstance(v, dict) else v
checked, bad = [], []
for name, cfg in plan["strategy"].get("ops", {}).items():
    if name not in outs:
        continue
    t, split = outs[name], [(d, n) for d, n in cfg["split"].items() if n > 1]
    for k, d in enumerate(dims[t]):
        e = specs[t][k]
        axes = [] if e is None else [e] if isinstance(e, str) else e
        n = 1
        for a in axes:
            n *= size[a]
        ok = n == dict(split).get(d, 1)
        for j, dev in enumerate(devices(cfg["devices"])):
            s, shard = j // cfg.get("replicas", 1), {}
            for dn, deg in reversed(split):
                shard[dn], s = s % deg, s // deg
            c, x = mesh_coords(dev), 0
            for a in axes:
                x = x * size[a] + c[a]
            ok = ok and x == shard.get(d, 0)
        if not ok:
            bad.append("%s: %s dim %s: spec %s, plan split %s" % (name, t, d, e, cfg["split"]))
    checked.append(name)
bad += ["op %s not checked" % o for o in sys.argv[4].split(",") if o and o not in checked]
print("\n".join(bad) if bad else "%d ops checked" % len(checked))
sys.exit(1 if bad else 0)
