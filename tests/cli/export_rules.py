#!/usr/bin/env python3
"""export_rules.py FORMAT MODEL EXPORT [WORLD] - checks an exported file against the runtime's
own rules and round-trips it to the model (tests/cli/export.sh; docs/export.md).

megatron: rules of NVIDIA/Megatron-LM d98e8a64dd (Megatron-Core 0.20.0):
  megatron/training/arguments.py validate_args: num_layers % pp == 0 unless
    --decoder-first/last-pipeline-num-layers; layers per stage % layers per virtual stage == 0;
    --sequence-parallel is turned off at tp 1; selective recompute takes no --recompute-method;
    num_experts % expert_model_parallel_size == 0.
  megatron/core/transformer/transformer_config.py: uneven PP (middle layers divide evenly over
    the middle stages); heads and query groups divide by tp; MoE biases only with ETP 1.
  megatron/core/transformer/moe/moe_layer.py: MoE with tp > 1 needs sequence parallelism.
  megatron/core/distributed/distributed_data_parallel.py: the bucket size is ignored without
    --overlap-grad-reduce (so it must not be written without it).
torchtitan: v0.2.2 torchtitan/config/job_config.py keys; train.py: global batch divisible by
  local batch x dp; module_fqns_per_model_part lists each layer once, in order.
deepspeed: DeepSpeed 0.19.6 deepspeed/runtime/config.py: train_batch_size =
  micro x accumulation x dp; no "pipeline" stages/partition keys (never read).
Round trip: every model fact the flags decide equals the model file's."""
import json, re, sys, tomllib

fmt, model_file, export = sys.argv[1:4]
# WORLD: devices, or DEVICES/PP for a pipelined DeepSpeed plan (dp = DEVICES / PP)
world_arg = sys.argv[4].split("/") if len(sys.argv) > 4 else ["0"]
world = int(world_arg[0])
pp_arg = int(world_arg[1]) if len(world_arg) > 1 else 1
model = json.load(open(model_file))
errors = []


def need(cond, msg):
    if not cond:
        errors.append(msg)


dims = model["dims"]
role = {}
for name, d in dims.items():
    role.setdefault(d.get("role"), []).append(d["size"])
facts = {"dtype": model.get("dtype", "fp32")}


def transformer_facts():
    block = next(o for o in model["ops"] if "block" in o)
    inner = block["ops"]
    outer = [o for o in model["ops"] if "block" not in o]
    kinds = {o["kind"] for o in inner + outer}
    fns = {o.get("fn") for o in inner + outer}
    weights = dict(model.get("weights", {}), **block.get("weights", {}))
    emb = next(o for o in outer if o["kind"] == "embedding")
    table = next(t for t in emb["in"] if t in weights)
    facts.update({
        "layers": block["repeat"], "hidden": role["hidden"][0], "heads": role["heads"][0],
        "kv": role["heads"][1] if len(role["heads"]) > 1 else role["heads"][0],
        "ffn": role["ffn"][0], "seq": role["sequence"][0], "batch": role["batch"][0],
        "rmsnorm": "rmsnorm" in kinds, "swiglu": "swiglu" in fns,
        "bias": any(o["kind"] == "matmul" and sum(t in weights for t in o["in"]) >= 2 for o in inner),
        "tied": any(o["kind"] == "matmul" and table in o["in"] for o in outer),
        "learned_pos": any(o.get("fn") == "add" and any(t in weights for t in o["in"]) for o in outer),
        "dropout": [o.get("p", 0.1) for o in inner + outer if o["kind"] == "dropout"],
        "experts": role.get("expert", [0])[0], "dtype": model.get("dtype", "fp32"),
    })


