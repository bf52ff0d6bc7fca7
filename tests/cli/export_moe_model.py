#!/usr/bin/env python3
"""export_moe_model.py LLAMA.json EXPERTS TOP_K dropless|CF > MOE.json - a LLaMA-shaped
mixture-of-experts model for the export tests (tests/cli/export_matrix.sh, export_readme.sh):
the model `plansim model llama` writes, with every layer's SwiGLU FFN replaced by a router
(softmax over the experts), a dispatch, SwiGLU experts ([expert, hidden, ffn] weights) and a
combine, as models/gen_transformer.c builds the moe family's GeLU experts (docs/model.md:
dispatch [batch, expert, capacity, hidden]). "dropless" sets the dispatch/combine attribute
dropless (the capacity dim holds the mean routed tokens per expert, top_k x seq / experts);
a number CF is a capacity factor: capacity = ceil(CF x top_k x seq / experts)."""
import json, math, sys

src, experts, top_k, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
m = json.load(open(src))
seq = m["dims"]["seq"]["size"]
cap = top_k * seq / experts if mode == "dropless" else math.ceil(float(mode) * top_k * seq / experts)
m["name"] = m["name"] + "-moe"
m["dims"]["expert"] = {"size": experts, "role": "expert"}
m["dims"]["capacity"] = {"size": int(math.ceil(cap))}
bech, becf = ["batch", "expert", "capacity", "hidden"], ["batch", "expert", "capacity", "ffn"]
for op in m["ops"]:
    if "block" not in op:
        continue
    w, t = op["weights"], op["tensors"]
    for k in ("w_gate", "w_up", "w_down"):
        del w[k]
    for k in ("gate", "up", "act"):
        del t[k]
    w.update({"w_router": {"dims": ["hidden", "expert"]}, "w_gate": {"dims": ["expert", "hidden", "ffn"]},
              "w_up": {"dims": ["expert", "hidden", "ffn"]}, "w_down": {"dims": ["expert", "ffn", "hidden"]}})
    t.update({"router": {"dims": ["batch", "seq", "expert"]}, "gates": {"dims": ["batch", "seq", "expert"]},
              "xe": {"dims": bech}, "ge": {"dims": becf}, "ue": {"dims": becf}, "ae": {"dims": becf},
              "ye": {"dims": bech}})
    extra = {"top_k": top_k}
    if mode == "dropless":
        extra["dropless"] = True
    ffn = [
        {"name": "router", "kind": "matmul", "in": ["ln2", "w_router"], "out": ["router"]},
        {"name": "gates", "kind": "softmax", "in": ["router"], "out": ["gates"], "axis": "expert"},
        dict({"name": "dispatch", "kind": "dispatch", "in": ["ln2", "gates"], "out": ["xe"]}, **extra),
        {"name": "gate", "kind": "matmul", "in": ["xe", "w_gate"], "out": ["ge"]},
        {"name": "up", "kind": "matmul", "in": ["xe", "w_up"], "out": ["ue"]},
        {"name": "swiglu", "kind": "elementwise", "in": ["ge", "ue"], "out": ["ae"], "fn": "swiglu"},
        {"name": "down", "kind": "matmul", "in": ["ae", "w_down"], "out": ["ye"]},
        dict({"name": "combine", "kind": "combine", "in": ["ye", "gates"], "out": ["h3"]}, **extra),
    ]
    i = next(k for k, o in enumerate(op["ops"]) if o["name"] == "gate")
    j = next(k for k, o in enumerate(op["ops"]) if o["name"] == "down")
    op["ops"][i:j + 1] = ffn
json.dump(m, sys.stdout, indent=1)
print()
