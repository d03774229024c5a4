"""Turns bench/run.sh's JSON lines (megatrain bench and bench/peers/torch_peer.py, one run a line)
into one table: markdown for reading, JSON for keeping. bench/results/<date>-<machine>.md and
.json are these two files, copied from the device machine.

  python3 bench/table.py bench.jsonl --machine "NVIDIA H200, 16 cores" --md bench.md --json bench.json \
      [--plan "TITLE=plan.txt" ...]

Each row's "vs megatrain" divides its tokens/s by that of the first megatrain run at the same model
and tokens per step (bench/run.sh runs --clip 0 first at 1B and 3B: the --clip 1 row then reads
as a share of it, the peers' as against it). A run that failed ("error") or was not run ("skipped") keeps its row, with the reason in
place of the numbers."""
import argparse
import datetime
import json
import sys

COLUMNS = ("system", "model", "params", "micro x batch x seq", "tokens/step", "clip", "placement", "step s",
           "tokens/s", "vs megatrain", "TFLOP/s", "peak GPU GiB", "host GiB", "notes")


def placement(run):
    """Where the optimizer state and the gradients waiting for the clipping norm lived."""
    if run["system"] == "pytorch-resident":
        return "all on the GPU"
    if run["system"] == "pytorch-fsdp2-offload":
        return "optimizer state on the host"
    if "opt_units_on_device" not in run:
        return "-"
    waiting = run["grads_wait"] if run.get("clip") else "none wait (no clipping)"
    return (f"optimizer state of {run['opt_units_on_device']} of {run['units']} units on the GPU "
            f"({run['device_blocks']} of {run['layers']} blocks); waiting gradients: {waiting}")


