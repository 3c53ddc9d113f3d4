#!/usr/bin/python3
"""bench/search_optuna.py: Optuna's samplers on the problems of bench_search, for bench/run-search.

The same problems (the formulas of search/test_functions.cpp, written again here), budgets and
seeds as bench_search, with Optuna 3.1's TPESampler (its defaults: 10 random startup trials,
independent univariate estimators), CmaEsSampler and RandomSampler, each seeded with the run's
seed. One sequential study of max(budgets) trials per (problem, sampler, seed); the regret after
each budget is read from the same study (Optuna's samplers do not know the budget).

Latency: the time of one trial (study.ask() + study.tell()) of TPESampler on a study that already
holds n finished trials of uniform random points (added with study.add_trials), 8 parameters;
median over --repeats trials, of the wall time and of the process CPU time.

Writes raw JSON (the schema of bench_search's) to --out or stdout. Run with /usr/bin/python3.
"""
import argparse
import json
import math
import multiprocessing
import random
import re
import statistics
import sys
import time

import optuna

PI = math.pi


def branin(x):
    a, b, c, r, s, t = 1.0, 5.1 / (4 * PI * PI), 5 / PI, 6.0, 10.0, 1 / (8 * PI)
    q = x[1] - b * x[0] * x[0] + c * x[0] - r
    return a * q * q + s * (1 - t) * math.cos(x[0]) + s


_H_ALPHA = [1.0, 1.2, 3.0, 3.2]
_H_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
_H_P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
        [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(x):
    out = 0.0
    for i in range(4):
        e = sum(_H_A[i][j] * (x[j] - _H_P[i][j]) ** 2 for j in range(6))
        out -= _H_ALPHA[i] * math.exp(-e)
    return out


def rosenbrock(x):
    return sum(100 * (x[i + 1] - x[i] * x[i]) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def levy(x):
    w = [1 + (v - 1) / 4 for v in x]
    out = math.sin(PI * w[0]) ** 2
    for i in range(len(x) - 1):
        out += (w[i] - 1) ** 2 * (1 + 10 * math.sin(PI * w[i] + 1) ** 2)
    out += (w[-1] - 1) ** 2 * (1 + math.sin(2 * PI * w[-1]) ** 2)
    return out


def ackley(x):
    d = len(x)
    sq = sum(v * v for v in x)
    cs = sum(math.cos(2 * PI * v) for v in x)
    return -20 * math.exp(-0.2 * math.sqrt(sq / d)) - math.exp(cs / d) + 20 + math.e


# name -> (function, natural dim, low, high, optimum); per-dimension boxes for branin.
FUNCTIONS = {
    "branin": (branin, 2, [-5.0, 0.0], [10.0, 15.0], 0.39788735772973816),
    "hartmann6": (hartmann6, 6, 0.0, 1.0, -3.3223680114155147),
    "rosenbrock": (rosenbrock, 2, -5.0, 10.0, 0.0),
    "levy": (levy, 2, -10.0, 10.0, 0.0),
    "ackley": (ackley, 2, -32.768, 32.768, 0.0),
}


def problem(pid):
    """'levy10' -> levy in 10 dimensions; 'branin', 'hartmann6' -> their own dimension."""
    if pid in FUNCTIONS:
        name, dim = pid, FUNCTIONS[pid][1]
    else:
        m = re.fullmatch(r"([a-z]+?)(\d+)", pid)
        if not m or m.group(1) not in FUNCTIONS:
            sys.exit(f"search_optuna.py: unknown problem {pid}")
        name, dim = m.group(1), int(m.group(2))
    f, _, lo, hi, opt = FUNCTIONS[name]
    low = lo if isinstance(lo, list) else [lo] * dim
    high = hi if isinstance(hi, list) else [hi] * dim
    return f, dim, low, high, opt


def make_sampler(algorithm, seed):
    if algorithm == "optuna-tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if algorithm == "optuna-cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if algorithm == "optuna-random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(algorithm)


def quality_run(job):
    pid, algorithm, seed, budgets = job
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    f, dim, low, high, opt = problem(pid)

    def objective(trial):
        return f([trial.suggest_float(f"x{i + 1}", low[i], high[i]) for i in range(dim)])

    t0 = time.monotonic()
    study = optuna.create_study(direction="minimize", sampler=make_sampler(algorithm, seed))
    study.optimize(objective, n_trials=max(budgets))
    values = [t.value for t in study.trials]
    regret = {str(b): min(values[:b]) - opt for b in budgets}
    return {"source": "optuna", "problem": pid, "algorithm": algorithm, "seed": seed, "regret": regret,
            "seconds": time.monotonic() - t0}


def latency_point(n, dim, repeats):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    f, _, low, high, _ = problem(f"levy{dim}")
    dists = {f"x{i + 1}": optuna.distributions.FloatDistribution(low[i], high[i]) for i in range(dim)}
    rng = random.Random(99 + n)
    trials = []
    for _ in range(n):
        params = {k: rng.uniform(d.low, d.high) for k, d in dists.items()}
        trials.append(optuna.trial.create_trial(params=params, distributions=dists,
                                                value=f([params[f"x{i + 1}"] for i in range(dim)])))
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=7))
    study.add_trials(trials)
    ms, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        trial = study.ask(dists)
        study.tell(trial, f([trial.params[f"x{i + 1}"] for i in range(dim)]))
        cpu.append((time.process_time() - c0) * 1000)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"source": "optuna", "algorithm": "optuna-tpe", "problem": f"levy{dim}", "dim": dim, "n": n,
            "repeats": repeats, "median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms),
            "max_ms": max(ms), "first_ms": ms[0], "median_cpu_ms": statistics.median(cpu),
            "what": "ask + tell of one trial"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="")
    ap.add_argument("--problems", default="branin,hartmann6,levy10,rosenbrock4,ackley4")
    ap.add_argument("--algorithms", default="optuna-tpe,optuna-cmaes,optuna-random")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--budgets", default="50,100")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--no-latency", action="store_true")
    a = ap.parse_args()
    budgets = sorted(int(b) for b in a.budgets.split(","))
    problems = [p for p in a.problems.split(",") if p]
    for p in problems:
        problem(p)

    report = {"optuna_version": optuna.__version__, "budgets": budgets, "seeds": a.seeds, "first_seed": a.first_seed}
    t0 = time.monotonic()
    if not a.no_quality:
        jobs = [(p, algo, a.first_seed + s, budgets) for p in problems for algo in a.algorithms.split(",")
                for s in range(a.seeds)]
        with multiprocessing.Pool(a.processes) as pool:
            runs = []
            for r in pool.imap(quality_run, jobs):
                print(f"  {r['problem']:<12} {r['algorithm']:<14} seed {r['seed']}: regret@{budgets[-1]} "
                      f"{r['regret'][str(budgets[-1])]:.4g} ({r['seconds']:.2f} s)", file=sys.stderr, flush=True)
                runs.append(r)
        report["quality"] = runs
    t1 = time.monotonic()
    if not a.no_latency:
        report["latency"] = []
        for n in (100, 500, 1000):
            r = latency_point(n, 8, a.repeats)
            print(f"  latency optuna-tpe levy8 n={n}: median {r['median_ms']:.2f} ms", file=sys.stderr, flush=True)
            report["latency"].append(r)
    report["quality_seconds"] = t1 - t0
    report["latency_seconds"] = time.monotonic() - t1
    text = json.dumps(report, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
