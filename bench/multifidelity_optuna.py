#!/usr/bin/python3
"""bench/multifidelity_optuna.py: the peer of bench_multifidelity: Optuna and the i-Epoch baselines
replaying the same learning-curve tables (bench/data/curves_<name>.csv), for bench/run-multifidelity.

  /usr/bin/python3 bench/multifidelity_optuna.py --table bench/data/curves_mlp.csv --methods tpe-hyperband,...
                                                  --seeds 1-10 --budget 50 [--groups 4] [--out runs.jsonl]

Methods (Optuna 3.1, Debian's python3-optuna, each seeded with the run's seed, defaults otherwise):
  tpe-hyperband   TPESampler with HyperbandPruner(min_resource=1, max_resource=27, reduction_factor=3)
  tpe             TPESampler alone: every trial trains max_t epochs
  random-median   RandomSampler with MedianPruner (its defaults: 5 start-up trials, no warm-up steps)
  epoch-1, epoch-3  the i-Epoch baselines of Egele et al. 2024: random candidates (a seeded permutation
                  of the table, no repeats) each trained i epochs; the incumbent is the best at i epochs.
                  Sequential (the order does not matter); the incumbent's own full training is not counted.

The study's name is fixed per (method, seed), so that a run repeats exactly (HyperbandPruner's brackets
hash it). Every parameter is suggest_categorical over the table's values (unordered, as bench_multifidelity's
space: every column a choice). The Optuna methods run as bench_multifidelity's fake groups do: G groups
(default 4) on a simulated clock, each epoch of a configuration taking its `epoch_seconds` from the
table; a free group asks the study for a trial (study.ask, define-by-run), and after every epoch the
trial reports val_accuracy (trial.report) and asks the pruner (trial.should_prune); a pruned trial is
told PRUNED, a trial at max_t is told its value. Optuna may suggest a configuration twice (its samplers
do not know the space is finite): a repeat trains again and its epochs count.

Budget and regret as bench_multifidelity: epochs consumed = the sum of the epochs trained; after every
epoch the incumbent is the configuration with the best val_accuracy reported so far (any epoch);
regret = (the table's best val_accuracy at max_t) - (the incumbent's val_accuracy at max_t), recorded at
every multiple of max_t up to --budget x max_t; regret_last_at_x the same with each configuration counted
at the highest epoch reported for it (its latest value) rather than its best. One JSON line per (method, seed), the schema of
bench_multifidelity's.
"""
import argparse
import csv
import heapq
import json
import random
import sys
import time
import warnings


def read_table(path):
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    rd = csv.reader(lines)
    header = next(rd)
    state = header.index("state")
    names = header[:state]
    vcols = [i for i, h in enumerate(header) if h.startswith("val_accuracy_")]
    secs = header.index("epoch_seconds")

    def cell(s):
        try:
            return int(s)
        except ValueError:
            try:
                return float(s)
            except ValueError:
                return s

    rows = []
    for r in rd:
        params = tuple(cell(r[i]) for i in range(state))
        es = float(r[secs])
        rows.append({"params": params, "val": [float(r[i]) for i in vcols], "epoch_seconds": es if es > 0 else 1.0,
                     "i": len(rows)})
    choices = []
    for i in range(len(names)):
        seen = []
        for r in rows:
            if r["params"][i] not in seen:
                seen.append(r["params"][i])
        choices.append(seen)
    index = {r["params"]: r for r in rows}
    best_final = max(r["val"][-1] for r in rows)
    return {"names": names, "choices": choices, "rows": rows, "index": index, "max_t": len(vcols),
            "best_final": best_final}


class Anytime:
    """The incumbent after every epoch, and the regret at every multiple of max_t."""

    def __init__(self, table, budget_x):
        self.t, self.budget_epochs, self.max_t = table, budget_x * table["max_t"], table["max_t"]
        self.consumed, self.best, self.incumbent, self.regret_at = 0, -1.0, None, []
        # regret_last_at_x: each configuration at the highest epoch reported for it (its latest value).
        self.latest, self.regret_last_at = {}, []

    def epoch(self, row, value, step):
        self.consumed += 1
        if value > self.best:
            self.best, self.incumbent = value, row
        last = self.latest.get(row["params"])
        if last is None or step >= last[0]:
            self.latest[row["params"]] = (step, value, row)
        if self.consumed % self.max_t == 0:
            self.regret_at.append(self.t["best_final"] - self.incumbent["val"][-1])
            arg = max(self.latest.values(), key=lambda x: (x[1], -x[2]["i"]))  # ties: the first row, as bench_multifidelity
            self.regret_last_at.append(self.t["best_final"] - arg[2]["val"][-1])

    def spent(self):
        return self.consumed >= self.budget_epochs

    def finish(self, budget_x):
        while len(self.regret_at) < budget_x:
            self.regret_at.append(self.t["best_final"] - (self.incumbent["val"][-1] if self.incumbent else 0.0))
            self.regret_last_at.append(self.regret_last_at[-1] if self.regret_last_at else self.regret_at[-1])


