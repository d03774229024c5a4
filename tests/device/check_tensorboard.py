#!/usr/bin/env python3
"""Reads a megatrain run's TensorBoard event files with TensorBoard's own reader.

Trains a tiny run on the CPU backend (bytes of a generated corpus, two --val-data files, 6 steps,
evaluation every 2), then loads the run directory with tensorboard's EventAccumulator (what
`tensorboard --logdir` uses) and compares every scalar with metrics.jsonl: the tags loss, lr,
grad_norm, tokens_per_s, val_loss and val_loss/FILE at the same steps with the same values (to the 7 digits
metrics.jsonl keeps). Prints PASS or FAIL lines; exits 1 on a failure, 0 with a SKIP line when the tensorboard
package is not installed (the device image may not have it).

usage: check_tensorboard.py [--bin build/megatrain]   (from the repository root)
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(ROOT, "build/megatrain"))
    args = parser.parse_args()
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("SKIP tensorboard: the tensorboard package is not installed")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        words = ["light", "water", "stone", "river", "bread", "house", "field", "wind"]
        for name, n in (("corpus.txt", 6000), ("v1.txt", 400), ("v2.txt", 300)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(" ".join(words[(i * 7 + len(name)) % 8] for i in range(n)))
        run = os.path.join(tmp, "run")
        val = ",".join(os.path.join(tmp, v) for v in ("v1.txt", "v2.txt"))
        subprocess.run([args.bin, "train", "--preset", "tiny", "--seq", "16", "--batch", "2", "--backend", "cpu",
                        "--data", os.path.join(tmp, "corpus.txt"), "--val-data", val, "--steps", "6",
                        "--eval-every", "2", "--out", run], check=True, capture_output=True)
        acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        want = {}
        for line in open(os.path.join(run, "metrics.jsonl")):
            ev = json.loads(line)
            for k, v in ev.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and "step" in ev:
                    want.setdefault(k, {})[ev["step"]] = struct.unpack("<f", struct.pack("<f", v))[0]
        failed = 0
        for tag in ["loss", "lr", "grad_norm", "tokens_per_s", "val_loss"] + [f"val_loss/{p}" for p in val.split(",")]:
            if tag not in tags:
                print(f"FAIL tensorboard: no scalar '{tag}' (it has {sorted(tags)})")
                failed += 1
                continue
            got = {e.step: e.value for e in acc.Scalars(tag)}
            # metrics.jsonl keeps 7 significant digits, TensorBoard a float32 of the full value
            close = got.keys() == want[tag].keys() and all(
                abs(got[k] - want[tag][k]) <= 1e-6 * max(1.0, abs(want[tag][k])) for k in got)
            if not close:
                print(f"FAIL tensorboard: '{tag}' is {got} in TensorBoard, {want[tag]} in metrics.jsonl")
                failed += 1
        if not failed:
            print(f"PASS tensorboard: {len(tags)} scalar tags read by TensorBoard equal metrics.jsonl "
                  f"({sum(len(v) for v in want.values())} values)")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
