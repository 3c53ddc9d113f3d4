#!/usr/bin/python3
"""bench/search_optuna.py: Optuna's samplers on the problems of bench_search, for bench/run-search.

The same problems, budgets and seeds as bench_search, with Optuna 3.1's TPESampler (its defaults:
10 random startup trials, independent univariate estimators), TPESampler(multivariate=True),
CmaEsSampler and RandomSampler, each seeded with the run's seed. One sequential study of
max(budgets) trials per (problem, sampler, seed); the regret and the number of distinct
configurations after each budget are read from the same study (Optuna's samplers do not know the
budget).

The problems come from `bench_search --dump-problems FILE` (--definitions FILE here): each one's
space (floats, ints, choices, conditions), its known optimum and what its value is made of: the
test function's name (the formulas of search/test_functions.cpp are written again below) and for
a discretised one its grid's points; the NAS cell's effect tables; the mixed model's terms; the
tabulated benchmark's CSV; a real table's CSV (each evaluation one seed's value, drawn uniformly per
evaluation from the run's random.Random, as bench_search draws from its own Rng; the regret is the
incumbent's mean over the seeds). Nothing random is redrawn here. Before running, every problem's value
is checked against the points with values that bench_search wrote (`checks`) and its optimum's
point: a mismatch stops the script.

The space is defined by run, in bench_search's parents-first order: a float is suggest_float (log
when log), an int suggest_int, a choice suggest_categorical (Optuna has no ordinal type, so an
ordered choice is a categorical one, as a user would write it); a conditional parameter is
suggested only when its condition holds. CmaEsSampler samples categorical and conditional
parameters with its independent (random) sampler, as Optuna does.

Latency: the time of one trial (study.ask() + study.tell()) of TPESampler on a study that already
holds n finished trials of uniform random points (added with study.add_trials), 8 parameters;
median over --repeats trials, of the wall time and of the process CPU time.

Writes raw JSON (the schema of bench_search's) to --out or stdout. Run with /usr/bin/python3.
"""
import argparse
import csv
import json
import math
import multiprocessing
import random
import statistics
import sys
import time
import warnings

try:
    import optuna
except ImportError:  # bench/check-search imports the evaluators without Optuna
    optuna = None

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


_H3_A = [[3, 10, 30], [0.1, 10, 35], [3, 10, 30], [0.1, 10, 35]]
_H3_P = [[0.3689, 0.1170, 0.2673], [0.4699, 0.4387, 0.7470], [0.1091, 0.8732, 0.5547], [0.0381, 0.5743, 0.8828]]


def hartmann3(x):
    out = 0.0
    for i in range(4):
        e = 0.0
        for j in range(3):
            e += _H3_A[i][j] * (x[j] - _H3_P[i][j]) * (x[j] - _H3_P[i][j])
        out -= _H_ALPHA[i] * math.exp(-e)
    return out


# name -> the function (the names of search/test_functions.cpp, and bench/search_problems.cpp's hartmann3)
FUNCTIONS = {"branin": branin, "hartmann3": hartmann3, "hartmann6": hartmann6, "rosenbrock": rosenbrock, "levy": levy,
             "ackley": ackley}

MASK64 = (1 << 64) - 1


def splitmix64(state):
    """(new state, output) as common/rng.h's splitmix64."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def noise_z(seed, index):
    """bench/search_problems.cpp's noise_z: (u1 + u2 + u3 + u4 - 2) * sqrt(3)."""
    state = seed ^ ((index * 0x9E3779B97F4A7C15) & MASK64)
    total = 0.0
    for _ in range(4):
        state, z = splitmix64(state)
        total += float(z >> 11) * 2.0 ** -53
    return (total - 2.0) * math.sqrt(3.0)


def space_levels(space):
    """Each parameter's values in order: an int's low..high by step, a choice's values."""
    return [list(range(int(p["low"]), int(p["high"]) + 1, int(p["step"]))) if p["type"] == "int" else p["choices"]
            for p in space]


def table_rows(path):
    """The rows of a table CSV, without its '# made by' lines."""
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def parse_cell(text):
    """A CSV cell as bench_search reads it: an integer, a number, or else text."""
    if text and not any(c in text for c in ".eE"):
        try:
            return int(text)
        except ValueError:
            pass
    try:
        return float(text)
    except ValueError:
        return text


def value_key(v):
    """The mixed model's key of a value: the text itself, a number as JSON writes it."""
    return v if isinstance(v, str) else json.dumps(v)


def real_key(names, params):
    """A configuration's key in a real table: its active parameters' values (as JSON), in the space's order."""
    return tuple((n, json.dumps(params[n])) for n in names if n in params)


def real_table(d):
    """A real table's (mean validation error, each seed's validation error) by configuration key; an empty cell
    is an inactive (conditional) parameter."""
    mean, seeds = {}, {}
    for row in table_rows(d["path"]):
        params = {n: parse_cell(row[n]) for n in d["params"] if row[n] != ""}
        key = real_key(d["params"], params)
        mean[key] = 1.0 - float(row["val_score_mean"] if "val_score_mean" in row else row["val_accuracy_mean"])
        seeds[key] = [1.0 - float(row[c]) for c in row if c.startswith(("val_score_seed", "val_accuracy_seed"))]
    return mean, seeds


