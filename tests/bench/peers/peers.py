"""Peer cross-check (issue 23, item 3): plansim's searchers against Calculon's
llm-optimal-execution and the published configurations, every plan simulated by plansim (and
by Calculon where it can express it). Run by hand through tests/bench/peers/run.sh, not in CI.

For each case it writes OUT/CASE/*.json (plans, strategies, simulations) and OUT/CASE.result
.json, and prints one table row per plan: plan, plansim time, fits, Calculon time, search s.
"""

import json
import os
import resource
import subprocess
import sys
import time

import calculon_peer as cp

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
PLANSIM = os.environ.get('PLANSIM', os.path.join(ROOT, 'build', 'cli', 'plansim'))
CAL = cp.CALCULON_DIR
LONG_BUDGET_S = float(os.environ.get('PEERS_LONG_BUDGET_S', '300'))  # 0: no long grid run
BUDGET_S = float(os.environ.get('PEERS_BUDGET_S', '60'))  # each search: plansim and Calculon
# alpa takes no budget, and the default policy's budget does not bound its Alpa search:
# both get a wall limit (SIGTERM: plansim writes the best plan so far).
ALPA_LIMIT_S = float(os.environ.get('PEERS_ALPA_LIMIT_S', '300'))

MEGATRON = {'format': 'plansim.strategy/1', 'template': 'megatron', 'micro_batch': 1}

# Published configurations (each as a plansim megatron strategy, or None with the reason).
# NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh (157006d6): tp 8, pp 16,
# micro-batch 1, batch 1536, no recompute / SP / distributed-optimizer flags.
PUB_175B = dict(MEGATRON, tp=8, pp=16, dp=8)
# Llama 3 405B: Dubey et al. 2024 Table 4 (tp 8, cp 1, pp 16 at seq 8192) with §3.3.2's uneven
# stages ("we reduce one Transformer layer each from the first and the last stages": 126 = 7 +
# 14 x 8 + 7); its FSDP shards the optimizer state and gradients (ZeRO 2; ZeRO 1 shown too);
# dp 8 at 1,024 GPUs.
PUB_405B = dict(MEGATRON, tp=8, pp=16, dp=8, first_stage_layers=7, last_stage_layers=7,
                sequence_parallel=True, zero=1)
# Qwen3-30B-A3B: NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 (v0.5.0; its row in
# docs/performance-summary-archive.md @ 067f987d, ../shared/calibration/modern): 16 H100, tp 1,
# pp 1, cp 1, ep 16, etp 1, micro-batch 1, batch 1024, seq 4096, distributed optimizer, no
# recompute; at 64 H100 the same with dp 64 (16 sequences per replica). bf16 here (the row: FP8).
PUB_QWEN3_30B = dict(MEGATRON, tp=1, pp=1, dp=64, ep=16, etp=1, zero=1)
PUB_70B = dict(MEGATRON, tp=4, pp=4, dp=16, virtual_stages=5, zero=1, sequence_parallel=True,
               overlap_grad_reduce=True)  # Megatron-Bridge llama3_70b_pretrain_config, cp 2->dp

