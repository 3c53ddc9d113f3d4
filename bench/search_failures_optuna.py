#!/usr/bin/python3
"""bench/search_failures_optuna.py: Optuna's samplers on bench_search_failures' problems, for
bench/run-search-failures.

  search_failures_optuna.py --checks CHECKS.json --problem NAME --sampler tpe|tpe-mv|random
                            [--seeds 20] [--budget 50]

The problems' formulas are written again below (bench/search_failures.cpp has the originals);
before running, each is checked against the points and values that `bench_search_failures
--checks` wrote: a mismatch stops the script. A trial where the problem fails is told as
TrialState.FAIL, as a user's objective that raises (a diverged training) ends in Optuna. Optuna has
no ordinal type, so an ordered choice is a categorical one, as a user would write it. One sequential
study per seed (1000, 1001, ...), seeded with it. Writes one JSON line per seed, the schema of
bench_search_failures'.
"""
import argparse
import json
import math
import sys

optuna = None  # imported in main(): bench/check-search-failures reads the formulas without Optuna

RATES = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]


def hartmann6(x):
    a = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
    p = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]
    alpha = [1.0, 1.2, 3.0, 3.2]
    s = 0.0
    for i in range(4):
        e = sum(a[i][j] * (x[j] - p[i][j] * 1e-4) ** 2 for j in range(6))
        s -= alpha[i] * math.exp(-e)
    return s


def diverge_lr(p):
    lr = p["lr"]
    d = math.log10(0.3) - math.log10(lr)
    return None if lr > 0.3 else 0.2 + 0.1 * d * d


def wide_lr(p):
    lr = p["lr"]
    d = math.log10(lr) + 2.3
    return None if lr > 0.05 else 0.3 + 0.05 * d * d


def optimizer_lr(p):
    opt = p["optimizer"]
    base = {"sgd": 0.30, "momentum": 0.24, "adam": 0.22}[opt]
    limit = {"sgd": 0.5, "momentum": 0.1, "adam": 0.01}[opt] * math.sqrt(p["batch"] / 64.0)
    if p["lr"] > limit:
        return None
    dl = math.log10(p["lr"]) - math.log10(0.6 * limit)
    dw = math.log10(p["weight_decay"]) + 4.0
    db = math.log2(p["batch"]) - 6.0
    return base + 0.08 * dl * dl + 0.02 * dw * dw + 0.0075 * db * db


def hartmann6_cliff(p):
    x = [p[f"x{i}"] for i in range(1, 7)]
    return None if x[5] > 0.7 else hartmann6(x)


def deep_net(p):
    depth, width, lr, dropout = p["depth"], p["width"], p["lr"], p["dropout"]
    if lr >= 0.1 or (lr >= 0.03 and depth >= 5):
        return None
    dl, dd, dw, dp = math.log10(lr) + 2.0, (depth - 4.0) / 4.0, math.log2(width) - 8.0, dropout - 0.2
    return 0.1 + 0.05 * dl * dl + 0.04 * dd * dd + 0.004 * dw * dw + 0.3 * dp * dp + 0.01 * dl * dd


def space_of(name, trial):
    if name == "diverge-lr":
        return {"lr": trial.suggest_float("lr", 1e-4, 1.0, log=True)}
    if name == "wide-lr":
        return {"lr": trial.suggest_float("lr", 1e-5, 1e3, log=True)}
    if name == "optimizer-lr":
        return {"optimizer": trial.suggest_categorical("optimizer", ["sgd", "momentum", "adam"]),
                "lr": trial.suggest_float("lr", 1e-5, 1.0, log=True),
                "batch": trial.suggest_int("batch", 16, 512, log=True),
                "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-1, log=True)}
    if name == "hartmann6-cliff":
        return {f"x{i}": trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(1, 7)}
    return {"depth": trial.suggest_int("depth", 1, 8),
            "width": trial.suggest_categorical("width", [16, 32, 64, 128, 256, 512]),
            "lr": trial.suggest_categorical("lr", RATES),
            "dropout": trial.suggest_categorical("dropout", [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])}


PROBLEMS = {"diverge-lr": diverge_lr, "wide-lr": wide_lr, "optimizer-lr": optimizer_lr, "hartmann6-cliff": hartmann6_cliff, "deep-net": deep_net}


def check(checks):
    for c in checks:
        f = PROBLEMS[c["problem"]]
        for pt in c["points"]:
            got, want = f(pt["params"]), pt["value"]
            if (got is None) != (want is None) or (got is not None and abs(got - want) > 1e-9 * max(1.0, abs(want))):
                sys.exit(f"search_failures_optuna: {c['problem']} at {pt['params']}: {got} here, {want} in bench_search_failures")


def sampler_of(kind, seed):
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if kind == "tpe-mv":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    return optuna.samplers.RandomSampler(seed=seed)


def run_seed(problem, optimum, kind, seed, budget):
    study = optuna.create_study(sampler=sampler_of(kind, seed))
    failed, best = 0, math.inf
    for _ in range(budget):
        trial = study.ask()
        v = PROBLEMS[problem](space_of(problem, trial))
        if v is None:
            failed += 1
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            best = min(best, v)
            study.tell(trial, v)
    finite = math.isfinite(best)
    return {"problem": problem, "algorithm": "optuna-" + kind, "seed": seed, "budget": budget, "failed": failed,
            "best": best if finite else None, "regret": best - optimum if finite else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checks", required=True)
    ap.add_argument("--problem", required=True, choices=sorted(PROBLEMS))
    ap.add_argument("--sampler", required=True, choices=["tpe", "tpe-mv", "random"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=50)
    a = ap.parse_args()
    with open(a.checks) as f:
        checks = json.load(f)
    check(checks)
    optimum = next(c["optimum"] for c in checks if c["problem"] == a.problem)
    global optuna
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for s in range(a.seeds):
        print(json.dumps(run_seed(a.problem, optimum, a.sampler, 1000 + s, a.budget)), flush=True)


if __name__ == "__main__":
    main()