def make_draw(d, rng):
    """A real table's evaluation as the searcher sees it: one seed's validation error, the seed drawn uniformly
    with rng per evaluation (bench_search draws with its own generator: the same distribution, not the same
    draws). Other problems: make_evaluator's value."""
    if d["kind"] != "real-table":
        return make_evaluator(d)
    _, seeds = real_table(d)
    return lambda params: rng.choice(seeds[real_key(d["params"], params)])


def make_truth(d):
    """The noise-free objective of problem definition d (the same as make_evaluator's unless noisy)."""
    return make_evaluator(d["base"]) if d["kind"] == "noisy" else make_evaluator(d)


def make_evaluator(d):
    """The objective of problem definition d: params (a dict) -> value (with its noise, for a noisy one)."""
    kind = d["kind"]
    if kind == "noisy":
        truth, names, levels = make_evaluator(d["base"]), [p["name"] for p in d["space"]], space_levels(d["space"])
        seed, sd = d["noise"]["seed"], d["noise"]["sd"]

        def noisy(params):
            index, radix = 0, 1
            for name, values in zip(names, levels):
                index += values.index(params[name]) * radix
                radix *= len(values)
            return truth(params) + sd * noise_z(seed, index)
        return noisy
    if kind == "continuous":
        f = FUNCTIONS[d["function"]]
        names = [p["name"] for p in d["space"]]
        return lambda params: f([params[n] for n in names])
    if kind == "ordinal" or (kind == "categorical" and "function" in d):  # a grid, its levels ordered or not
        f, points, as_int = FUNCTIONS[d["function"]], d["points"], d["as_int"]
        return lambda params: f([points[i][params[f"x{i + 1}"]] if as_int else params[f"x{i + 1}"]
                                 for i in range(len(points))])
    if kind == "categorical":
        ops, unary, pairs = d["ops"], d["unary"], d["pairs"]
        index = {op: k for k, op in enumerate(ops)}

        def cell(params):
            k = [index[params[f"e{i + 1}"]] for i in range(len(unary))]
            v = 0.0
            for i in range(len(unary)):
                v += unary[i][k[i]]
            for p in pairs:
                v += p["table"][k[p["i"]]][k[p["j"]]]
            return v
        return cell
    if kind == "mixed":
        m = d["model"]
        transforms = {"log10": math.log10, "log2": math.log2, "": lambda x: x}

        def mixed(params):
            v = m["offset"][value_key(params[m["branch"]])]
            for t in m["terms"]:
                if t["param"] in params:
                    u = transforms[t["transform"]](params[t["param"]])
                    v += t["weight"] * (u - t["center"]) * (u - t["center"])
            for name, table in sorted(m["choice_terms"].items()):
                if name in params:
                    v += table[value_key(params[name])]
            return v
        return mixed
    if kind == "real-table":
        mean, _ = real_table(d)
        return lambda params: mean[real_key(d["params"], params)]
    if kind == "table":
        names, fixed = d["params"], d.get("fixed", {})
        error = {}
        for row in table_rows(d["path"]):
            if all(parse_cell(row[k]) == v for k, v in fixed.items()):
                error[tuple(json.dumps(parse_cell(row[n])) for n in names)] = 1.0 - float(row["val_accuracy_mean"])
        return lambda params: error[tuple(json.dumps(params[n]) for n in names)]
    raise ValueError(f"unknown problem kind {kind}")


def check_problem(pid, d, f):
    """Stops unless f gives bench_search's values at its check points and the noise-free objective its
    optimum at the optimum's point."""
    points = [(c["params"], c["value"], f) for c in d["checks"]]
    if "argmin" in d:
        points.append((d["argmin"], d["optimum"], make_truth(d)))
    for params, want, fn in points:
        got = fn(params)
        if abs(got - want) > 1e-9 * max(1.0, abs(want)):
            sys.exit(f"search_optuna.py: {pid}: value {got!r} at {params}, bench_search has {want!r}")


def suggest_all(trial, space):
    """Suggests the active parameters of the space, parents first, as bench_search's Space does."""
    params = {}
    for p in space:
        w = p.get("when")
        if w and (w["parent"] not in params or params[w["parent"]] not in w["values"]):
            continue
        name, kind = p["name"], p["type"]
        if kind == "float":
            params[name] = trial.suggest_float(name, p["low"], p["high"], log=p["log"])
        elif kind == "int":
            params[name] = trial.suggest_int(name, int(p["low"]), int(p["high"]), step=int(p["step"]), log=p["log"])
        elif kind == "choice":
            params[name] = trial.suggest_categorical(name, p["choices"])
        else:
            params[name] = p["value"]
    return params


def make_sampler(algorithm, seed):
    if algorithm == "optuna-tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if algorithm == "optuna-tpe-mv":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if algorithm == "optuna-cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if algorithm == "optuna-random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(algorithm)


