#!/usr/bin/env python3
"""export_rules.py FORMAT MODEL EXPORT [WORLD [PLAN]] - checks an exported file against the runtime's
own rules and round-trips it to the model (tests/cli/export.sh; docs/export.md).

megatron: rules of NVIDIA/Megatron-LM d98e8a64dd (Megatron-Core 0.20.0):
  megatron/training/arguments.py validate_args: num_layers % pp == 0 unless
    --decoder-first/last-pipeline-num-layers; layers per stage % layers per virtual stage == 0;
    --sequence-parallel is turned off at tp 1; selective recompute takes no --recompute-method;
    megatron/core/transformer/transformer_config.py __post_init__: full recompute needs
    --recompute-method uniform or block and --recompute-num-layers, selective takes no
    --recompute-num-layers (round trip with PLAN: granularity, method and count are the plan's);
    num_experts % expert_model_parallel_size == 0; world % (tp x pp x cp) == 0 (total_model_size);
    --expert-tensor-parallel-size defaults to tp; seq_length % (2 cp) == 0 when cp > 1;
    --moe-grouped-gemm needs compute capability >= 8 (every GPU plansim ships is).
  megatron/core/parallel_state.py initialize_model_parallel: world % (etp x ep x pp) == 0.
  megatron/core/transformer/transformer_config.py: uneven PP (middle layers divide evenly over
    the middle stages); heads and query groups divide by tp; MoE biases only with ETP 1.
  megatron/core/transformer/moe/moe_layer.py: MoE with tp > 1 needs sequence parallelism.
  megatron/core/distributed/distributed_data_parallel.py: the bucket size is ignored without
    --overlap-grad-reduce (so it must not be written without it).
  arguments.py validate_args (lines 1024-1029): --overlap-param-gather needs
    --use-distributed-optimizer (or --use-megatron-fsdp) and --overlap-grad-reduce; round trip
    with PLAN: written exactly when the plan's overlap_param_gather acts (ZeRO 1-2).
  Megatron-FSDP (arguments.py validate_args ~1118-1188, 1675; --use-megatron-fsdp from
    megatron/training/config/common_config.py DistributedInitConfig; --data-parallel-sharding-
    strategy {no_shard, optim, optim_grads, optim_grads_params}): v1 runs with the distributed
    optimizer; --ckpt-format fsdp_dtensor is required by and requires --use-megatron-fsdp;
    gradient accumulation fusion off under optim_grads / optim_grads_params
    (docs/discussions/megatron-fsdp-user-guide); the ZeRO stage read back: optim_grads 2,
    optim_grads_params 3, else --use-distributed-optimizer 1, else 0.
torchtitan: v0.2.2 torchtitan/config/job_config.py keys; train.py: global batch divisible by
  local batch x dp; module_fqns_per_model_part lists each layer once, in order;
  distributed/parallel_dims.py: seq_len % (tp x 2 cp) == 0 (seq_len_divisor), ep > 1 needs
  etp == tp or 1; models/qwen3 (the MoE model: dropless SwiGLU experts in every layer,
  __init__.py's TrainSpec has pipelining_fn=None) and its Qwen3ModelArgs fields.
megatron MoE: transformer_config.py: --moe-pad-expert-input-to-capacity needs
  --moe-expert-capacity-factor (None: dropless); arguments.py: experts % ep == 0.
deepspeed: DeepSpeed 0.19.6 deepspeed/runtime/config.py: train_batch_size =
  micro x accumulation x dp; no "pipeline" stages/partition keys (never read).
gspmd: JAX jax-v0.11.0 Mesh / PartitionSpec / NamedSharding rules (gspmd() below).
Round trip: every model fact the flags decide equals the model file's; with PLAN, the
parallel degrees (tp, pp, dp, ep, etp, cp of the plan's template or template_info) equal the
export's."""
import json, re, shlex, sys, tomllib

fmt, model_file, export = sys.argv[1:4]
# WORLD: devices, or DEVICES/PP for a pipelined DeepSpeed plan (dp = DEVICES / PP)
world_arg = sys.argv[4].split("/") if len(sys.argv) > 4 else ["0"]
world = int(world_arg[0])
pp_arg = int(world_arg[1]) if len(world_arg) > 1 else 1
model = json.load(open(model_file))
errors = []
plan_layout = None
plan_recompute = None
plan_zero = None
plan_replicate = 1
plan_fp8 = None  # the plan's "fp8" (None: the model's own FP8 matmuls)
plan_param_gather = None  # the plan's overlap_param_gather where it acts (ZeRO 1-2)
first_last = {}
if len(sys.argv) > 5:  # the plan's degrees: the template's keys or the written template_info
    st = json.load(open(sys.argv[5]))["strategy"]
    ti = st.get("template_info", st)
    plan_layout = {k: ti.get(k, 1) for k in ("tp", "pp", "dp", "ep", "cp")}
    plan_layout["etp"] = ti.get("etp", plan_layout["tp"])
    plan_fp8 = st.get("fp8")
    plan_zero = ti.get("zero", st.get("zero", 0))  # a searched plan: the explicit form's key
    plan_param_gather = bool(st.get("overlap_param_gather")) and plan_zero in (1, 2)
    first_last = {k: ti.get(k, 0) for k in ("first_stage_layers", "last_stage_layers")}
    # HSDP: a template's dp_shard (dp / dp_shard replicas), the explicit form's dp_replicate
    plan_replicate = (plan_layout["dp"] // ti["dp_shard"] if "dp_shard" in ti
                      else st.get("dp_replicate", 1))
    rc = st.get("recompute", "none")  # plansim's defaults: full is uniform 1 without the keys
    plan_recompute = (rc, st.get("recompute_method", "uniform") if rc == "full" else None,
                      int(st.get("recompute_num_layers", 1)) if rc == "full" else None)