def run_optuna(table, method, seed, budget_x, groups):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")
    max_t = table["max_t"]
    if method == "tpe-hyperband":
        sampler = optuna.samplers.TPESampler(seed=seed)
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_t, reduction_factor=3)
    elif method == "tpe":
        sampler, pruner = optuna.samplers.TPESampler(seed=seed), optuna.pruners.NopPruner()
    elif method == "random-median":
        sampler, pruner = optuna.samplers.RandomSampler(seed=seed), optuna.pruners.MedianPruner()
    else:
        sys.exit(f"multifidelity_optuna: unknown method {method}")
    # A fixed study name: HyperbandPruner puts a trial in a bracket by a hash of the study's name and the
    # trial's number, and the default name is a random one (the run would not repeat).
    study = optuna.create_study(study_name=f"replay-{method}-{seed}", direction="maximize", sampler=sampler,
                                pruner=pruner)
    at = Anytime(table, budget_x)
    t0 = time.monotonic()
    sim, trials, pruned, done, repeats = 0.0, 0, 0, 0, 0
    seen = set()
    events = []  # (time, group, trial, row, step)
    counter = 0

    def start(group, now):
        nonlocal trials, repeats, counter
        trial = study.ask()
        params = tuple(trial.suggest_categorical(n, c) for n, c in zip(table["names"], table["choices"]))
        row = table["index"][params]
        trials += 1
        repeats += params in seen
        seen.add(params)
        counter += 1
        heapq.heappush(events, (now + row["epoch_seconds"], counter, group, trial, row, 1))

    for g in range(groups):
        start(g, 0.0)
    while events and not at.spent():
        sim, _, g, trial, row, step = heapq.heappop(events)
        v = row["val"][step - 1]
        at.epoch(row, v, step)
        trial.report(v, step)
        if step >= max_t:
            study.tell(trial, v)
            done += 1
        elif trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            pruned += 1
        else:
            counter += 1
            heapq.heappush(events, (sim + row["epoch_seconds"], counter, g, trial, row, step + 1))
            continue
        if not at.spent():
            start(g, sim)
    at.finish(budget_x)
    return {"consumed_epochs": at.consumed, "regret_at_x": at.regret_at, "regret_last_at_x": at.regret_last_at,
            "trials": trials, "done": done,
            "pruned": pruned, "repeated_configurations": repeats, "sim_seconds": sim,
            "wall_seconds": time.monotonic() - t0, "finished_early": at.consumed < at.budget_epochs}


def run_epoch_baseline(table, epochs, seed, budget_x):
    """Candidates in a seeded random order, `epochs` each: after k x max_t epochs, the first
    k x max_t // epochs of them are trained (all of the table, at most); the incumbent is the best of
    those at `epochs`."""
    t0 = time.monotonic()
    order = list(table["rows"])
    random.Random(seed).shuffle(order)
    max_t, regret_at, best, incumbent, n = table["max_t"], [], -1.0, None, 0
    for k in range(1, budget_x + 1):
        while n < min(k * max_t // epochs, len(order)):
            v = order[n]["val"][epochs - 1]
            if v > best:
                best, incumbent = v, order[n]
            n += 1
        regret_at.append(table["best_final"] - incumbent["val"][-1])
    consumed = n * epochs
    # Every candidate's latest value is its value at `epochs`: both definitions agree.
    return {"consumed_epochs": consumed, "regret_at_x": regret_at, "regret_last_at_x": list(regret_at), "trials": n, "done": 0, "pruned": 0,
            "repeated_configurations": 0, "sim_seconds": 0.0, "wall_seconds": time.monotonic() - t0,
            "finished_early": consumed < budget_x * max_t}


def parse_seeds(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", required=True)
    ap.add_argument("--methods", default="tpe-hyperband,tpe,random-median,epoch-1,epoch-3")
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--budget", type=int, default=50, help="the largest budget, in full trainings (x max_t epochs)")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    table = read_table(a.table)
    name = a.table.rsplit("/", 1)[-1].removesuffix(".csv").removeprefix("curves_")
    out = open(a.out, "a") if a.out else sys.stdout
    for method in [m for m in a.methods.split(",") if m]:
        for seed in parse_seeds(a.seeds):
            if method.startswith("epoch-"):
                r = run_epoch_baseline(table, int(method.split("-")[1]), seed, a.budget)
                groups = 1
            else:
                r = run_optuna(table, method, seed, a.budget, a.groups)
                groups = a.groups
            r = {"table": name, "method": method, "seed": seed, "groups": groups, "max_t": table["max_t"],
                 "budget_epochs": a.budget * table["max_t"], **r}
            out.write(json.dumps(r) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
