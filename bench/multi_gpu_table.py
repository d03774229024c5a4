"""Turns bench/multi_gpu.sh's JSON lines (megatrain bench --gpus N and bench/peers/torch_peer.py under
torchrun, one run a line) into one table: markdown for reading, JSON for keeping
(bench/results/<date>-<machine>-multi-gpu.{md,json}).

  python3 bench/multi_gpu_table.py multi_gpu.jsonl --machine "2 x NVIDIA H200" --md t.md --json t.json

Each measured row gets "vs 1 GPU" (its tokens/s over the same system's, model's and clip's on one GPU)
and, for megatrain, "vs FSDP2" (over the FSDP2-offload peer's on as many GPUs). A run that failed
("error") or was not run ("skipped") keeps its row, with the reason in place of the numbers."""
import argparse
import datetime
import json

COLUMNS = ("system", "model", "GPUs", "per GPU: micro x batch x seq", "tokens/step", "clip", "step s", "tokens/s",
           "vs 1 GPU", "vs FSDP2", "TFLOP/s", "peak GPU GiB", "host GiB", "PCIe in/out GB per GPU",
           "host optimizer share", "notes")


def gpus(run):
    """The GPU count: bench/multi_gpu.sh names each system "<name> x<N>"."""
    return int(run["system"].rsplit(" x", 1)[1]) if " x" in run["system"] else run.get("gpus", 1)


def family(run):
    return run["system"].rsplit(" x", 1)[0]


def measured(run):
    return "error" not in run and "skipped" not in run


def base_family(run):
    """Processes (torchrun) compare with megatrain's one GPU: one process of one GPU is that run."""
    return "megatrain" if family(run) == "megatrain-processes" else family(run)


def rows(runs):
    base = {(family(r), r["model"], r.get("clip")): r["tokens_per_s"] for r in runs if measured(r) and gpus(r) == 1}
    peer = {(r["model"], gpus(r)): r["tokens_per_s"] for r in runs
            if measured(r) and family(r) == "pytorch-fsdp2-offload"}
    out = []
    for r in runs:
        n = gpus(r)
        row = {"system": family(r), "model": r["model"], "GPUs": n,
               "per GPU: micro x batch x seq": f"{r['micro_batches']} x {r['batch']} x {r['seq']}",
               "clip": r.get("clip")}
        if not measured(r):
            row["notes"] = r.get("error") or r.get("skipped")
            out.append(row)
            continue
        one = base.get((base_family(r), r["model"], r.get("clip")))
        fsdp = peer.get((r["model"], n))
        row.update({
            "tokens/step": int(r["tokens_per_step"]), "step s": round(r["step_s"], 3),
            "tokens/s": round(r["tokens_per_s"]), "vs 1 GPU": round(r["tokens_per_s"] / one, 2) if one else None,
            "vs FSDP2": round(r["tokens_per_s"] / fsdp, 2) if fsdp and base_family(r) == "megatrain" else None,
            "TFLOP/s": round(r["tflops"]) if r.get("tflops") else None,
            "peak GPU GiB": round(r.get("driver_peak_gpu_gib") or r["peak_gpu_gib"], 1),
            "host GiB": round(r["host_gib"], 1),
            "PCIe in/out GB per GPU": (f"{r['pcie_h2d_gb_per_gpu']:.1f} / {r['pcie_d2h_gb_per_gpu']:.1f}"
                                       if "pcie_h2d_gb_per_gpu" in r else None),
            "host optimizer share": (f"{100 * r['opt_seconds'] / r['step_s']:.0f}%" if "opt_seconds" in r else None),
            "notes": r.get("placement", ""),
        })
        out.append(row)
    return out


def markdown(table, machine):
    lines = [f"Measured {datetime.date.today()} on {machine}.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in table:
        cells = []
        for c in COLUMNS:
            v = row.get(c)
            cells.append("" if v is None else f"{v:,}" if isinstance(v, int) and c in ("tokens/s", "tokens/step")
                         else f"{v}x" if c in ("vs 1 GPU", "vs FSDP2") else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--machine", required=True)
    ap.add_argument("--md")
    ap.add_argument("--json")
    a = ap.parse_args()
    with open(a.jsonl) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    table = rows(runs)
    md = markdown(table, a.machine)
    print(md)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": a.machine, "date": str(datetime.date.today()), "rows": table, "runs": runs}, f,
                      indent=1)


if __name__ == "__main__":
    main()