def need(cond, msg):
    if not cond:
        errors.append(msg)


dims = model["dims"]
role = {}
for name, d in dims.items():
    role.setdefault(d.get("role"), []).append(d["size"])
facts = {"dtype": model.get("dtype", "fp32")}


def model_has_fp8_linears():  # a block's matmul with "fp8": true (linear_dtype fp8)
    return any(o.get("kind") == "matmul" and o.get("fp8") for b in model["ops"] if "block" in b
               for o in b["ops"])


def precision():
    """The model's dtype, or "fp8" for FP8 GEMMs over a BF16 model (the plan's "fp8", else the
    model's linears), as export_facts.c reads it (psim_strategy_op_fp8)."""
    dt = model.get("dtype", "fp32")
    if dt == "bf16" and (plan_fp8 if plan_fp8 is not None else model_has_fp8_linears()):
        return "fp8"
    return dt


facts["dtype"] = precision()


role_of_heads = {n for n, d in dims.items() if d.get("role") == "heads"}


def tensor_dims(block, name):
    t = dict(model.get("tensors", {}), **block.get("tensors", {})).get(name, {})
    return t.get("dims", [])


def block_is_mtp(b):  # a block with its own loss: a multi-token prediction module (gen_decoder.c)
    return any(o["kind"] == "cross_entropy" for o in b["ops"])


def ffn_width(block, o):  # the ffn-role width of an op's output, 0 when it has none
    return next((dims[d]["size"] for d in tensor_dims(block, o["out"][0])
                 if dims.get(d, {}).get("role") == "ffn"), 0)


def moe_facts(blocks):
    """Per transformer layer (blocks in order): MoE when it has a dispatch; the FFN beside the
    experts of a MoE layer is the shared expert; the expert FFN width; the router's gates."""
    pattern, shared, moe_ffn, sigmoid = [], 0, 0, False
    for b in blocks:
        moe = any(o["kind"] == "dispatch" for o in b["ops"])
        pattern += [int(moe)] * b["repeat"]
        for o in b["ops"]:
            expert = any(dims.get(d, {}).get("role") == "expert" for d in tensor_dims(b, o["out"][0]))
            if o["kind"] == "matmul" and ffn_width(b, o):
                if expert:
                    moe_ffn = ffn_width(b, o)
                elif moe:
                    shared = ffn_width(b, o)
            sigmoid = sigmoid or (expert and o.get("fn") == "sigmoid")
    return {"moe_pattern": pattern, "shared_ffn": shared, "moe_ffn": moe_ffn,
            "sigmoid": sigmoid}


def transformer_facts():
    blocks = [o for o in model["ops"] if "block" in o]
    main = [b for b in blocks if not block_is_mtp(b)]
    inner = [o for b in blocks for o in b["ops"]]
    outer = [o for o in model["ops"] if "block" not in o]
    kinds = {o["kind"] for o in inner + outer}
    fns = {o.get("fn") for o in inner + outer}
    weights = dict(model.get("weights", {}))
    for b in blocks:
        weights.update(b.get("weights", {}))
    emb = next(o for o in outer if o["kind"] == "embedding")
    table = next(t for t in emb["in"] if t in weights)
    size = lambda n: dims[n]["size"] if n in dims else 0
    facts.update({
        "layers": sum(b["repeat"] for b in main), "hidden": role["hidden"][0], "heads": role["heads"][0],
        "kv": role["heads"][1] if len(role["heads"]) > 1 else role["heads"][0],
        "ffn": role["ffn"][0], "seq": role["sequence"][0], "batch": role["batch"][0],
        "rmsnorm": "rmsnorm" in kinds, "swiglu": "swiglu" in fns,
        "bias": any(o["kind"] == "matmul" and sum(t in weights for t in o["in"]) >= 2 for o in inner),
        "tied": any(o["kind"] == "matmul" and table in o["in"] for o in outer),
        "learned_pos": any(o.get("fn") == "add" and any(t in weights for t in o["in"]) for o in outer),
        "dropout": [o.get("p", 0.1) for o in inner + outer if o["kind"] == "dropout"],
        "experts": role.get("expert", [0])[0], "dtype": precision(),
        "dropless": any(o.get("dropless", False) for o in inner if o["kind"] == "dispatch"),
        "top_k": next((o["top_k"] for o in inner if o["kind"] == "dispatch"), 0),
        "head_dim": role.get("head_dim", [0])[0], "vocab": role["vocab"][0],
        "qk_norm": any(o["kind"] in ("rmsnorm", "layernorm") and any(
            d in role_of_heads for d in tensor_dims(b, o["out"][0])) for b in blocks for o in b["ops"]),
        # multi-head latent attention: the dims gen_decoder.c names (docs/model.md)
        "mla": "kv_lora" in dims, "q_lora": size("q_lora"), "kv_lora": size("kv_lora"),
        "qk_head": size("nope"), "qk_rope": size("rope"), "v_head": size("kv_b") - size("nope"),
        "mtp": sum(b["repeat"] for b in blocks if block_is_mtp(b)),
    })
    facts.update(moe_facts(main))


