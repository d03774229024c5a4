#!/usr/bin/python3
"""Checks that torch_peer.py counts what megatrain counts: its total_params, active_params and
model_flops_per_token against megatrain's own, for the presets whose peers bench/gpt_oss.sh and
bench/qwen35.sh run. No GPU and no transformers (the counting functions do not import it); torch
is imported by torch_peer.py, so run it with a Python that has torch (Debian's /usr/bin/python3).

  1. the whole preset and a depth cut, as bench/moe_config.py writes their config.json: `megatrain
     plan` (cpu backend) prints the parameters and the active parameters in B to 3 decimals; the
     peer's must round to the same, and --preset must print what the config.json prints;
  2. the same config.json with small sizes (every width distinct, a window shorter than the
     sequence, experts, a shared expert, Gated DeltaNet layers): `megatrain bench --backend cpu`
     (one step) writes its exact parameter count and its TFLOP/s beside its tokens/s, whose ratio
     is its model FLOPs a token; the peer's must be equal (the FLOPs to 1e-12 relative).

    /usr/bin/python3 bench/peers/check_counts.py [--bin build/megatrain]
Prints one line a comparison; exits 1 on the first difference."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
import moe_config  # noqa: E402
import torch_peer  # noqa: E402

CUTS = {"gpt-oss-120b": 2, "qwen3.5-35b-a3b": 7}
# Small sizes: every width distinct, so that a term counted with the wrong width shows.
SMALL = {
    "gpt-oss-120b": (3, dict(hidden_size=40, intermediate_size=24, num_attention_heads=6, num_key_value_heads=2,
                             head_dim=16, vocab_size=97, num_local_experts=5, num_experts_per_tok=2,
                             sliding_window=8)),
    "qwen3.5-35b-a3b": (5, dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                                linear_value_head_dim=12, num_experts=6, num_experts_per_tok=2,
                                moe_intermediate_size=20, shared_expert_intermediate_size=28, vocab_size=101)),
}
SMALL_SEQ = 32


def fail(message):
    print("FAIL " + message)
    sys.exit(1)


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-600:]}")
    return done.stdout


def write_config(work, preset, layers, sizes=None):
    config = moe_config.config(preset, layers)
    if sizes:
        config.update(sizes)
        if "experts_per_token" in config:  # gpt-oss's older name must agree
            config["experts_per_token"] = sizes["num_experts_per_tok"]
    path = os.path.join(work, f"{preset}-{layers}{'-small' if sizes else ''}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def plan_counts(binary, model):
    """`megatrain plan`'s model line: the parameters and the active ones, in B."""
    out = run(binary, "plan", *model, "--backend", "cpu", "--seq", "4096", "--batch", "1")
    total = re.search(r"^model +([0-9.]+) B parameters", out, re.M)
    active = re.search(r"; ([0-9.]+) B parameters active", out)
    if not total or not active:
        fail(f"megatrain plan {' '.join(model)} printed no parameter counts:\n{out}")
    return total.group(1), active.group(1)


def check_plan(binary, work, preset, layers):
    shape = torch_peer.preset_shape(preset, layers)
    ours = (f"{torch_peer.total_params(shape) / 1e9:.3f}", f"{torch_peer.active_params(shape) / 1e9:.3f}")
    theirs = plan_counts(binary, ["--config", write_config(work, preset, layers)])
    if layers == len(torch_peer.PRESETS[preset]["layer_types"]):
        by_name = plan_counts(binary, ["--preset", preset])
        if by_name != theirs:
            fail(f"{preset}: plan --preset says {by_name}, its config.json {theirs}")
    name = f"{preset} ({layers} layers)"
    if ours != theirs:
        fail(f"{name}: the peer counts {ours[0]} B parameters, {ours[1]} B active; megatrain plan {theirs[0]}, "
             f"{theirs[1]}")
    print(f"ok   {name}: {ours[0]} B parameters, {ours[1]} B active (plan's 3 decimals)")


def check_bench(binary, work, preset):
    layers, sizes = SMALL[preset]
    jsonl = os.path.join(work, f"{preset}-small.jsonl")
    run(binary, "bench", "--backend", "cpu", "--config", write_config(work, preset, layers, sizes), "--seq",
        str(SMALL_SEQ), "--batch", "1", "--steps", "1", "--warmup-steps", "0", "--json", jsonl)
    with open(jsonl) as f:
        line = json.loads(f.readline())
    shape = dict(torch_peer.preset_shape(preset, layers), **sizes)
    flops = line["tflops"] * 1e12 / line["tokens_per_s"]
    ours = torch_peer.model_flops_per_token(shape, SMALL_SEQ)
    name = f"{preset}'s block at small sizes ({layers} layers, seq {SMALL_SEQ})"
    if line["params"] != torch_peer.total_params(shape):
        fail(f"{name}: megatrain has {line['params']} parameters, the peer counts {torch_peer.total_params(shape)}")
    if abs(flops - ours) > 1e-12 * ours:
        fail(f"{name}: megatrain counts {flops:.6f} FLOPs a token, the peer {ours:.6f}")
    print(f"ok   {name}: {line['params']} parameters, {ours:.0f} FLOPs a token, exactly")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/megatrain")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mt-peer-counts-") as work:
        for preset, cut in CUTS.items():
            check_plan(a.bin, work, preset, len(torch_peer.PRESETS[preset]["layer_types"]))
            check_plan(a.bin, work, preset, cut)
            check_bench(a.bin, work, preset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
