"""Turns bench/moe_gemm/run.sh's raw output (bench_moe_gemm's and torch_grouped_mm.py's key=value lines,
each prefixed with variant=<routing and segments>) into one table: markdown for reading, JSON for keeping.
bench/results/<date>-<machine>-moe-gemm.md and .json are these two files.

  python3 bench/moe_gemm/table.py moe-gemm.txt --md moe-gemm.md --json moe-gemm.json [--title T] [--note N]

A run's TFLOP/s count 2 * rows * in * out a GEMM (rows = tokens * top k); "all" is the six GEMMs'
FLOPs over their summed time. The difference in brackets is the relative L2 distance of the way's
results from the first way's of the same shape and variant (older raw files: from the kernels'). A
GEMM that failed keeps its cell, with "err" in place of the numbers and the message in the JSON."""
import argparse
import json
import re
import sys

GEMMS = ["gate_up", "down", "gate_up_dx", "down_dx", "gate_up_dw", "down_dw"]
NUMERIC = {"experts", "top_k", "hidden", "expert_width", "tokens", "rows", "segments", "rows_per_expert_most",
           "fewest", "ms", "tflops"}


def fields(line):
    """key=value pairs of a line; a value may be a double-quoted string with spaces."""
    out = {}
    for key, quoted, bare in re.findall(r'(\w+)=(?:"([^"]*)"|(\S+))', line):
        value = quoted if quoted else bare
        if key in NUMERIC:
            value = float(value) if "." in value or "e" in value else int(value)
        elif key.startswith("rel_err"):
            value = float(value)
        out[key] = value
    return out


def variant(f):
    """run.sh's label of the routing and its flags ("uniform_--seg_4096" -> "uniform seg 4096")."""
    return re.sub(r"_?--(\w+)_", r" \1 ", f.get("variant", "-"))


def read(path):
    gpu, shapes, runs, order = None, [], {}, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                gpu = gpu or line  # nvidia-smi's name, memory, clock
                continue
            f = fields(line)
            if "way" not in f:
                if "experts" in f:
                    f["variant"] = variant(f)
                    shapes.append(f)
                continue
            key = (variant(f), f["shape"], f["way"])
            if key not in runs:
                runs[key] = {"variant": key[0], "shape": key[1], "way": key[2], "gemms": {}}
                order.append(key)
            run = runs[key]
            rel = next((f[k] for k in f if k.startswith("rel_err")), None)
            vs = f.get("vs") or next((k[len("rel_err_vs_"):] for k in f if k.startswith("rel_err_vs_")), None)
            if "gemm" not in f:  # a way that failed before any GEMM (e.g. no torch._grouped_mm)
                run["error"] = f.get("error", "no result")
                continue
            cell = {k: f[k] for k in ("ms", "tflops", "error") if k in f}
            if rel is not None:
                cell["rel_err"], cell["vs"] = rel, vs
            if f["gemm"] == "all":
                run["all"] = cell
            else:
                run["gemms"][f["gemm"]] = cell
    return gpu, shapes, [runs[k] for k in order]


def cell_text(cell):
    if cell is None:
        return "-"
    if "tflops" not in cell:
        return "err"
    text = "%.1f" % cell["tflops"]
    if "rel_err" in cell:
        text += " (%.2e)" % cell["rel_err"]
    return text


def markdown(title, note, gpu, shapes, runs):
    out = ["# " + title, ""]
    if note:
        out += [note, ""]
    if gpu:
        out += ["GPU: " + gpu, ""]
    out += ["Shapes (rows = tokens x top k, sorted by expert):", ""]
    out += ["| routing | shape | experts | top k | hidden | expert width | tokens | segments | rows an expert (most, fewest) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for s in shapes:
        out.append("| %s | %s | %d | %d | %d | %d | %d | %d | %d, %d |" % (
            s.get("variant", "-"), s["shape"], s["experts"], s["top_k"], s["hidden"], s["expert_width"], s["tokens"],
            s["segments"], s["rows_per_expert_most"], s["fewest"]))
    out += ["", "TFLOP/s of each GEMM (relative L2 difference from the first way's results); all: the six together, "
            "and their ms", ""]
    out += ["| routing | shape | way | " + " | ".join(GEMMS) + " | all | ms |", "|---|---|---|" + "---|" * (len(GEMMS) + 2)]
    for r in runs:
        cells = [cell_text(r["gemms"].get(g)) for g in GEMMS]
        total = r.get("all")
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            r["variant"], r["shape"], r["way"], " | ".join(cells), "%.1f" % total["tflops"] if total else "-",
            "%.3f" % total["ms"] if total else "-"))
    errors = [(r, g, c["error"]) for r in runs for g, c in r["gemms"].items() if "error" in c]
    errors += [(r, "-", r["error"]) for r in runs if "error" in r]
    if errors:
        out += ["", "Errors:", ""]
        out += ["- %s %s %s %s: %s" % (r["variant"], r["shape"], r["way"], g, e) for r, g, e in errors]
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("raw")
    p.add_argument("--md")
    p.add_argument("--json")
    p.add_argument("--title", default="Mixture-of-experts grouped GEMMs (bench/moe_gemm)")
    p.add_argument("--note", help="a paragraph under the title (markdown), kept in the JSON too")
    a = p.parse_args()
    gpu, shapes, runs = read(a.raw)
    md = markdown(a.title, a.note, gpu, shapes, runs)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"title": a.title, "note": a.note, "gpu": gpu, "shapes": shapes, "runs": runs}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