def read_runs(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def measured(run):
    return "error" not in run and "skipped" not in run


def notes(run):
    if "error" in run:
        return "FAILED: " + run["error"].replace("|", "/")
    note = run.get("note", "")
    return (note + "; " if note else "") + measured_notes(run)


def measured_notes(run):
    if "skipped" in run:
        return "not run: " + run["skipped"].replace("|", "/")
    if run["system"] == "megatrain":
        idle = (f"GPU idle {100 * run['device_idle_share']:.1f}% of the step")
        if "idle_forward_share" in run:
            idle += (f" ({100 * run['idle_forward_share']:.1f}% in the forward, "
                     f"{100 * run['idle_backward_share']:.1f}% in the backward, the rest between steps)")
        pinned = f", optimizer pinned to cores {run['opt_cores']}" if run.get("opt_cores") else ""
        ends = ""
        if "ends_on_device" in run and "opt_units_on_device" not in run:
            ends = f"; embedding and head updated on the {'GPU' if run['ends_on_device'] else 'host'}"
        if run.get("gpu_mem_gib"):
            ends += f"; --gpu-mem {run['gpu_mem_gib']:g} GiB"
        if run.get("ckpt_on_host"):
            ends += f": the input checkpoints of {run['ckpt_on_host']} of {run['layers']} blocks in pinned host memory"
        if "driver_peak_gpu_gib" in run:
            ends += f"; driver-counted peak GPU memory {run['driver_peak_gpu_gib']:.1f} GiB"
        if run.get("opt_after_norm_s"):
            ends += (f"; the last master out {run['opt_after_norm_s']:.3f} s after the norm "
                     f"({run.get('opt_backlog_units', 0):.1f} units' updates ahead of the norm still to take then)")
        if run.get("clip") == 0 and run.get("grad_ring"):
            ends += f"; a gradient ring of {run['grad_ring']} blocks"
        if run.get("attn_tile") and run["attn_tile"] < run["seq"]:
            ends += f"; attention in windows of {run['attn_tile']} queries"
        if run.get("plan_floor_s"):
            ends += f"; plan's floor {run['plan_floor_s']:.3f} s a step (this step {run['step_s'] / run['plan_floor_s']:.2f}x it)"
        return (f"{idle}, stalled on copies {100 * run['copy_wait_share']:.1f}%; "
                f"host optimizer {run['opt_seconds']:.3f} s a step{pinned}{ends}")
    how = [f"{run.get('optimizer', '')}, torch {run.get('torch', '?')}"]
    for key, what in (("attention", "attention"), ("experts_implementation", "experts"),
                      ("linear_attention", "Gated DeltaNet")):
        if run.get(key):
            how.append(f"{what}: {run[key]}")
    return "; ".join(how)


def gib(value):
    """A memory figure, or "-" for a run whose steps were read from its log (no memory figures)."""
    return "-" if value is None else f"{value:.1f}"


def step_shape(run):
    if "micro_batches" not in run:
        return "-"
    return f"{run['micro_batches']} x {run['batch']} x {run['seq']}"


def row(run, megatrain_speed):
    if not measured(run):
        return [run["system"], run["model"], "-", step_shape(run)] + ["-"] * (len(COLUMNS) - 5) + [notes(run)]
    reference = megatrain_speed.get((run["model"], run["tokens_per_step"]))
    params = f"{run['params'] / 1e9:.2f} B"
    if run.get("active_params"):  # a mixture of experts: the parameters a token's forward uses
        params += f" ({run['active_params'] / 1e9:.2f} B active)"
    return [run["system"], run["model"], params, step_shape(run),
            f"{run['tokens_per_step']:.0f}", f"{run.get('clip', '?')}", placement(run),
            f"{run['step_s']:.3f}", f"{run['tokens_per_s']:.0f}",
            f"{run['tokens_per_s'] / reference:.2f}x" if reference else "-",
            f"{run['tflops']:.1f}", gib(run.get("peak_gpu_gib")), gib(run.get("host_gib")), notes(run)]


def markdown(runs, machine, date, plans=()):
    # The first megatrain run of each model and tokens per step is the reference.
    megatrain_speed = {}
    for r in runs:
        if r["system"] == "megatrain" and measured(r):
            megatrain_speed.setdefault((r["model"], r["tokens_per_step"]), r["tokens_per_s"])
    lines = [f"# megatrain and its PyTorch peers, {date}", "", f"Machine: {machine}.", "",
             "Same model shapes, random weights and random tokens; the median of "
             "the timed steps after warm-up. TFLOP/s counts model FLOPs per token "
             "(6 x (block params x L + vocab x hidden) + 6 x L x seq x heads x head_dim; a mixture of "
             "experts counts its active parameters: the router and the top_k experts a token goes to), "
             "recomputation not counted.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r, megatrain_speed)) + " |" for r in runs]
    lines += ["", "clip: global gradient-norm clipping (0: none). megatrain clips exactly: with clipping "
              "its optimizer waits for the whole backward; without, it updates each block as its "
              "gradients come home."]
    for title, text in plans:
        lines += ["", f"## {title}", "", "```", text.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+", help="the runs, one JSON object a line (several files: one table)")
    ap.add_argument("--machine", required=True, help="what ran them, in words")
    ap.add_argument("--md", required=True, help="write the markdown table here")
    ap.add_argument("--json", required=True, help="write the runs and the machine here")
    ap.add_argument("--plan", action="append", default=[], metavar="TITLE=FILE",
                    help="a `megatrain plan` output to keep beside the table (repeatable)")
    a = ap.parse_args()

    runs = [run for path in a.jsonl for run in read_runs(path)]
    plans = []
    for spec in a.plan:
        title, _, path = spec.partition("=")
        with open(path) as f:
            plans.append((title, f.read()))
    date = datetime.date.today().isoformat()
    table = markdown(runs, a.machine, date, plans)
    with open(a.md, "w") as f:
        f.write(table)
    with open(a.json, "w") as f:
        json.dump({"date": date, "machine": a.machine, "runs": runs, "plans": dict(plans)}, f, indent=1)
        f.write("\n")
    sys.stdout.write(table)


if __name__ == "__main__":
    main()
