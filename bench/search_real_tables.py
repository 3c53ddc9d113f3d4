"""bench/search_real_tables.py: the scikit-learn tables of bench/make-search-tables (issue 38), HPOBench-like.

Each table is a full grid of a scikit-learn model's hyperparameters on a data set that ships with scikit-learn
(digits, breast cancer, wine, diabetes) or on a Fashion-MNIST subset (Debian's dataset-fashion-mnist files), every
configuration trained once per seed. What a seed changes: the split of the data set's training pool into a
training and a validation part (70/30, stratified for a classifier) and the model's random_state. The test part is
fixed (a quarter of the data set, or Fashion-MNIST's t10k images), so each seed's validation score is one noisy
measurement of the configuration, as one real training is.

A table's grid is a list of parameters, parents first: its values (the levels), whether they are ordered
(`ordered`: numbers with an order to use) or not (categorical), and for a conditional one `when` (parent, values):
it is active only when its parent has one of those values, and its cell is empty in the rows where it is not. The
CSV's second line `# space: [...]` is the grid as JSON (what bench_search reads to type the parameters).

Scores: the accuracy for a classifier, R^2 for a regressor, clipped at -1 (a diverged fit counts at most as badly
as predicting twice the error of the mean). A fit that raises counts at the score of a constant predictor (the
majority class's accuracy, R^2 = 0) and in the row's `failed_seeds`.
"""
import gzip
import itertools
import json
import os
import struct
import time
import warnings

import numpy as np

FASHION_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist (trainers/trainer_settings.h)


def P(name, values, ordered, when=None):
    """A grid parameter: its levels, ordered or not, and maybe its condition (parent, [values])."""
    return {"name": name, "values": values, "ordered": ordered, "when": when}


# --- the data sets -------------------------------------------------------------------------------------------

def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8)


def fashion(pool, test):
    """`pool` training images (a fixed random subset of the 60,000) and the first `test` t10k images, each
    2x2-average-pooled to 14x14 = 196 features in [0, 1]."""
    def load(kind):
        x = _idx(os.path.join(FASHION_DIR, f"{kind}-images-idx3-ubyte.gz")).astype(np.float64) / 255.0
        y = _idx(os.path.join(FASHION_DIR, f"{kind}-labels-idx1-ubyte.gz")).astype(np.int64)
        x = x.reshape(-1, 14, 2, 14, 2).mean(axis=(2, 4)).reshape(len(x), -1)
        return x, y
    x, y = load("train")
    pick = np.random.RandomState(0).choice(len(x), pool, replace=False)
    xt, yt = load("t10k")
    return x[pick], y[pick], xt[:test], yt[:test]


