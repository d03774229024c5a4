"""Turns bench/gdn/run.sh's lines (bench_gdn's and fla_gdn.py's key=value fields) into one table:
markdown for reading, JSON for keeping (bench/results/<date>-<machine>-gdn.md and .json).

  python3 bench/gdn/table.py gdn.txt --machine "NVIDIA H100 80GB HBM3" --command "..." --md gdn.md --json gdn.json

Each layout's "FLA / megatrain" is FLA's forward+backward time over megatrain's (above 1: megatrain
is faster); the relative L2 differences are megatrain's outputs against FLA's on the same inputs."""
import argparse
import datetime
import json


def read(path):
    runs, errors = [], []
    for line in open(path):
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "system" in fields and ("fwd_ms" in fields or "error" in fields):
            runs.append(fields)
        elif line.strip():
            errors.append(line.rstrip())
    return runs, errors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("raw")
    p.add_argument("--machine", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--note", default="", help="a paragraph under the title: what the run shows")
    a = p.parse_args()
    runs, errors = read(a.raw)
    title = "The gated delta rule, forward and backward: megatrain's CUDA kernels and flash-linear-attention (%s, %s)" % (
        a.machine, datetime.date.today().isoformat())
    by = {(r["system"], r["layout"]): r for r in runs}
    lines = ["# " + title, ""] + ([a.note, ""] if a.note else []) + ["Command: `%s`" % a.command, "",
             "| layout | batch x seq | heads | dk, dv | segments | system | fwd ms | bwd ms | fwd+bwd ms | FLA / megatrain | "
             "o, dq, dk, dv, dg, dbeta vs FLA (rel L2) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        ratio, diff = "-", "-"
        m, f = by.get(("megatrain", r["layout"])), by.get(("fla", r["layout"]))
        if r["system"] == "megatrain" and m and f and "total_ms" in f:
            ratio = "%.2fx" % (float(f["total_ms"]) / float(m["total_ms"]))
        if "rel_o" in r:
            diff = ", ".join(r.get("rel_" + k, "unchecked") for k in ("o", "dq", "dk", "dv", "dg", "dbeta"))
            if r.get("fla_bwd") == "unchecked":
                diff += " (FLA's backward past its Triton guard, #640: its outputs not compared)"
        lines.append("| %s | %s x %s | %s | %s, %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["layout"], r["batch"], r["seq"], r["heads"], r["dk"], r["dv"], r["segments"], r["system"],
            r.get("fwd_ms", r.get("error", "-")), r.get("bwd_ms", "-"), r.get("total_ms", "-"), ratio, diff))
    if errors:
        lines += ["", "Other output:", "", "```"] + errors[-20:] + ["```"]
    open(a.md, "w").write("\n".join(lines) + "\n")
    json.dump({"title": title, "note": a.note, "machine": a.machine, "command": a.command, "runs": runs,
               "other_output": errors},
              open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