def freq_pattern(v, L):
    """arguments.py moe_freq_type: an int N (a MoE layer every N) or a Python list expression
    of 0/1 (digits, brackets, *, +, commas and parentheses only); returns the per-layer list."""
    if isinstance(v, list):
        return v
    v = str(v)
    if "[" not in v:
        return [1 if i % int(v) == 0 else 0 for i in range(L)]
    need(re.fullmatch(r"[\[\]0-9*+(), ]+", v) is not None, "moe-layer-freq %r is no list expression" % v)
    return eval(v, {"__builtins__": {}}) if re.fullmatch(r"[\[\]0-9*+(), ]+", v) else []


def megatron():
    transformer_facts()
    text = open(export).read()
    body = shlex.split(re.search(r"MEGATRON_ARGS=\((.*?)\n\)", text, re.S).group(1))
    a, i = {}, 0
    while i < len(body):
        k = body[i]
        if i + 1 < len(body) and not body[i + 1].startswith("--"):
            a[k], i = body[i + 1], i + 2
        else:
            a[k], i = True, i + 1
    megatron_core(a)


def megatron_core(a):
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
    gran = a.get("--recompute-granularity")
    need(gran in (None, "full", "selective"), "recompute granularity %s" % gran)
    need(gran != "full" or (a.get("--recompute-method") in ("uniform", "block") and
                            "--recompute-num-layers" in a), "full recompute without method and count")
    need(gran == "full" or "--recompute-num-layers" not in a, "a recompute count without full")
    if plan_recompute:
        got = (gran or "none", a.get("--recompute-method") if gran == "full" else None,
               int(a.get("--recompute-num-layers", -1)) if gran == "full" else None)
        need(got == plan_recompute, "recompute %s != the plan's %s" % (got, plan_recompute))
    heads = int(a["--num-attention-heads"])
    groups = int(a.get("--num-query-groups", heads))
    need(heads % tp == 0 and groups % tp == 0, "heads/groups not divisible by tp")
    need("--ddp-bucket-size" not in a or "--overlap-grad-reduce" in a, "bucket without overlap")
    need("--overlap-param-gather" not in a or (
        ("--use-distributed-optimizer" in a or "--use-megatron-fsdp" in a) and
        "--overlap-grad-reduce" in a), "--overlap-param-gather without the distributed optimizer "
         "and --overlap-grad-reduce")
    if plan_param_gather is not None:
        need(("--overlap-param-gather" in a) == plan_param_gather,
             "--overlap-param-gather %s, the plan's %s" % ("--overlap-param-gather" in a,
                                                           plan_param_gather))
    fsdp_rules(a)
    E = int(a.get("--num-experts", 0))
    cp = int(a.get("--context-parallel-size", 1))
    ep = int(a.get("--expert-model-parallel-size", 1))
    etp = int(a.get("--expert-tensor-parallel-size", tp))  # arguments.py: None means tp
    need(cp == 1 or int(a["--seq-length"]) % (2 * cp) == 0, "seq-length % (2 cp)")
    need(ep == 1 or E > 0, "expert parallelism without --num-experts")
    if world:
        need(world % (tp * pp * cp) == 0, "world %d %% (tp x pp x cp)" % world)
        need(world % (etp * ep * pp) == 0, "world %d %% (etp x ep x pp)" % world)
    if plan_layout:
        dp = world // (tp * pp * cp) if world else plan_layout["dp"]
        got = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "etp": etp if E else plan_layout["etp"],
               "cp": cp}
        need(got == plan_layout, "degrees %s != the plan's %s" % (got, plan_layout))
    if E:
        need(E % ep == 0, "experts % ep")
        need(tp == 1 or "--sequence-parallel" in a, "MoE with tp > 1 needs sequence parallelism")
        need(etp == 1 or "--disable-bias-linear" in a, "MoE biases need ETP 1")
        # transformer_config.py: padding to capacity needs a capacity factor (None: dropless)
        need(not a.get("--moe-pad-expert-input-to-capacity") or
             a.get("--moe-expert-capacity-factor") is not None, "padding without a capacity")
        need((a.get("--moe-expert-capacity-factor") is None) == facts["dropless"],
             "capacity factor %s for a %s MoE" % (a.get("--moe-expert-capacity-factor"),
                                                  "dropless" if facts["dropless"] else "capacity"))
        need(int(a["--moe-router-topk"]) == facts["top_k"], "top-k")
        moe_rules(a, E, L)
    mla_rules(a, heads)
    # transformer_config.py mtp_num_layers: the modules after the last layer; arguments.py: MTP
    # takes learned_absolute, rope, mrope or none positions
    mtp = int(a.get("--mtp-num-layers") or 0)
    need(mtp == facts["mtp"], "mtp-num-layers %d != the model's %d modules" % (mtp, facts["mtp"]))
    need(not mtp or a.get("--position-embedding-type", "learned_absolute") in
         ("learned_absolute", "rope", "mrope", "none"), "MTP position embedding type")
    # round trip
    f = facts
    if first is not None or last is not None:  # transformer_config.py: uneven PP counts > 0
        need(int(first or 1) > 0 and int(last or 1) > 0, "first/last stage layers must be > 0")
    for k, v in first_last.items():  # the template's uneven stages (0: even), read back
        got = int({"first_stage_layers": first, "last_stage_layers": last}[k] or 0)
        need(not v or got == v, "%s: the export's %d, the plan's %d" % (k, got, v))
    need(L == f["layers"], "num-layers %d != %d" % (L, f["layers"]))
    need(int(a["--hidden-size"]) == f["hidden"], "hidden")
    need(heads == f["heads"] and groups == f["kv"], "heads / query groups")
    need(int(a["--ffn-hidden-size"]) == f["ffn"], "ffn")
    # transformer_config.py: kv_channels defaults to hidden / heads; qk_layernorm to False
    if not f["mla"]:  # MLA: the head is qk-head-dim + qk-pos-emb-head-dim (mla_rules)
        need(int(a.get("--kv-channels", f["hidden"] // heads)) == f["head_dim"],
             "head_dim (kv-channels)")
    need(bool(a.get("--qk-layernorm")) == f["qk_norm"], "qk-layernorm")
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


FSDP_STAGES = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def fsdp_rules(a):
    fsdp = bool(a.get("--use-megatron-fsdp"))
    strategy = a.get("--data-parallel-sharding-strategy")
    need(strategy is None or strategy in FSDP_STAGES, "sharding strategy %s" % strategy)
    need(strategy is None or fsdp, "--data-parallel-sharding-strategy without --use-megatron-fsdp")
    need((a.get("--ckpt-format") == "fsdp_dtensor") == fsdp,
         "Megatron-FSDP and --ckpt-format fsdp_dtensor go together")
    need(not fsdp or "--use-distributed-optimizer" in a, "Megatron-FSDP v1 without the dist. optimizer")
    need(not fsdp or FSDP_STAGES.get(strategy, 3) < 2 or "--no-gradient-accumulation-fusion" in a,
         "gradient accumulation fusion under sharded gradients")
    # the plan's ZeRO stage read back (arguments.py: the strategy defaults to optim_grads_params)
    zero = FSDP_STAGES[strategy or "optim_grads_params"] if fsdp else int("--use-distributed-optimizer" in a)
    need(plan_zero is None or zero == plan_zero, "ZeRO stage %d != the plan's %s" % (zero, plan_zero))


def moe_rules(a, E, L):
    """Megatron-LM d98e8a64dd: transformer_config.py (moe_ffn_hidden_size; moe_layer_freq, whose
    list gpt_layer_specs.py get_gpt_decoder_block_spec asserts has num_layers entries;
    moe_shared_expert_intermediate_size > 0; moe_router_score_function softmax | sigmoid |
    sqrtsoftplus; --moe-router-enable-expert-bias needs sigmoid or sqrtsoftplus; group-limited
    routing needs moe_router_num_groups dividing the experts and group_topk <= num_groups;
    top-1 softmax routing needs --moe-router-pre-softmax), read back against the model."""
    f = facts
    need(int(a.get("--moe-ffn-hidden-size", a["--ffn-hidden-size"])) == f["moe_ffn"],
         "moe-ffn-hidden-size %s != the experts' %d" % (a.get("--moe-ffn-hidden-size"), f["moe_ffn"]))
    pat = freq_pattern(a.get("--moe-layer-freq", 1), L)
    need(len(pat) == L and set(pat) <= {0, 1}, "moe-layer-freq has %d entries for %d layers" % (len(pat), L))
    need(pat == f["moe_pattern"], "moe-layer-freq %s != the model's MoE layers %s" % (pat, f["moe_pattern"]))
    shared = a.get("--moe-shared-expert-intermediate-size")
    need(shared is None or int(shared) > 0, "shared expert size must be > 0")
    need(int(shared or 0) == f["shared_ffn"], "shared expert %s != the model's %d" % (shared, f["shared_ffn"]))
    if "--ffn-hidden-size" in a and 0 in pat:  # the dense layers' width
        need(int(a["--ffn-hidden-size"]) == f["ffn"], "dense ffn-hidden-size")
    fn = a.get("--moe-router-score-function", "softmax")
    need(fn in ("softmax", "sigmoid", "sqrtsoftplus"), "score function %s" % fn)
    need((fn == "sigmoid") == f["sigmoid"], "score function %s for the model's %s gates" %
         (fn, "sigmoid" if f["sigmoid"] else "softmax"))
    need(not a.get("--moe-router-enable-expert-bias") or fn in ("sigmoid", "sqrtsoftplus"),
         "expert bias needs a sigmoid or sqrtsoftplus score")
    groups, gtop = int(a.get("--moe-router-num-groups") or 0), int(a.get("--moe-router-group-topk") or 0)
    need(not gtop or (groups and E % groups == 0 and gtop <= groups), "group-limited routing")
    need(not (int(a["--moe-router-topk"]) == 1 and fn == "softmax") or
         a.get("--moe-router-pre-softmax"), "top-1 softmax routing needs --moe-router-pre-softmax")


def mla_rules(a, heads):
    """Multi-head latent attention: arguments.py validate_args (exclusive with
    --group-query-attention), _add_mla_args (--q-lora-rank default None: no query
    compression), argument_utils.py (--rope-type rope or yarn; yarn only with MLA),
    transformer_config.py (no rotary_interleaved with MLA); dims read back from the model."""
    f, mla = facts, bool(a.get("--multi-latent-attention"))
    need(mla == f["mla"], "multi-latent-attention %s for a model %s latent attention" %
         (mla, "with" if f["mla"] else "without"))
    need(a.get("--rope-type") in (None, "rope", "yarn") and (mla or a.get("--rope-type") in (None, "rope")),
         "rope-type %s" % a.get("--rope-type"))
    if not mla:
        return
    need("--group-query-attention" not in a, "MLA with --group-query-attention")
    need("--rotary-interleaved" not in a, "MLA with --rotary-interleaved")
    got = [int(a.get(k) or 0) for k in ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
                                          "--qk-pos-emb-head-dim", "--v-head-dim")]
    want = [f["q_lora"], f["kv_lora"], f["qk_head"], f["qk_rope"], f["v_head"]]
    need(got == want, "MLA dims %s != the model's %s" % (got, want))
    need(got[2] + got[3] == f["head_dim"], "qk head %d + rope %d != the model's head %d" %
         (got[2], got[3], f["head_dim"]))
    need(int(a.get("--kv-channels", f["hidden"] // heads)) == f["hidden"] // heads,
         "MLA kv-channels (arguments.py: hidden / heads)")


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
    # parallel_dims.py seq_len_divisor, asserted by every model's parallelize.py
    need(tr["seq_len"] % (par["tensor_parallel_degree"] * 2 * par["context_parallel_degree"]) == 0,
         "seq_len %% (tp x 2 cp)")
    # parallelize.py: "Async TP requires torch.compile" (compile.enable, "model" in components)
    if par.get("enable_async_tensor_parallel"):
        comp = t.get("compile", {})
        need(comp.get("enable") and "model" in comp.get("components", ["model", "loss"]),
             "async TP without the model compiled")
        need(par["tensor_parallel_degree"] > 1, "async TP at tp 1")
    # parallel_dims.py _validate: ep > 1 needs etp == tp or 1
    ep, etp = par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]
    tp, cp = par["tensor_parallel_degree"], par["context_parallel_degree"]
    need(ep == 1 or etp in (1, tp), "etp must be tp or 1")
    # parallel_dims.py: efsdp = dp_shard x cp x tp / (etp x ep) must be whole
    need((par["data_parallel_shard_degree"] * cp * tp) % (etp * ep) == 0, "efsdp not whole")
    need(ep == 1 or par["data_parallel_replicate_degree"] == 1, "ep under DDP")
    if plan_layout:
        got = {"tp": tp, "pp": par["pipeline_parallel_degree"], "dp": dp, "ep": ep,
               "etp": etp if ep > 1 else plan_layout["etp"], "cp": cp}
        need(got == plan_layout, "degrees %s != the plan's %s" % (got, plan_layout))
        # HSDP (parallel_dims.py: the mesh pp, dp_replicate, dp_shard, cp, tp): FSDP's replicas
        if plan_zero == 3:
            need(par["data_parallel_replicate_degree"] == plan_replicate,
                 "data_parallel_replicate_degree %d != the plan's %d replicas"
                 % (par["data_parallel_replicate_degree"], plan_replicate))
    if facts["experts"]:
        # MoE: qwen3 (models/qwen3: every layer MoE, dropless SwiGLU experts, no pipelining_fn)
        need(t["model"]["name"] == "qwen3", "a MoE model is not qwen3")
        need(facts["dropless"] and facts["swiglu"], "torchtitan's MoE is dropless with SwiGLU experts")
        need(par["pipeline_parallel_degree"] == 1, "qwen3 has no pipeline function")
        need(facts["experts"] % ep == 0, "experts % ep")
        if t["model"]["flavor"] == "plansim":  # the Qwen3ModelArgs in the header, round-tripped
            text = open(export).read()
            comments = "\n".join(l for l in text.splitlines() if l.startswith("#"))
            args = dict((k, int(v)) for k, v in re.findall(r"\b(\w+)=(\d+)\b", comments))
            want = {"dim": facts["hidden"], "n_layers": facts["layers"], "n_heads": facts["heads"],
                    "n_kv_heads": facts["kv"], "head_dim": facts["head_dim"],
                    "moe_inter_dim": facts["ffn"], "num_experts": facts["experts"],
                    "top_k": facts["top_k"], "vocab_size": facts["vocab"], "num_shared_experts": 0}
            need(all(args.get(k) == v for k, v in want.items()),
                 "Qwen3ModelArgs %s != %s" % (args, want))
    else:
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


def load_yaml(path):
    try:
        import yaml
        return yaml.safe_load(open(path))
    except ImportError:  # the two-level subset plansim writes: "key:" sections, "  key: value"
        d, sec = {}, None
        for line in open(path):
            if not line.strip() or line.startswith("#"):
                continue
            k, _, v = line.strip().partition(":")
            v = v.strip()
            val = None if v in ("null", "") else True if v == "true" else False if v == "false" else v
            if not line.startswith(" "):
                sec = d.setdefault(k, {}) if v == "" else None
                if v != "":
                    d[k] = val
            else:
                sec[k] = int(v) if re.fullmatch(r"-?\d+", v) else val
        return d


# Megatron-Bridge 0.7.0 (NVIDIA-NeMo/Megatron-Bridge 067f987df0): the ConfigContainer fields this
# file may set (training/config.py; model: models/gpt_provider.py GPTModelProvider and
# Megatron-Core TransformerConfig / ModelParallelConfig fields, Megatron-LM d98e8a64dd), the
# registered precision presets (training/mixed_precision.py) and GPTModelProvider's
# position_embedding_type Literal.
BRIDGE_KEYS = {
    "model": {"tensor_model_parallel_size", "pipeline_model_parallel_size", "gradient_accumulation_fusion",
              "virtual_pipeline_model_parallel_size", "num_layers_in_first_pipeline_stage",
              "num_layers_in_last_pipeline_stage", "sequence_parallel", "context_parallel_size",
              "recompute_granularity", "recompute_method", "recompute_num_layers", "num_layers",
              "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
              "seq_length", "vocab_size", "make_vocab_size_divisible_by", "kv_channels", "qk_layernorm",
              "position_embedding_type", "normalization", "gated_linear_unit", "add_bias_linear",
              "share_embeddings_and_output_weights", "hidden_dropout", "attention_dropout",
              "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
              "expert_model_parallel_size", "expert_tensor_parallel_size", "moe_grouped_gemm",
              "moe_token_dispatcher_type",
              "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity",
              "moe_layer_freq", "moe_shared_expert_intermediate_size", "moe_router_score_function",
              "multi_latent_attention", "mtp_num_layers"},
    "train": {"micro_batch_size", "global_batch_size"}, "dataset": {"seq_length"},
    "ddp": {"use_distributed_optimizer", "overlap_grad_reduce", "bucket_size",
            "overlap_param_gather", "align_param_gather", "grad_reduce_in_fp32",
            "use_megatron_fsdp", "data_parallel_sharding_strategy"},
    # training/config.py at 067f987df0: DistributedInitConfig.use_megatron_fsdp,
    # CheckpointConfig.ckpt_format
    "dist": {"use_megatron_fsdp"}, "checkpoint": {"ckpt_format"},
    "tokenizer": {"use_tokenizer_vocab_size"},
    "optimizer": {"use_distributed_optimizer", "overlap_param_gather", "bf16", "fp16"},
    "mixed_precision": None,
    "env_vars": {"NCCL_ALGO"},
}
# MLATransformerConfig's fields (Megatron-Bridge models/transformer_config.py over Megatron-Core's):
# only an MLAModelProvider (models/mla_provider.py) has them, so only over the DeepSeek-V3 recipe
# (recipes/deepseek/deepseek_v3.py), whose pipeline_model_parallel_layout must be cleared for
# the first/last stage counts (transformer_config.py: the two conflict).
MLA_KEYS = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
            "rope_type", "pipeline_model_parallel_layout"}
PRESETS = {None: "fp32", "bf16_mixed": "bf16", "fp16_mixed": "fp16",
           "bf16_with_fp8_delayed_scaling_mixed": "fp8"}


def bridge():
    transformer_facts()
    c = load_yaml(export)
    mla_recipe = "--recipe deepseek_v3_pretrain_config" in open(export).read()
    for sec, v in c.items():
        need(sec in BRIDGE_KEYS, "unknown ConfigContainer field %s" % sec)
        if isinstance(v, dict):
            bad = set(v) - (BRIDGE_KEYS.get(sec) or set()) - (MLA_KEYS if sec == "model" and mla_recipe else set())
            need(not bad, "unknown %s fields %s" % (sec, sorted(bad)))
    m, t, ddp, opt = c["model"], c["train"], c["ddp"], c["optimizer"]
    need(not m.get("multi_latent_attention") or mla_recipe, "MLA over a GPTModelProvider recipe")
    need(not mla_recipe or "pipeline_model_parallel_layout" in m and m["pipeline_model_parallel_layout"] is None,
         "the DeepSeek-V3 recipe's pipeline layout is not cleared")
    need(m["seq_length"] == c["dataset"]["seq_length"], "model.seq_length != dataset.seq_length")
    need(m["position_embedding_type"] in ("learned_absolute", "rope", "yarn"), "position type")
    need(c["mixed_precision"] in PRESETS, "mixed_precision is no registered preset")
    need(ddp["use_distributed_optimizer"] == opt["use_distributed_optimizer"], "dist. optimizer")
    # training/setup.py _validate_and_set_vocab_size: else the tokenizer's size replaces the model's
    need(c["tokenizer"]["use_tokenizer_vocab_size"] is False, "use_tokenizer_vocab_size")
    need(m["vocab_size"] == role["vocab"][0], "vocab %s != %s" % (m["vocab_size"], role["vocab"][0]))
    # training/config.py: ddp's and optimizer's overlap_param_gather are kept in sync;
    # align_param_gather as Megatron-LM's default: on under interleaving (validate_args turns it
    # off without; Megatron-Core's DistributedDataParallelConfig defaults to off)
    opg = ddp["overlap_param_gather"] is True
    need(opg == (opt.get("overlap_param_gather") is True), "ddp and optimizer overlap_param_gather")
    need(ddp.get("align_param_gather", False) == (opg and bool(
        m.get("virtual_pipeline_model_parallel_size"))), "align_param_gather")
    need(ddp["grad_reduce_in_fp32"] == (PRESETS.get(c["mixed_precision"]) != "fp16"),
         "gradients reduced in fp32 (fp16: in fp16)")
    # the same run as Megatron-LM flags: one set of Megatron-Core rules and the round trip
    a = {"--%s" % k.replace("_", "-"): v for k, v in m.items() if v is not None and v is not False}
    ren = {"--num-layers-in-first-pipeline-stage": "--decoder-first-pipeline-num-layers",
           "--num-layers-in-last-pipeline-stage": "--decoder-last-pipeline-num-layers",
           "--num-moe-experts": "--num-experts", "--gated-linear-unit": "--swiglu"}
    a = {ren.get(k, k): v for k, v in a.items()}
    a.pop("--pipeline-model-parallel-layout", None)
    a.pop("--mtp-num-layers", None) if not m.get("mtp_num_layers") else None
    a.pop("--add-bias-linear", None)
    if not m["add_bias_linear"]:
        a["--disable-bias-linear"] = True
    a.pop("--share-embeddings-and-output-weights", None)
    if not m["share_embeddings_and_output_weights"]:
        a["--untie-embeddings-and-output-weights"] = True
    if m.get("virtual_pipeline_model_parallel_size"):
        a["--num-layers-per-virtual-pipeline-stage"] = m["num_layers"] // (
            m["pipeline_model_parallel_size"] * m["virtual_pipeline_model_parallel_size"])
    a.pop("--sequence-parallel", None)
    if m["sequence_parallel"]:
        a["--sequence-parallel"] = True
    a["--micro-batch-size"], a["--global-batch-size"] = t["micro_batch_size"], t["global_batch_size"]
    if ddp["overlap_grad_reduce"]:
        a["--overlap-grad-reduce"] = True
    if opg:
        a["--overlap-param-gather"] = True
    # Megatron-FSDP (_validate_and_apply_megatron_fsdp_v1_configs): dist sets ddp's flag too
    fsdp = bool(c.get("dist", {}).get("use_megatron_fsdp"))
    need(fsdp == bool(ddp.get("use_megatron_fsdp", fsdp)), "dist and ddp use_megatron_fsdp differ")
    if fsdp:
        a["--use-megatron-fsdp"] = True
    if ddp.get("data_parallel_sharding_strategy") is not None:
        a["--data-parallel-sharding-strategy"] = ddp["data_parallel_sharding_strategy"]
    if c.get("checkpoint", {}).get("ckpt_format") is not None:
        a["--ckpt-format"] = c["checkpoint"]["ckpt_format"]
    a.pop("--gradient-accumulation-fusion", None)
    if m.get("gradient_accumulation_fusion") is False:
        a["--no-gradient-accumulation-fusion"] = True
    if ddp["use_distributed_optimizer"]:
        a["--use-distributed-optimizer"] = True
    if ddp["bucket_size"] is not None:
        a["--ddp-bucket-size"] = ddp["bucket_size"]
    prec = PRESETS.get(c["mixed_precision"], "?")
    if prec in ("bf16", "fp8"):
        a["--bf16"] = True
    if prec == "fp16":
        a["--fp16"] = True
    if prec == "fp8":
        a["--fp8-format"] = "hybrid"
    need(opt["bf16"] == (prec in ("bf16", "fp8")) and opt["fp16"] == (prec == "fp16"),
         "optimizer precision differs from the preset")
    megatron_core(a)