def dataset(name):
    """(pool X, pool y, test X, test y, task): the training pool the seeds split, the fixed test part."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split
    if name == "fashion":
        return (*fashion(1200, 1000), "classification")
    loaders = {"digits": datasets.load_digits, "breast": datasets.load_breast_cancer, "wine": datasets.load_wine,
               "diabetes": datasets.load_diabetes}
    x, y = loaders[name](return_X_y=True)
    task = "regression" if name == "diabetes" else "classification"
    xp, xt, yp, yt = train_test_split(x, y, test_size=0.25, random_state=0, stratify=None if task == "regression" else y)
    return xp, yp, xt, yt, task


# --- the models ----------------------------------------------------------------------------------------------

def scaler(kind):
    from sklearn.preprocessing import MinMaxScaler, StandardScaler
    return {"none": None, "standard": StandardScaler(), "minmax": MinMaxScaler()}[kind]


def make_svm(p, seed):
    from sklearn.svm import SVC
    return SVC(kernel=p["kernel"], C=p["C"], gamma=p.get("gamma", "scale"), degree=p.get("degree", 3),
               class_weight=None if p.get("class_weight", "none") == "none" else "balanced", max_iter=20000,
               random_state=seed)


def make_forest(cls):
    def make(p, seed):
        kw = {k: p[k] for k in ("n_estimators", "max_depth", "max_features", "min_samples_leaf", "min_samples_split",
                                 "criterion") if k in p}
        if "bootstrap" in p:
            kw["bootstrap"] = p["bootstrap"] == "true"
        return cls(random_state=seed, n_jobs=1, **kw)
    return make


def make_gb(regressor):
    def make(p, seed):
        from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor
        kw = {k: p[k] for k in ("n_estimators", "learning_rate", "max_depth", "subsample", "loss") if k in p}
        if "max_features" in p:
            kw["max_features"] = None if p["max_features"] == "all" else p["max_features"]
        return (GradientBoostingRegressor if regressor else GradientBoostingClassifier)(random_state=seed, **kw)
    return make


def make_logreg(p, seed):
    from sklearn.linear_model import LogisticRegression
    penalty = p.get("penalty", "l2")
    return LogisticRegression(C=p["C"], penalty=penalty, l1_ratio=p.get("l1_ratio"),
                              solver=p.get("solver", "saga" if penalty != "l2" else "lbfgs"),
                              fit_intercept=p.get("fit_intercept", "true") == "true",
                              class_weight=None if p.get("class_weight", "none") == "none" else "balanced",
                              max_iter=p.get("max_iter", 100), random_state=seed)


def make_knn(p, seed):
    from sklearn.neighbors import KNeighborsClassifier
    return KNeighborsClassifier(n_neighbors=p["n_neighbors"], weights=p["weights"], metric=p["metric"],
                                algorithm="brute")


def make_mlp(regressor, max_iter):
    def make(p, seed):
        from sklearn.neural_network import MLPClassifier, MLPRegressor
        kw = {"hidden_layer_sizes": (p["hidden"],) * p.get("layers", 1), "activation": p["activation"],
              "alpha": p["alpha"], "solver": p.get("solver", "adam"), "max_iter": max_iter, "random_state": seed}
        if "learning_rate_init" in p:
            kw["learning_rate_init"] = p["learning_rate_init"]
        if "momentum" in p:
            kw["momentum"] = p["momentum"]
        return (MLPRegressor if regressor else MLPClassifier)(**kw)
    return make


C6 = [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]
GAMMA5 = [0.0001, 0.001, 0.01, 0.1, 1.0]
SVM = [P("kernel", ["linear", "rbf", "poly", "sigmoid"], False), P("C", C6, True),
       P("gamma", GAMMA5, True, ("kernel", ["rbf", "poly", "sigmoid"])), P("degree", [2, 3, 4], True, ("kernel", ["poly"]))]
RF = [P("n_estimators", [8, 16, 32], True), P("max_depth", [2, 4, 8, 16], True),
      P("max_features", [0.05, 0.1, 0.25, 0.5], True), P("min_samples_leaf", [1, 2, 4, 8], True),
      P("criterion", ["gini", "entropy"], False)]
ET = [P("n_estimators", [8, 16, 32], True), P("max_depth", [2, 4, 8, 16], True),
      P("max_features", [0.05, 0.1, 0.25, 0.5], True), P("min_samples_split", [2, 4, 8, 16], True),
      P("bootstrap", ["false", "true"], False)]
GB = [P("n_estimators", [10, 25, 50], True), P("learning_rate", [0.01, 0.03, 0.1, 0.3, 1.0], True),
      P("max_depth", [1, 2, 3, 5], True), P("subsample", [0.5, 0.75, 1.0], True), P("max_features", ["sqrt", "all"], False)]
GB_REG = [P("loss", ["squared_error", "absolute_error", "huber"], False), P("n_estimators", [10, 25, 50], True),
          P("learning_rate", [0.01, 0.03, 0.1, 0.3, 1.0], True), P("max_depth", [1, 2, 3, 5], True),
          P("subsample", [0.5, 1.0], True)]
C7 = [0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]
LOGREG = [P("penalty", ["l2", "l1", "elasticnet"], False), P("C", C7, True),
          P("l1_ratio", [0.2, 0.5, 0.8], True, ("penalty", ["elasticnet"])), P("fit_intercept", ["true", "false"], False),
          P("class_weight", ["none", "balanced"], False), P("max_iter", [10, 30, 100], True)]
LOGREG_FASHION = [P("scaling", ["none", "standard", "minmax"], False), P("C", C7, True),
                  P("max_iter", [5, 10, 20, 50], True), P("fit_intercept", ["true", "false"], False)]
KNN = [P("scaling", ["none", "standard", "minmax"], False), P("n_neighbors", [1, 2, 3, 5, 8, 13, 21, 34], True),
       P("weights", ["uniform", "distance"], False), P("metric", ["euclidean", "manhattan", "chebyshev", "cosine"], False)]
MLP = [P("hidden", [16, 32, 64], True), P("layers", [1, 2], True), P("activation", ["relu", "tanh", "logistic"], False),
       P("alpha", [1e-05, 0.001, 0.1], True), P("learning_rate_init", [0.001, 0.003, 0.01, 0.03], True)]
MLP_COND = [P("solver", ["adam", "sgd", "lbfgs"], False),
            P("learning_rate_init", [0.001, 0.01, 0.1], True, ("solver", ["adam", "sgd"])),
            P("momentum", [0.0, 0.5, 0.9], True, ("solver", ["sgd"])), P("hidden", [8, 32, 128], True),
            P("alpha", [1e-05, 0.001, 0.1], True), P("activation", ["relu", "tanh"], False)]
MLP_FASHION = [P("hidden", [32, 64, 128], True), P("layers", [1, 2], True), P("activation", ["relu", "tanh"], False),
               P("alpha", [0.0001, 0.01, 1.0], True), P("learning_rate_init", [0.001, 0.003, 0.01, 0.03], True)]
MLP_REG = [P("hidden", [8, 32, 128], True), P("layers", [1, 2], True), P("activation", ["relu", "tanh", "identity"], False),
           P("alpha", [0.0001, 0.01, 1.0], True), P("learning_rate_init", [0.001, 0.01, 0.1], True)]


def _rf(p, s):
    from sklearn.ensemble import RandomForestClassifier
    return make_forest(RandomForestClassifier)(p, s)


def _et(p, s):
    from sklearn.ensemble import ExtraTreesClassifier
    return make_forest(ExtraTreesClassifier)(p, s)


# id -> (data set, model, grid, what). The ids are fixed here before any search ran on them: the held-out rule
# (fnv1a64(id) % 3 == 0) is applied to them by bench_search.
TABLES = {
    "real-svm-digits": ("digits", make_svm, SVM, "SVC on digits"),
    "real-svm-breast": ("breast", make_svm, SVM + [P("class_weight", ["none", "balanced"], False)], "SVC on breast cancer"),
    "real-svm-fashion": ("fashion", make_svm, SVM, "SVC on a Fashion-MNIST subset"),
    "real-rf-digits": ("digits", _rf, RF, "random forest on digits"),
    "real-rf-wine": ("wine", _rf, RF, "random forest on wine"),
    "real-et-breast": ("breast", _et, ET, "extra trees on breast cancer"),
    "real-et-fashion": ("fashion", _et, ET, "extra trees on a Fashion-MNIST subset"),
    "real-gb-breast": ("breast", make_gb(False), GB, "gradient boosting on breast cancer"),
    "real-gb-diabetes": ("diabetes", make_gb(True), GB_REG, "gradient boosting regression on diabetes (R^2)"),
    "real-logreg-breast": ("breast", make_logreg, LOGREG, "logistic regression (saga) on breast cancer"),
    "real-logreg-wine": ("wine", make_logreg, LOGREG, "logistic regression (saga) on wine"),
    "real-logreg-fashion": ("fashion", make_logreg, LOGREG_FASHION, "logistic regression (lbfgs) on a Fashion-MNIST subset"),
    "real-knn-digits": ("digits", make_knn, KNN, "k-NN on digits"),
    "real-knn-wine": ("wine", make_knn, KNN, "k-NN on wine"),
    "real-knn-fashion": ("fashion", make_knn, KNN, "k-NN on a Fashion-MNIST subset"),
    "real-mlp-digits": ("digits", make_mlp(False, 20), MLP, "MLPClassifier (20 epochs) on digits"),
    "real-mlp-breast": ("breast", make_mlp(False, 50), MLP_COND, "MLPClassifier (50 iterations), solver-conditional, on breast cancer"),
    "real-mlp-fashion": ("fashion", make_mlp(False, 15), MLP_FASHION, "MLPClassifier (15 epochs) on a Fashion-MNIST subset"),
    "real-mlpreg-diabetes": ("diabetes", make_mlp(True, 100), MLP_REG, "MLPRegressor (100 epochs) on diabetes (R^2)"),
}


def configurations(grid):
    """Every configuration of a (conditional) grid, a dict of its active parameters, in a fixed order."""
    out = [{}]
    for p in grid:
        nxt = []
        for c in out:
            w = p["when"]
            if w and c.get(w[0]) not in w[1]:
                nxt.append(c)
            else:
                nxt.extend({**c, p["name"]: v} for v in p["values"])
        out = nxt
    return out


def space_line(grid):
    return json.dumps([{"name": p["name"], "values": p["values"], "ordered": p["ordered"],
                        **({"when": {"parent": p["when"][0], "values": p["when"][1]}} if p["when"] else {})}
                       for p in grid], separators=(",", ":"))


def grid_text(grid):
    """The grid in words for the `# made by` line: kernel {linear,rbf} x C {0.01..1000} ..."""
    parts = []
    for p in grid:
        v = p["values"]
        text = f"{p['name']} {{{','.join(map(str, v))}}}" + ("" if p["ordered"] else " cat")
        if p["when"]:
            text += f" if {p['when'][0]} in {{{','.join(map(str, p['when'][1]))}}}"
        parts.append(text)
    return " x ".join(parts)


def fit_score(model_of, params, seed, data):
    """(validation score, test score, seconds, failed) of one configuration trained with one seed."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    xp, yp, xt, yt, task = data
    xa, xv, ya, yv = train_test_split(xp, yp, test_size=0.3, random_state=seed,
                                      stratify=yp if task == "classification" else None)
    sc = scaler(params["scaling"]) if "scaling" in params else StandardScaler()
    if sc is not None:
        sc.fit(xa)
        xa, xv, xt = sc.transform(xa), sc.transform(xv), sc.transform(xt)
    y_mean, y_sd = (ya.mean(), ya.std()) if task == "regression" else (0.0, 1.0)
    t0 = time.process_time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = model_of(params, seed)
            m.fit(xa, (ya - y_mean) / y_sd if task == "regression" else ya)
            if task == "regression":
                from sklearn.metrics import r2_score
                val = r2_score(yv, m.predict(xv) * y_sd + y_mean)
                test = r2_score(yt, m.predict(xt) * y_sd + y_mean)
                val, test = (max(-1.0, v) if np.isfinite(v) else -1.0 for v in (val, test))
            else:
                val, test = m.score(xv, yv), m.score(xt, yt)
        return val, test, time.process_time() - t0, 0
    except Exception:  # a fit that fails counts at a constant predictor's score
        if task == "regression":
            return 0.0, 0.0, time.process_time() - t0, 1
        top = np.bincount(ya).argmax()
        return float(np.mean(yv == top)), float(np.mean(yt == top)), time.process_time() - t0, 1
