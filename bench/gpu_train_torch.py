#!/usr/bin/python3
"""bench/gpu_train_torch.py: the PyTorch side of bench/gpu's training table, as bench_gpu_train
(bench/gpu_train.cpp): the same model, data, batch, optimizer and precision, PyTorch eager.

    gpu_train_torch.py --model mlp|cnn [--data DIR] [--epochs N] [--batch 128]
                       [--precision fp32|tf32|bf16] [--lr X] [--momentum 0.9] [--seed 1]
                       [--max-train N] [--target 0.90] [--device cuda|cpu]

Models: mlp 784-256-10 ReLU (the mlp trainer's default); cnn conv5x5 32 same ReLU, maxpool 2,
conv5x5 64 same ReLU, maxpool 2, dense 1024 ReLU, dense 10 (nn::default_cnn_layer_specs). Data:
Fashion-MNIST's idx .gz files read with gzip + numpy (no torchvision), pixels p / 255, held on the
device. SGD with momentum at a constant lr (defaults: mlp 0.05, cnn 0.01). Each epoch: the first
--max-train training images in an order shuffled from the seed, full batches only, then the whole
test set evaluated. PyTorch's own initialisation (not hpctune's He init). bf16: autocast to
bfloat16 (fp32 master weights). Each epoch is timed from its first step to
torch.cuda.synchronize() after its last. Prints one JSON line (the fields of bench_gpu_train's).
Exit 77 with the reason on stderr where numpy/torch is missing or has no CUDA device (--device cpu
runs on the CPU, for a smoke run of this script only); 2 for bad arguments or data.
"""
import argparse, gzip, json, os, struct, sys, time


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ValueError(f"{path}: not an IDX ubyte file")
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    expected = 1
    for d in shape:
        expected *= d
    if data.size != expected:
        raise ValueError(f"{path}: {data.size} bytes of data, the header says {expected}")
    return data.reshape(shape)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{data_dir}: no {stem}[.gz]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["mlp", "cnn"])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--lr", type=float)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-train", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    epochs = a.epochs if a.epochs is not None else (15 if a.model == "cnn" else 30)
    lr = a.lr if a.lr is not None else (0.01 if a.model == "cnn" else 0.05)
    if epochs < 1 or a.batch < 1:
        print("gpu_train_torch: --epochs and --batch must be >= 1", file=sys.stderr)
        return 2
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"gpu_train_torch: cannot import numpy/torch: {e}", file=sys.stderr)
        return 77
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_train_torch: torch {torch.__version__} has no CUDA device (built with CUDA {torch.version.cuda})",
              file=sys.stderr)
        return 77
    try:
        xtr = read_idx(find(a.data, "train-images-idx3-ubyte"))
        ytr = read_idx(find(a.data, "train-labels-idx1-ubyte"))
        xte = read_idx(find(a.data, "t10k-images-idx3-ubyte"))
        yte = read_idx(find(a.data, "t10k-labels-idx1-ubyte"))
    except (OSError, ValueError) as e:
        print(f"gpu_train_torch: data: {e}", file=sys.stderr)
        return 2
    n = min(a.max_train, len(xtr)) if a.max_train > 0 else len(xtr)
    if n < a.batch:
        print(f"gpu_train_torch: fewer training images ({n}) than one batch", file=sys.stderr)
        return 2
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dev = torch.device(a.device)
    X = torch.from_numpy(xtr[:n].astype(np.float32) / 255.0).reshape(n, 1, 28, 28).to(dev)
    Y = torch.from_numpy(ytr[:n].astype(np.int64)).to(dev)
    XT = torch.from_numpy(xte.astype(np.float32) / 255.0).reshape(len(xte), 1, 28, 28).to(dev)
    YT = torch.from_numpy(yte.astype(np.int64)).to(dev)
    classes = int(max(ytr.max(), yte.max())) + 1
    torch.manual_seed(a.seed)
    nn = torch.nn
    if a.model == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, classes))
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, classes))
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=a.momentum)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    steps = n // a.batch

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    def forward(x):
        if a.precision == "bf16":
            with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
                return model(x).float()
        return model(x)

    per_epoch, rates = [], []
    train_total, best, to_target = 0.0, 0.0, None
    for e in range(epochs):
        perm = torch.randperm(n, device=dev, generator=gen)
        model.train()
        sync()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=dev)
        correct = torch.zeros((), device=dev, dtype=torch.int64)
        for s in range(steps):
            idx = perm[s * a.batch:(s + 1) * a.batch]
            xb, yb = X[idx], Y[idx]
            logits = forward(xb)
            loss = torch.nn.functional.cross_entropy(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * a.batch
            correct += (logits.detach().argmax(1) == yb).sum()
        sync()
        seconds = time.perf_counter() - t0
        train_total += seconds
        model.eval()
        hits = 0
        with torch.no_grad():
            for start in range(0, len(XT), 500):
                hits += (forward(XT[start:start + 500]).argmax(1) == YT[start:start + 500]).sum().item()
        acc = hits / len(XT)
        best = max(best, acc)
        if to_target is None and acc >= a.target:
            to_target = train_total
        rate = steps * a.batch / seconds
        if e > 0:
            rates.append(rate)
        per_epoch.append({"train_seconds": seconds, "images_per_second": rate,
                          "train_loss": loss_sum.item() / (steps * a.batch),
                          "train_accuracy": correct.item() / (steps * a.batch), "test_accuracy": acc})
    rates.sort()
    print(json.dumps({
        "side": "pytorch", "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu", "model": a.model,
        "batch": a.batch, "lr": lr, "momentum": a.momentum, "seed": a.seed, "precision": a.precision,
        "train_images": steps * a.batch, "epochs": per_epoch,
        "median_images_per_second": rates[len(rates) // 2] if rates else None,
        "train_seconds": train_total, "target": a.target, "seconds_to_target": to_target,
        "best_test_accuracy": best}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