def tensor_ranks():
    """Every tensor of the model (block tensors as BLOCK.I.NAME) and its rank."""
    r = {}
    for sec in ("inputs", "weights", "tensors"):
        r.update({k: len(v["dims"]) for k, v in model.get(sec, {}).items()})
    for op in model["ops"]:
        if "block" in op:
            inner = dict(op.get("tensors", {}), **op.get("weights", {}))
            for t in op.get("out", []):  # the block's output: the layer's [batch, seq, hidden]
                r[t] = len(inner["y"]["dims"]) if "y" in inner else 3
            for i in range(op["repeat"]):
                r.update({"%s.%d.%s" % (op["block"], i, k): len(v["dims"]) for k, v in inner.items()})
    return r


def gspmd():
    """jax-ml/jax jax-v0.11.0 (a1521744c6, 2026-07-16): jax/_src/mesh.py Mesh.__new__ (devices.ndim
    == len(axis_names), no None name; the export also takes each device once and distinct
    names); jax/_src/partition_spec.py (P: each entry None, a name or a tuple of names;
    _check_compatible_wrt_shape: at most one entry per array dim, fewer replicate the rest,
    _normalized_spec_for_aval); jax/_src/named_sharding.py check_pspec:
    _check_unique_resources (no mesh axis twice in a spec) and _check_mesh_resource_axis
    (every name is a mesh axis). Every tensor the model has a spec for is a model tensor."""
    c = json.load(open(export))
    mesh, specs = c["mesh"], c["partition_specs"]
    names, shape, ids = mesh["axis_names"], mesh["shape"], mesh["device_ids"]
    need(len(names) == len(set(names)) == len(shape), "mesh axis names")
    n = 1
    for k in shape:
        n *= k
    need(n == len(ids) == len(set(ids)), "mesh shape %s over %d device ids" % (shape, len(ids)))
    if world:
        need(len(ids) == world, "the mesh holds %d devices, the plan %d" % (len(ids), world))
    ranks = tensor_ranks()
    for t, spec in specs.items():
        axes = [a for e in spec if e is not None for a in ([e] if isinstance(e, str) else e)]
        need(set(axes) <= set(names), "%s names axes outside the mesh" % t)
        need(len(axes) == len(set(axes)), "%s uses a mesh axis twice" % t)
        need(t in ranks and len(spec) <= ranks[t], "%s: spec %s for a tensor of rank %s" %
             (t, spec, ranks.get(t)))
    need(c["gradient_accumulation_steps"] >= 1 and c["remat"] in ("none", "full", "selective"),
         "accumulation / remat")


