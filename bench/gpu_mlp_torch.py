#!/usr/bin/python3
"""bench/gpu_mlp_torch.py: the PyTorch side of bench/gpu, as bench_gpu_mlp (bench/gpu_mlp.cpp).

The same model (784-256-256-10, ReLU, softmax cross-entropy), optimizer (SGD, momentum 0.9, lr
0.05), batch, precision (fp32, or TF32 matmuls with --tf32) and synthetic data of Fashion-MNIST's
shape (inputs uniform in [0, 1), labels the argmax of a fixed random linear map; drawn here with
numpy, so the values differ from the C++ side's, not their distribution), held on the GPU, batches
in order, PyTorch eager. Each epoch is timed from its first step to torch.cuda.synchronize() after
its last; the median images/s over epochs after the first is reported. Prints one JSON line.
Exit 77 with the reason on stderr where torch is missing or has no CUDA device.
"""
import argparse, json, sys, time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--images", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tf32", action="store_true")
    a = ap.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"gpu_mlp_torch: cannot import numpy/torch: {e}", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print(f"gpu_mlp_torch: torch {torch.__version__} has no CUDA device "
              f"(built with CUDA {torch.version.cuda})", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dev = torch.device("cuda:0")
    rng = np.random.default_rng(a.seed)
    x = rng.random((a.images, 784), dtype=np.float32)
    labels = ((x - 0.5) @ rng.uniform(-1, 1, (784, 10)).astype(np.float32)).argmax(1)
    X = torch.from_numpy(x).to(dev)
    Y = torch.from_numpy(labels.astype(np.int64)).to(dev)
    torch.manual_seed(a.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    epochs, rates = [], []
    for e in range(a.epochs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=dev)
        correct = torch.zeros((), device=dev, dtype=torch.int64)
        for start in range(0, a.images, a.batch):
            xb, yb = X[start:start + a.batch], Y[start:start + a.batch]
            logits = model(xb)
            loss = torch.nn.functional.cross_entropy(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * xb.shape[0]
            correct += (logits.detach().argmax(1) == yb).sum()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        rate = a.images / seconds
        if e > 0:
            rates.append(rate)
        epochs.append({"seconds": seconds, "images_per_second": rate,
                       "mean_loss": loss_sum.item() / a.images, "accuracy": correct.item() / a.images})
    rates.sort()
    print(json.dumps({"side": "pytorch", "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                      "device": torch.cuda.get_device_name(0), "model": "784-256-256-10 relu",
                      "batch": a.batch, "images": a.images, "precision": "tf32" if a.tf32 else "fp32",
                      "epochs": epochs, "median_images_per_second": rates[len(rates) // 2]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