DEFINITIONS = {}  # problem id -> definition, set in each worker by init_worker


def init_worker(definitions):
    DEFINITIONS.update(definitions)
    warnings.filterwarnings("ignore")  # CmaEsSampler's note on falling back for categorical parameters
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def quality_run(job):
    pid, algorithm, seed, budgets = job
    d = DEFINITIONS[pid]
    budgets = budgets or d["budgets"]
    f, truth = make_draw(d, random.Random(seed * 1000 + 38)), make_truth(d)
    space = d["space"]
    configs, truths = [], []

    def objective(trial):
        params = suggest_all(trial, space)
        configs.append(json.dumps(params, sort_keys=True))
        truths.append(truth(params))
        return f(params)

    t0 = time.monotonic()
    study = optuna.create_study(direction="minimize", sampler=make_sampler(algorithm, seed))
    study.optimize(objective, n_trials=max(budgets))
    values = [t.value for t in study.trials]

    def incumbent_truth(b):  # the noise-free value of the first best value seen (bench_search's rule)
        best = min(range(b), key=lambda k: (values[k], k))
        return truths[best]
    regret = {str(b): incumbent_truth(b) - d["optimum"] for b in budgets}
    distinct = {str(b): len(set(configs[:b])) for b in budgets}
    return {"source": "optuna", "problem": pid, "algorithm": algorithm, "seed": seed, "regret": regret,
            "distinct": distinct, "seconds": time.monotonic() - t0}


def latency_point(algorithm, n, dim, repeats):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    f = levy
    dists = {f"x{i + 1}": optuna.distributions.FloatDistribution(-10.0, 10.0) for i in range(dim)}
    rng = random.Random(99 + n)
    trials = []
    for _ in range(n):
        params = {k: rng.uniform(d.low, d.high) for k, d in dists.items()}
        trials.append(optuna.trial.create_trial(params=params, distributions=dists,
                                                value=f([params[f"x{i + 1}"] for i in range(dim)])))
    study = optuna.create_study(direction="minimize", sampler=make_sampler(algorithm, 7))
    study.add_trials(trials)
    ms, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        trial = study.ask(dists)
        study.tell(trial, f([trial.params[f"x{i + 1}"] for i in range(dim)]))
        cpu.append((time.process_time() - c0) * 1000)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"source": "optuna", "algorithm": algorithm, "problem": f"levy{dim}", "dim": dim, "n": n,
            "repeats": repeats, "median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms),
            "max_ms": max(ms), "first_ms": ms[0], "median_cpu_ms": statistics.median(cpu),
            "what": "ask + tell of one trial"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="")
    ap.add_argument("--definitions", required=True, help="the problems' definitions: bench_search --dump-problems")
    ap.add_argument("--problems", default="", help="the problems to run (default: all the definitions)")
    ap.add_argument("--algorithms", default="optuna-tpe,optuna-tpe-mv,optuna-cmaes,optuna-random")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--budgets", default="", help="default: each problem's own (its definition's budgets)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--no-latency", action="store_true")
    a = ap.parse_args()
    if optuna is None:
        sys.exit("search_optuna.py: Optuna is not installed (Debian's python3-optuna: tools/setup-deps --bench)")
    budgets = sorted(int(b) for b in a.budgets.split(",") if b)
    with open(a.definitions) as f:
        definitions = json.load(f)
    problems = [p for p in a.problems.split(",") if p] or list(definitions)
    for p in problems:
        if p not in definitions:
            sys.exit(f"search_optuna.py: no definition of {p} in {a.definitions}")
        check_problem(p, definitions[p], make_evaluator(definitions[p]))

    report = {"optuna_version": optuna.__version__, "budgets": budgets, "seeds": a.seeds, "first_seed": a.first_seed}
    t0 = time.monotonic()
    if not a.no_quality:
        jobs = [(p, algo, a.first_seed + s, budgets) for p in problems for algo in a.algorithms.split(",")
                for s in range(a.seeds)]
        with multiprocessing.Pool(a.processes, initializer=init_worker, initargs=(definitions,)) as pool:
            runs = []
            for r in pool.imap_unordered(quality_run, jobs):
                last = list(r["regret"])[-1]
                print(f"  {r['problem']:<18} {r['algorithm']:<14} seed {r['seed']}: regret@{last} "
                      f"{r['regret'][last]:.4g}, {r['distinct'][last]} distinct "
                      f"({r['seconds']:.2f} s)", file=sys.stderr, flush=True)
                runs.append(r)
        report["quality"] = runs
    t1 = time.monotonic()
    if not a.no_latency:
        report["latency"] = []
        for algorithm in ("optuna-tpe", "optuna-tpe-mv"):
            for n in (100, 500, 1000):
                r = latency_point(algorithm, n, 8, a.repeats)
                print(f"  latency {algorithm} levy8 n={n}: median {r['median_ms']:.2f} ms", file=sys.stderr, flush=True)
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
