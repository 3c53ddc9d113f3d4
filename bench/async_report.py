#!/usr/bin/env python3
"""bench/results/async.{md,json} from the stores of bench/run-async (no dependency beyond Python 3).

Each argument is RANKS:SLOWDOWN:DB. Per trial (one sync mode): time per epoch (the mean of the
leader's epoch_seconds), test accuracy after the last epoch, time to the target validation accuracy
(the leader's epoch_seconds summed up to the first epoch that reaches it; null when none does),
bytes per step and observed staleness. Headlines:
  straggler_3x_speedup: with one rank 3x slower (on the smallest rank count), the time to the target
      of allreduce (uncompressed) over the smallest time to the target of any asynchronous mode
      (downpour, ssp); null when either never reaches the target.
  onebit_bytes_ratio: sync_bytes_per_step of allreduce+1bit over allreduce, at the same point.
"""
import argparse
import json
import subprocess


def trial_rows(hpctune, db):
    listing = json.loads(subprocess.run([hpctune, "trials", db, "--format", "json"], check=True,
                                        capture_output=True, text=True).stdout)
    rows = listing["trials"] if isinstance(listing, dict) else listing
    out = []
    for row in rows:
        tid = row.get("trial", row.get("id"))
        detail = json.loads(subprocess.run([hpctune, "trial", db, str(tid), "--format", "json"], check=True,
                                           capture_output=True, text=True).stdout)
        out.append(detail)
    return out


def mode_name(params):
    sync = params.get("sync", "allreduce")
    if sync == "ssp":
        sync += " s=%d" % params.get("staleness", 0)
    if params.get("gradient_compression", "none") == "1bit":
        sync += " +1bit"
    if params.get("min_replica_fraction", 1) < 1:
        sync += " f=%g" % params["min_replica_fraction"]  # backup replicas
    return sync


def summarize(detail, target):
    steps = sorted(detail.get("metrics_by_step", []), key=lambda m: m["step"])
    epoch_seconds = [m["metrics"].get("epoch_seconds", 0.0) for m in steps]
    to_target, elapsed = None, 0.0
    for m, s in zip(steps, epoch_seconds):
        elapsed += s
        if m["metrics"].get("val_accuracy", 0.0) >= target:
            to_target = elapsed
            break
    final = detail.get("metrics", {}) or {}
    return {
        "mode": mode_name(detail.get("params", {})),
        "state": detail.get("state"),
        "epoch_seconds": sum(epoch_seconds) / len(epoch_seconds) if epoch_seconds else None,
        "test_accuracy": final.get("test_accuracy"),
        "val_accuracy": final.get("val_accuracy"),
        "seconds_to_target": to_target,
        "bytes_per_step": final.get("sync_bytes_per_step"),
        "staleness_max": final.get("sync_staleness_max"),
        "staleness_mean": final.get("sync_staleness_mean"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpctune", required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--samples", type=int, required=True)
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    results = []
    for run in a.runs:
        ranks, slow, db = run.split(":", 2)
        for detail in trial_rows(a.hpctune, db):
            row = summarize(detail, a.target)
            row.update({"ranks": int(ranks), "slowdown": float(slow)})
            results.append(row)

    def pick(ranks, slow, mode):
        for r in results:
            if r["ranks"] == ranks and r["slowdown"] == slow and r["mode"] == mode:
                return r
        return None

    smallest = min(r["ranks"] for r in results)
    speedup, best_async, ratio = None, None, None
    sync3 = pick(smallest, 3.0, "allreduce")
    if sync3 is not None and sync3["seconds_to_target"]:
        candidates = [r for r in results if r["ranks"] == smallest and r["slowdown"] == 3.0
                      and not r["mode"].startswith("allreduce") and r["seconds_to_target"]]
        if candidates:
            best = min(candidates, key=lambda r: r["seconds_to_target"])
            speedup, best_async = sync3["seconds_to_target"] / best["seconds_to_target"], best["mode"]
    plain = pick(smallest, 1.0, "allreduce") or sync3
    onebit = pick(smallest, 1.0, "allreduce +1bit") or pick(smallest, 3.0, "allreduce +1bit")
    if plain and onebit and plain["bytes_per_step"]:
        ratio = onebit["bytes_per_step"] / plain["bytes_per_step"]
    out = {"benchmark": "async", "model": "cnn (default) on Fashion-MNIST", "epochs": a.epochs,
           "max_train_samples": a.samples, "target_val_accuracy": a.target,
           "straggler_3x_speedup": speedup, "straggler_3x_best_async_mode": best_async,
           "onebit_bytes_ratio": ratio, "targets": {"straggler_3x_speedup": ">= 1.5", "onebit_bytes_ratio": "<= 0.04"},
           "runs": results}
    with open(a.out_dir + "/async.json", "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    def fmt(v, spec="%.3f"):
        return "-" if v is None else spec % v

    lines = ["# Data-parallel sync modes with a straggler (bench/run-async)", "",
             "The default CNN on %d Fashion-MNIST images, %d epochs, batch 64, lr constant; data rank 1 slowed by "
             "trainer.debug_slowdown. Time to target: the leader's epoch seconds summed up to the first epoch with "
             "val_accuracy >= %.2f (- when none reached it)." % (a.samples, a.epochs, a.target), "",
             "- straggler_3x_speedup (allreduce's time to target / the best asynchronous mode's, one rank 3x "
             "slower): **%s** (%s; target >= 1.5)" % (fmt(speedup, "%.2f"), best_async or "-"),
             "- onebit_bytes_ratio (allreduce+1bit bytes per step / allreduce's): **%s** (1/%s; target <= 1/25)"
             % (fmt(ratio, "%.4f"), fmt(1 / ratio if ratio else None, "%.1f")), "",
             "| ranks | slowdown | mode | s/epoch | test acc | s to target | bytes/step | staleness max/mean |",
             "|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in sorted(results, key=lambda r: (r["ranks"], r["slowdown"], r["mode"])):
        lines.append("| %d | %gx | %s | %s | %s | %s | %s | %s / %s |" % (
            r["ranks"], r["slowdown"], r["mode"], fmt(r["epoch_seconds"], "%.2f"), fmt(r["test_accuracy"]),
            fmt(r["seconds_to_target"], "%.1f"), fmt(r["bytes_per_step"], "%.0f"), fmt(r["staleness_max"], "%g"),
            fmt(r["staleness_mean"], "%.2f")))
    with open(a.out_dir + "/async.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