def deepspeed_pipeline():
    """DeepSpeed 0.19.6 deepspeed/runtime/pipe/module.py: PipelineModule(num_stages=...,
    partition_method="type:REGEX", activation_checkpoint_interval=N); 'type:' balances the
    layers whose class matches over the stages, so plansim's split is it only when the stages
    hold equal layer counts. WORLD is DEVICES/PP."""
    kw = dict(re.findall(r"^\s+(\w+)=([^,\n]+),?$", open(export).read(), re.M))
    need(set(kw) <= {"num_stages", "partition_method", "activation_checkpoint_interval"},
         "unknown PipelineModule arguments %s" % sorted(kw))
    stages = int(kw["num_stages"])
    need(stages == pp_arg, "num_stages %d, the plan's pipeline %d" % (stages, pp_arg))
    need(kw["partition_method"].strip('"').startswith("type:"), "partition_method")
    need(int(kw["activation_checkpoint_interval"]) >= 0, "activation_checkpoint_interval")
    layers = sum(o["repeat"] for o in model["ops"] if "block" in o)
    need(layers > 0 and layers % stages == 0, "%d repeated layers over %d stages" % (layers, stages))


{"megatron": megatron, "megatron-bridge": bridge, "torchtitan": torchtitan,
 "deepspeed": deepspeed, "deepspeed-pipeline": deepspeed_pipeline, "gspmd": gspmd}[fmt]()
print("\n".join(errors) if errors else "ok")
sys.exit(1 if errors else 0)
