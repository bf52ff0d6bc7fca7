"""Calculon as a peer of plansim (issue 23, item 3; issue 19's side-by-side benchmark).

Calculon (calculon-ai/calculon, commit in get_calculon.sh) is imported from CALCULON_DIR.
This module
- evaluates one execution (Calculon's `llm` command: Llm.compile + Llm.run),
- translates a plansim Megatron strategy into Calculon executions and back,
- runs Calculon's `llm-optimal-execution` search (OptimalExecution.search, the function its
  command maps over a process pool) serially on one core, with a time budget.

Run it with Debian's /usr/bin/python3 (numpy and psutil come from python3-numpy and
python3-psutil; scripts/setup installs them).
"""

import copy
import json
import logging
import os
import sys
import time

CALCULON_DIR = os.environ.get(
    'CALCULON_DIR',
    os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..',
                 'build-peers', 'calculon'))
sys.path.insert(0, os.path.abspath(CALCULON_DIR))
import calculon  # noqa: E402  (needs CALCULON_DIR on the path)
from calculon.llm import Llm  # noqa: E402
from calculon.llm.optimal_execution import OptimalExecution  # noqa: E402

# plansim recompute mode -> Calculon activation_recompute. Calculon's 'attn_only' recomputes
# the attention core, what Megatron's selective recomputation does (Korthikanti et al. 2022).
RECOMPUTE_TO_CALCULON = {'none': 'none', 'selective': 'attn_only', 'full': 'full'}
RECOMPUTE_FROM_CALCULON = {v: k for k, v in RECOMPUTE_TO_CALCULON.items()}


def read_json(path):
    """Reads a JSON file with Calculon's reader (it also reads .json.gz)."""
    return calculon.io.read_json_file(path)


def application(path):
    return Llm.Application(read_json(path))


def system(path):
    """Calculon's system file with the offload tier removed (plansim models no offloading)."""
    cfg = copy.deepcopy(read_json(path))
    cfg['mem2']['GiB'] = 0
    return calculon.System(cfg)


def evaluate(app, syst, exe):
    """Calculon's `llm` on one execution: (stats, None) or (None, Calculon's error)."""
    model = Llm(app, logging.Logger('calculon'))
    try:
        model.compile(syst, Llm.Execution.from_json(exe))
        model.run(syst)
    except Llm.Error as err:
        return None, str(err)
    return model.get_stats_json(False), None


def execution(strategy, gpus, batch, datatype, nets=(0, 1, 1)):
    """A plansim megatron strategy (tp, pp, dp, micro_batch, virtual_stages, zero, recompute,
    sequence_parallel, overlap_grad_reduce) as a Calculon execution."""
    sp = bool(strategy.get('sequence_parallel', False))
    return {
        'num_procs': gpus, 'tensor_par': strategy['tp'], 'pipeline_par': strategy['pp'],
        'data_par': strategy['dp'], 'tensor_par_net': nets[0], 'pipeline_par_net': nets[1],
        'data_par_net': nets[2], 'batch_size': batch,
        'microbatch_size': strategy.get('micro_batch', 1), 'datatype': datatype,
        'fused_activation': True, 'attention_type': 'multihead',
        'activation_recompute': RECOMPUTE_TO_CALCULON[strategy.get('recompute', 'none')],
        'pipeline_interleaving': strategy.get('virtual_stages', 1),
        'optimizer_sharding': strategy.get('zero', 0) >= 1,
        'tensor_par_comm_type': 'rs_ag' if sp else 'ar', 'tensor_par_overlap': 'none',
        'seq_par_ag_redo': False,
        'data_par_overlap': bool(strategy.get('overlap_grad_reduce', False)),
        'weight_offload': False, 'activations_offload': False, 'optimizer_offload': False,
        'training': True}


def evaluate_strategy(app, syst, strategy, gpus, batch, datatype):
    """The fastest valid Calculon execution of a megatron strategy over the ways Calculon can
    map tp, pp and dp onto its networks (NVLink domain, fabric): (time s, mem B, exe) or
    (None, error, None)."""
    best, err = None, 'no network assignment'
    nnets = syst.num_networks
    for tn in range(nnets):
        for pn in range(nnets):
            for dn in range(nnets):
                exe = execution(strategy, gpus, batch, datatype, (tn, pn, dn))
                stats, err1 = evaluate(app, syst, exe)
                if stats is None:
                    err = err1
                    continue
                if best is None or stats['total_time'] < best[0]:
                    best = (stats['total_time'], stats['proc_mem_tier1_cap_req'], exe)
    return best if best is not None else (None, err, None)