def megatron():
    transformer_facts()
    text = open(export).read()
    body = re.search(r"MEGATRON_ARGS=\((.*?)\n\)", text, re.S).group(1).split()
    a, i = {}, 0
    while i < len(body):
        k = body[i]
        if i + 1 < len(body) and not body[i + 1].startswith("--"):
            a[k], i = body[i + 1], i + 2
        else:
            a[k], i = True, i + 1
    tp, pp = int(a["--tensor-model-parallel-size"]), int(a["--pipeline-model-parallel-size"])
    L = int(a["--num-layers"])
    first, last = a.get("--decoder-first-pipeline-num-layers"), a.get("--decoder-last-pipeline-num-layers")
    if first is None and last is None:
        need(L % pp == 0, "layers %d not divisible by pp %d" % (L, pp))
    else:
        rest, n = L - int(first or 0) - int(last or 0), pp - (first is not None) - (last is not None)
        need(bool(rest) == bool(n) and (n == 0 or rest % n == 0), "uneven PP middle %d/%d" % (rest, n))
    if "--num-layers-per-virtual-pipeline-stage" in a:
        need((L // pp) % int(a["--num-layers-per-virtual-pipeline-stage"]) == 0, "virtual stages")
    need(not ("--sequence-parallel" in a and tp == 1), "--sequence-parallel at tp 1")
    need(not (a.get("--recompute-granularity") == "selective" and "--recompute-method" in a),
         "selective recompute with a method")
    heads = int(a["--num-attention-heads"])
    groups = int(a.get("--num-query-groups", heads))
    need(heads % tp == 0 and groups % tp == 0, "heads/groups not divisible by tp")
    need("--ddp-bucket-size" not in a or "--overlap-grad-reduce" in a, "bucket without overlap")
    E = int(a.get("--num-experts", 0))
    if E:
        need(E % int(a["--expert-model-parallel-size"]) == 0, "experts % ep")
        need(tp == 1 or "--sequence-parallel" in a, "MoE with tp > 1 needs sequence parallelism")
        need(tp == 1 or "--disable-bias-linear" in a, "MoE biases need ETP 1")
    # round trip
    f = facts
    need(L == f["layers"], "num-layers %d != %d" % (L, f["layers"]))
    need(int(a["--hidden-size"]) == f["hidden"], "hidden")
    need(heads == f["heads"] and groups == f["kv"], "heads / query groups")
    need(int(a["--ffn-hidden-size"]) == f["ffn"], "ffn")
    need(int(a["--seq-length"]) == f["seq"], "seq")
    need(int(a["--global-batch-size"]) == f["batch"], "global batch")
    need((a.get("--normalization") == "RMSNorm") == f["rmsnorm"], "normalization")
    need(("--swiglu" in a) == f["swiglu"], "swiglu")
    need(("--disable-bias-linear" in a) == (not f["bias"]), "bias")
    need(("--untie-embeddings-and-output-weights" in a) == (not f["tied"]), "tied embeddings")
    need((a.get("--position-embedding-type") == "learned_absolute") == f["learned_pos"], "positions")
    p = f["dropout"][0] if f["dropout"] else 0.0
    need(float(a["--hidden-dropout"]) == p and float(a["--attention-dropout"]) == p, "dropout")
    need(E == f["experts"], "experts %d != %d" % (E, f["experts"]))
    need(("--bf16" in a) == (f["dtype"] in ("bf16", "fp8")) and ("--fp16" in a) == (f["dtype"] == "fp16"),
         "precision")
    need(("--fp8-format" in a) == (f["dtype"] == "fp8"), "fp8")
    if world:
        need(tp * pp * (world // (tp * pp)) == world, "world size")


def torchtitan():
    transformer_facts()
    t = tomllib.load(open(export, "rb"))
    par, tr = t["parallelism"], t["training"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    need(tr["global_batch_size"] % (tr["local_batch_size"] * dp) == 0, "global batch % local x dp")
    need(tr["global_batch_size"] == facts["batch"] and tr["seq_len"] == facts["seq"], "batch/seq")
    if world:
        need(dp * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"] == world, "world")
    if par["pipeline_parallel_degree"] > 1:
        names = [n for part in par["module_fqns_per_model_part"] for n in part]
        want = ["tok_embeddings"] + ["layers.%d" % i for i in range(facts["layers"])] + ["norm", "output"]
        need(names == want, "module_fqns_per_model_part does not list every layer once in order")
        need(len(par["module_fqns_per_model_part"]) % par["pipeline_parallel_degree"] == 0, "parts % pp")
    need(t["model"]["name"] == "llama3", "model name")


def deepspeed():
    c = json.load(open(export))
    need("pipeline" not in c, "a pipeline section DeepSpeed never reads")
    dp = world // pp_arg
    if dp:
        need(c["train_batch_size"] == c["train_micro_batch_size_per_gpu"] *
             c["gradient_accumulation_steps"] * dp, "train_batch_size != micro x accum x dp")
    want = "fp32" if facts["dtype"] in ("bf16", "fp8", "fp32") else facts["dtype"]
    need(c["data_types"]["grad_accum_dtype"] == want, "grad_accum_dtype")


{"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}[fmt]()
print("\n".join(errors) if errors else "ok")
sys.exit(1 if errors else 0)