CASES = [
    {'name': 'gpt3-175b-1024a100', 'gpus': 1024, 'batch': 1536, 'dtype': 'float16',
     'model': ['file', 'models/gpt-175b.json'], 'cluster': ['file', 'topologies/dgx-a100-x128.json'],
     'cal_app': os.path.join(CAL, 'models', 'gpt3-175B.json'), 'cal_sys': 'a100_80g.json',
     'long_grid': True,
     'published': [('published tp8 pp16 (as the script: no recompute)', dict(PUB_175B)),
                   ('published tp8 pp16 (full)', dict(PUB_175B, recompute='full')),
                   ('published tp8 pp16 (sel+SP)', dict(PUB_175B, recompute='selective',
                                                        sequence_parallel=True)),
                   ('published tp8 pp16 (sel+SP+DO)', dict(PUB_175B, recompute='selective',
                                                           sequence_parallel=True, zero=1)),
                   ('issue 23 hand configuration', dict(MEGATRON, tp=4, pp=16, dp=16,
                                                        virtual_stages=6, zero=1,
                                                        recompute='selective',
                                                        sequence_parallel=True))]},
    {'name': 'gpt3-13b-64a100', 'gpus': 64, 'batch': 512, 'dtype': 'float16',
     'model': ['gpt', '--layers', '40', '--hidden', '5120', '--heads', '40', '--batch', '512',
               '--name', 'gpt3-13b'],
     'cluster': ['dgx-a100-80g', '--nodes', '8'],
     'cal_app': 'gpt3-13b.json', 'cal_sys': 'a100_80g.json',
     'published': [('published: none for 13B on 64 GPUs', None)]},
    {'name': 'llama3-70b-256h100', 'gpus': 256, 'batch': 256, 'dtype': 'float16',
     'model': ['llama3', '--layers', '80', '--hidden', '8192', '--heads', '64', '--ffn', '28672',
               '--batch', '256', '--name', 'llama3-70b'],
     'cluster': ['dgx-h100', '--nodes', '32'],
     'cal_app': 'llama3-70b.json', 'cal_sys': 'h100_80g_nvl8.json',
     'published': [('Megatron-Bridge tp4 pp4 vp5 cp2 (cp as dp)', dict(PUB_70B))]},
    {'name': 'llama3-405b-1024h100', 'gpus': 1024, 'batch': 256, 'dtype': 'float16',
     'model': ['llama3', '--layers', '126', '--hidden', '16384', '--heads', '128', '--ffn',
               '53248', '--batch', '256', '--name', 'llama3-405b'],
     'cluster': ['dgx-h100', '--nodes', '128'],
     'cal_app': 'llama3-405b.json', 'cal_sys': 'h100_80g_nvl8.json',
     'published': [('Llama 3 tp8 pp16 dp8, 7/8x14/7 layers, SP, ZeRO 2 (FSDP)',
                    dict(PUB_405B, zero=2)),
                   ('the same, ZeRO 1', dict(PUB_405B)),
                   ('the same, selective', dict(PUB_405B, recompute='selective')),
                   ('the same, full', dict(PUB_405B, recompute='full'))]},
    {'name': 'qwen3-30b-a3b-64h100', 'gpus': 64, 'batch': 1024, 'dtype': 'bfloat16',
     'model': ['qwen3-moe', '--batch', '1024', '--name', 'qwen3-30b-a3b'],
     'cluster': ['dgx-h100', '--nodes', '8'],
     'cal_app': None, 'cal_sys': 'h100_80g_nvl8.json',  # Calculon has no experts
     'published': [('Megatron-Bridge tp1 pp1 ep16 etp1 dp64, ZeRO 1', dict(PUB_QWEN3_30B)),
                   ('the same, overlapped grad reduce', dict(PUB_QWEN3_30B,
                                                             overlap_grad_reduce=True))]},
]


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(args, out_path=None, limit_s=None):
    """Runs a command niced under GNU time -v (its report in out_path.time: CPU seconds, max
    RSS); returns (rc, stdout, cpu s, wall s). timeout(1) sends SIGTERM at limit_s (rc 124)."""
    c0, w0 = cpu_children(), time.time()
    pre = ['/usr/bin/time', '-v', '-o', out_path + '.time'] if out_path and os.path.exists(
        '/usr/bin/time') else []
    if limit_s:
        pre += ['timeout', '%d' % limit_s]
    with subprocess.Popen(pre + ['nice', '-n', '10'] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as p:
        out, err = p.communicate()
    if out_path:
        with open(out_path, 'w') as f:
            f.write(out)
        with open(out_path + '.err', 'w') as f:
            f.write(err)
    return p.returncode, out, cpu_children() - c0, time.time() - w0


def prepare(case, d):
    paths = []
    for kind, spec in (('model', case['model']), ('cluster', case['cluster'])):
        if spec[0] == 'file':
            paths.append(os.path.join(ROOT, spec[1]))
            continue
        path = os.path.join(d, kind + '.json')
        if not os.path.exists(path):
            rc, _, _, _ = run([PLANSIM, kind] + spec + ['-o', path])
            assert rc == 0, (kind, spec)
        paths.append(path)
    return paths


def simulate(model, cluster, strat, path):
    with open(path, 'w') as f:
        json.dump(strat, f)
    rc, out, cpu, _ = run([PLANSIM, 'simulate', model, cluster, path, '--json'], path + '.out')
    if rc != 0:
        with open(path + '.out.err') as f:
            return {'error': 'simulate exit %d: %s' % (rc, f.read().strip()[:160])}
    sim = json.loads(out)
    return {'time_s': sim['iteration_time_s'], 'fits': sim['fits'], 'sim_cpu_s': cpu,
            'peak_gb': sim['peak_memory_bytes'] / 1e9}


def megatron_of_plan(plan):
    """The megatron knobs of a plansim plan, or None when it is not a megatron template."""
    s = plan['strategy']
    ti = s.get('template_info')
    if not ti or ti.get('name') != 'megatron':
        return None
    m = dict(MEGATRON, tp=ti['tp'], pp=ti['pp'], dp=ti['dp'], micro_batch=ti['micro_batch'],
             virtual_stages=ti.get('virtual_stages', 1))
    for k in ('ep', 'etp', 'cp', 'first_stage_layers', 'last_stage_layers'):
        if k in ti:
            m[k] = ti[k]
    for k in ('zero', 'recompute', 'sequence_parallel', 'overlap_grad_reduce'):
        if k in s:
            m[k] = s[k]
    return m


def describe(m):
    if m is None:
        return 'not a megatron strategy'
    parts = ['tp%d pp%d dp%d mb%d' % (m['tp'], m['pp'], m['dp'], m.get('micro_batch', 1))]
    for k in ('ep', 'etp', 'cp'):
        if k in m:
            parts.append('%s%d' % (k, m[k]))
    if m.get('first_stage_layers') or m.get('last_stage_layers'):
        parts.append('stages %s/../%s layers' % (m.get('first_stage_layers') or '=',
                                                 m.get('last_stage_layers') or '='))
    if m.get('virtual_stages', 1) > 1:
        parts.append('vp%d' % m['virtual_stages'])
    parts.append(m.get('recompute', 'none'))
    if m.get('sequence_parallel'):
        parts.append('SP')
    if m.get('zero', 0):
        parts.append('ZeRO%d' % m['zero'])
    if m.get('overlap_grad_reduce'):
        parts.append('overlap')
    return ' '.join(parts)


def calculon_time(case, app, syst, m):
    if m is None:
        return None, 'not expressible'
    if app is None:
        return None, 'not expressible: Calculon models no experts'
    if m.get('first_stage_layers') or m.get('last_stage_layers') or m.get('ep', 1) > 1:
        return None, 'not expressible: uneven stages / experts'
    t, mem, _ = cp.evaluate_strategy(app, syst, m, case['gpus'], case['batch'], case['dtype'])
    if t is None:
        return None, 'Calculon: ' + mem
    return t, '%.1f GB' % (mem / 1e9)


def plansim_searches(case, d, model, cluster):
    rows = []
    searches = [('plansim grid', ['--search', 'grid', '--budget', '%ds' % BUDGET_S,
                                  '--no-baselines'], None),
                ('plansim alpa', ['--search', 'alpa', '--no-baselines'], ALPA_LIMIT_S),
                ('plansim default', ['--budget', '%ds' % BUDGET_S], ALPA_LIMIT_S)]
    if case.get('long_grid') and LONG_BUDGET_S > 0:  # a wall budget that buys ~60 s of CPU
        searches.append(('plansim grid-long', ['--search', 'grid', '--budget', '%ds' %
                                               LONG_BUDGET_S, '--no-baselines'], None))
    for name, extra, limit in searches:
        path = os.path.join(d, name.split()[1] + '.plan.json')
        if os.path.exists(path + '.row.json'):  # a finished search of an earlier run
            with open(path + '.row.json') as f:
                rows.append(json.load(f))
            continue
        rc, _, cpu, wall = run([PLANSIM, 'plan', model, cluster, '-o', path] + extra, path +
                               '.log', limit)
        row = {'plan': name, 'search_cpu_s': cpu, 'search_wall_s': wall, 'rc': rc}
        if os.path.exists(path) and rc in (0, 124, 130, 143):
            with open(path) as f:
                plan = json.load(f)
            row['time_s'] = plan['prediction']['iteration_time_s']
            row['fits'] = plan['prediction'].get('fits')
            row['strategy'] = megatron_of_plan(plan)
            row['detail'] = plan.get('search', {}).get('plan', '')
            row['plan_from'] = plan.get('search', {}).get('plan_from', '')
        with open(path + '.row.json', 'w') as f:
            json.dump(row, f)
        rows.append(row)
    return rows


def calculon_row(app, syst, case, d, model, cluster):
    """Calculon's search (reused from d when done), its best plan simulated by plansim."""
    cached = os.path.join(d, 'calculon-search.json')
    if os.path.exists(cached):
        with open(cached) as f:
            res = json.load(f)
    else:
        res = cp.search(app, syst, case['gpus'], case['batch'], case['dtype'], BUDGET_S)
        with open(cached, 'w') as f:
            json.dump(res, f)
    crow = {'plan': 'Calculon llm-optimal-execution', 'search_cpu_s': res['cpu_s'],
            'search_wall_s': res['wall_s'], 'calculon_search': {k: v for k, v in res.items()
                                                                if k != 'best'}}
    if res['best']:
        crow['strategy'], crow['notes'] = cp.strategy_of(res['best'])
        crow['calculon_s'], crow['calculon_mem'] = res['time_s'], '%.1f GB' % (
            res['mem_bytes'] / 1e9)
        crow.update(simulate(model, cluster, crow['strategy'], os.path.join(d, 'calculon.json')))
    return crow


def run_case(case, out):
    d = os.path.join(out, case['name'])
    os.makedirs(d, exist_ok=True)
    model, cluster = prepare(case, d)
    app, syst = None, cp.system(os.path.join(CAL, 'systems', case['cal_sys']))
    if case['cal_app']:
        app = cp.application(case['cal_app'] if os.path.isabs(case['cal_app']) else
                             os.path.join(os.path.dirname(__file__), 'calculon', case['cal_app']))
    rows = plansim_searches(case, d, model, cluster)
    if app is not None:
        rows.append(calculon_row(app, syst, case, d, model, cluster))
    for label, strat in case['published']:
        row = {'plan': label, 'strategy': strat}
        if strat is not None:
            row.update(simulate(model, cluster, strat, os.path.join(d, 'published-%d.json' %
                                                                     len(rows))))
        rows.append(row)
    for row in rows:
        if 'calculon_s' not in row:
            row['calculon_s'], row['calculon_mem'] = calculon_time(case, app, syst,
                                                                   row.get('strategy'))
        row['megatron'] = describe(row.get('strategy'))
    with open(os.path.join(out, case['name'] + '.result.json'), 'w') as f:
        json.dump(rows, f, indent=1)
    return rows


def fmt(v, spec='%.3f'):
    return '-' if v is None else spec % v


def print_rows(case, rows):
    print('### %s (%d GPUs, batch %d)' % (case['name'], case['gpus'], case['batch']))
    print('| plan | configuration | plansim s | fits | Calculon s | search s (CPU / wall) |')
    print('|---|---|---|---|---|---|')
    for r in rows:
        cal = fmt(r.get('calculon_s')) if isinstance(r.get('calculon_s'), float) else '-'
        extra = r.get('calculon_mem') or ''
        srch = '-' if 'search_cpu_s' not in r else '%.1f / %.1f' % (r['search_cpu_s'],
                                                                     r['search_wall_s'])
        sim = fmt(r.get('time_s'))
        if r.get('peak_gb'):
            sim += ' (%.1f GB)' % r['peak_gb']
        if r.get('error'):
            sim = r['error']
        print('| %s | %s | %s | %s | %s (%s) | %s |' % (
            r['plan'], r['megatron'] if r.get('strategy') else (r.get('detail') or '-'),
            sim, r.get('fits', '-'), cal, extra, srch))
    sys.stdout.flush()


def main(argv):
    out = argv[0] if argv else '/tmp/peers'
    only = argv[1] if len(argv) > 1 else ''
    os.makedirs(out, exist_ok=True)
    for case in CASES:
        if only and only not in case['name']:
            continue
        print_rows(case, run_case(case, out))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