def strategy_of(exe):
    """A Calculon execution as a plansim megatron strategy, and what plansim cannot express."""
    s = {'format': 'plansim.strategy/1', 'template': 'megatron', 'tp': exe['tensor_par'],
         'pp': exe['pipeline_par'], 'dp': exe['data_par'], 'micro_batch': exe['microbatch_size'],
         'virtual_stages': exe['pipeline_interleaving'],
         'zero': 1 if exe['optimizer_sharding'] else 0,
         'recompute': RECOMPUTE_FROM_CALCULON[exe['activation_recompute']],
         'sequence_parallel': exe['tensor_par_comm_type'] != 'ar' and exe['tensor_par'] > 1,
         'overlap_grad_reduce': bool(exe['data_par_overlap'])}
    if s['pp'] == 1:
        s['virtual_stages'] = 1
    notes = []
    if exe['tensor_par_overlap'] != 'none':
        notes.append('TP overlap %s dropped' % exe['tensor_par_overlap'])
    if exe['seq_par_ag_redo']:
        notes.append('seq_par_ag_redo dropped')
    if exe['tensor_par_comm_type'] == 'p2p_rs_ag':
        notes.append('p2p_rs_ag as SP')
    return s, notes


def search_params(app, syst, gpus, max_batch, datatype):
    """The (tp, pp, dp, interleaving, batch, recompute, sharding, comm type) groups of
    OptimalExecution.run_command (optimal_execution.py), in its order."""
    del syst
    out = []
    for tp in Llm.get_all_tensor_parallelisms(gpus, app.hidden, app.attn_heads):
        for pp in Llm.get_all_pipeline_parallelisms(gpus, tp, app.num_blocks):
            dp = Llm.get_data_parallelism(gpus, tp, pp)
            for ppint in Llm.get_valid_pipeline_interleavings(app.num_blocks, pp):
                batch = OptimalExecution.get_batch_size(dp, max_batch)
                if batch is None:
                    continue
                for recompute in ['full', 'attn_only', 'none']:
                    for sharding in ([True, False] if dp > 1 else [False]):
                        for comm in ['ar', 'p2p_rs_ag', 'rs_ag']:
                            out.append((tp, pp, dp, ppint, batch, recompute, sharding, comm))
    return out


def search(app, syst, gpus, max_batch, datatype, budget_s, tp_overlap=False):
    """Calculon's llm-optimal-execution search (with its --mbs-break, as its README runs it)
    on this process alone, stopping before a group once budget_s of CPU time are spent.
    Groups are visited with tp <= 8 (the NVLink domain of Calculon's systems) first, widest
    first, then Calculon's order: a budget then reaches the configurations Megatron uses."""
    params = search_params(app, syst, gpus, max_batch, datatype)
    params.sort(key=lambda p: (p[0] > 8, -p[0]))  # stable: Calculon's order within a tp
    t0 = time.process_time()
    w0 = time.time()
    best, evals, good, visited = [], 0, 0, 0
    for tp, pp, dp, ppint, batch, recompute, sharding, comm in params:
        if time.process_time() - t0 >= budget_s:
            break
        cbest, ec, gec, _, _, _ = OptimalExecution.search(
            False, 1, False, gpus, max_batch, datatype, app, syst, tp, pp, dp, ppint, batch,
            recompute, sharding, comm, [True], True, tp_overlap, True)
        best = OptimalExecution.update_list(best, cbest, 1)
        evals += ec
        good += gec
        visited += 1
    return {'best': best[0][1] if best else None,
            'time_s': best[0][2]['total_time'] if best else None,
            'mem_bytes': best[0][2]['proc_mem_tier1_cap_req'] if best else None,
            'groups': len(params), 'groups_visited': visited, 'executions': evals,
            'good_executions': good, 'cpu_s': time.process_time() - t0,
            'wall_s': time.time() - w0}


def main(argv):
    """calculon_peer.py search APP SYSTEM GPUS MAX_BATCH DTYPE BUDGET_S
       calculon_peer.py eval APP SYSTEM GPUS BATCH DTYPE STRATEGY.json"""
    if len(argv) == 7 and argv[0] == 'search':
        res = search(application(argv[1]), system(argv[2]), int(argv[3]), int(argv[4]),
                     argv[5], float(argv[6]))
    elif len(argv) == 7 and argv[0] == 'eval':
        with open(argv[6]) as f:
            strat = json.load(f)
        t, mem, exe = evaluate_strategy(application(argv[1]), system(argv[2]), strat,
                                        int(argv[3]), int(argv[4]), argv[5])
        res = {'time_s': t, 'mem_bytes': mem, 'execution': exe} if t is not None else \
            {'time_s': None, 'error': mem}
    else:
        print(main.__doc__, file=sys.stderr)
        return 2
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
