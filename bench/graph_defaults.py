#!/usr/bin/env python3
"""Which --sample (word2vec's subsampling threshold) `colonnade train --graph`
should default to: for each labelled graph of ../shared/data/graphs, each
threshold and each seed, `colonnade train --graph` with every other flag at
its default (DeepWalk walks: 10 walks of 40 nodes per node; d = 100, window
5, negative 5, 5 epochs, min count 1) and only --sample, --seed and
--threads set, then node classification of the vectors by `colonnade eval
--labels` (one-vs-rest logistic regression trained on 10 %, 50 % and 90 % of
the labelled nodes, Micro/Macro-F1, mean of its seeded splits).

Recorded per run: Micro/Macro-F1 at each labelled fraction, the fraction of
the walk tokens subsampling kept (the train summary's trained_words /
tokens), the training's wall seconds (whole process: graph loading, walks,
training, HDF5 export) and peak RSS, and the evaluation's seconds.

Prints a markdown table of the medians over the seeds per graph × sample and
writes every run to JSON (bench/results/graph-defaults-<date>.json by
default; rewritten after each run, so an interrupted run keeps what it did),
with the command line, date, commit and machine (lscpu). --reuse takes the
runs of an earlier JSON (e.g. of an interrupted run) instead of repeating
them, so that a report can be finished with fewer seeds for a slow graph.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, colonnade_version, log, machine_info, run_child, set_log_name, tail  # noqa: E402

GRAPHS = DATA / "graphs"
FRACTIONS = (0.1, 0.5, 0.9)


# --------------------------------------------------------------------------- helpers


def child_env() -> dict:
    """This environment without COLONNADE_* variables: every flag not given
    on the command line is at its built-in default."""
    return {k: v for k, v in os.environ.items() if not k.startswith("COLONNADE_")}


def commit() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def lscpu() -> dict:
    """`lscpu`'s fields (name → value)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    fields = {}
    for line in out.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    return fields


def parse_seed_overrides(spec: str) -> dict[str, list[int]]:
    """'blogcatalog=1,2;ppi=1' → {'blogcatalog': [1, 2], 'ppi': [1]}."""
    out = {}
    for part in filter(None, spec.split(";")):
        name, seeds = part.split("=", 1)
        out[name.strip()] = [int(s) for s in seeds.split(",") if s.strip()]
    return out


def sample_key(s: float) -> str:
    return "0" if s == 0 else f"{s:g}"


# --------------------------------------------------------------------------- one run


def train(a, work: Path, graph: str, edges: Path, sample: float, seed: int) -> dict:
    tag = f"{graph}-s{sample_key(sample)}-seed{seed}"
    out = work / f"{tag}.h5"
    summary = work / f"{tag}.summary.json"
    cmd = [str(a.bin_dir / "colonnade"), "train", "--graph", str(edges), "--sample", repr(sample),
           "--seed", str(seed), "--threads", str(a.threads), "--output", str(out), "--summary", str(summary)]
    load = os.getloadavg()[0]
    proc = run_child_env(cmd, work / f"{tag}.train.log")
    if proc["returncode"] != 0:
        raise SystemExit(f"colonnade train failed ({shlex.join(cmd)}):\n{tail(work / f'{tag}.train.log')}")
    s = json.loads(summary.read_text())
    tokens, trained = s.get("tokens"), s.get("trained_words")
    return {"tag": tag, "vectors": str(out), "command": shlex.join(cmd), "load_before": load, **proc,
            "summary": s, "tokens": tokens, "trained_words": trained,
            "kept_fraction": trained / tokens if tokens else None}


def run_child_env(cmd: list[str], log_path: Path) -> dict:
    """_common.run_child with COLONNADE_* variables cleared for the child."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("COLONNADE_")}
    try:
        return run_child(cmd, log_path)
    finally:
        os.environ.update(saved)


def evaluate(a, vectors: Path, labels: Path) -> dict:
    """`colonnade eval --labels --json`: Micro/Macro-F1 per labelled fraction."""
    cmd = [str(a.bin_dir / "colonnade"), "eval", "--vectors", str(vectors), "--labels", str(labels),
           "--label-fractions", ",".join(map(str, FRACTIONS)), "--label-splits", str(a.splits), "--json"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    if proc.returncode != 0:
        raise SystemExit(f"colonnade eval failed ({shlex.join(cmd)}): {proc.stderr.strip()[-800:]}")
    report = json.loads(proc.stdout)["labels"]
    out = {"seconds": time.monotonic() - t0, "command": shlex.join(cmd), "f1": {}}
    for r in report["fractions"]:
        out["f1"][str(r["fraction"])] = {"micro": r["micro_f1"]["mean"], "macro": r["macro_f1"]["mean"]}
    out["report"] = {k: v for k, v in report.items() if k != "splits"}
    return out


# --------------------------------------------------------------------------- report


def medians(runs: list[dict]) -> dict:
    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    out = {"seeds": [r["seed"] for r in runs],
           "kept_fraction": med(r["train"]["kept_fraction"] for r in runs),
           "train_wall_seconds": med(r["train"]["wall_seconds"] for r in runs),
           "f1": {}}
    for f in FRACTIONS:
        out["f1"][str(f)] = {m: med(r["eval"]["f1"][str(f)][m] for r in runs) for m in ("micro", "macro")}
        out["f1"][str(f)]["micro_range"] = [min(r["eval"]["f1"][str(f)]["micro"] for r in runs),
                                            max(r["eval"]["f1"][str(f)]["micro"] for r in runs)]
    return out


def table(results: dict) -> str:
    head = ("| graph | --sample | seeds | kept | "
            + " | ".join(f"Micro {int(f * 100)} %" for f in FRACTIONS) + " | "
            + " | ".join(f"Macro {int(f * 100)} %" for f in FRACTIONS) + " | train wall s |")
    rows = [head, "|---|---:|---:|---:|" + "---:|" * (2 * len(FRACTIONS)) + "---:|"]
    for key, m in results["medians"].items():
        graph, sample = key.split("|")
        f1 = m["f1"]
        rows.append(f"| {graph} | {sample} | {len(m['seeds'])} | {m['kept_fraction'] * 100:.1f} % | "
                    + " | ".join(f"{f1[str(f)]['micro']:.3f}" for f in FRACTIONS) + " | "
                    + " | ".join(f"{f1[str(f)]['macro']:.3f}" for f in FRACTIONS)
                    + f" | {m['train_wall_seconds']:.1f} |")
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("COLONNADE_BIN_DIR", REPO / "target" / "release")))
    p.add_argument("--graphs", default="karate,cora,ppi,blogcatalog",
                   help="comma-separated graph names (X.edges and X.labels under --graph-dir)")
    p.add_argument("--graph-dir", type=Path, default=GRAPHS)
    p.add_argument("--samples", default="0,1e-5,1e-4,1e-3", help="comma-separated --sample values")
    p.add_argument("--seeds", default="1,2,3", help="comma-separated --seed values")
    p.add_argument("--graph-seeds", default="",
                   help="per-graph seeds overriding --seeds, e.g. 'blogcatalog=1,2' (';' between graphs)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--splits", type=int, default=5, help="`colonnade eval --label-splits`")
    p.add_argument("--workdir", type=Path, default=None, help="keep vectors and logs here (default: a temp dir, removed)")
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--reuse", type=Path, default=None,
                   help="JSON of an earlier (e.g. interrupted) run with the same binaries: its runs of a "
                        "graph × sample × seed asked for here are taken as they are instead of run again")
    a = p.parse_args()
    set_log_name("graph_defaults")

    graphs = [g for g in a.graphs.split(",") if g]
    samples = [float(s) for s in a.samples.split(",") if s]
    seeds = [int(s) for s in a.seeds.split(",") if s]
    per_graph_seeds = parse_seed_overrides(a.graph_seeds)
    for g in graphs:
        for ext in ("edges", "labels"):
            if not (a.graph_dir / f"{g}.{ext}").exists():
                p.error(f"missing {a.graph_dir / f'{g}.{ext}'}")
    if not (a.bin_dir / "colonnade").exists():
        p.error(f"no colonnade in {a.bin_dir}")

    command = shlex.join([Path(sys.executable).name, "bench/graph_defaults.py", *sys.argv[1:]])
    json_out = a.json_out or REPO / "bench" / "results" / f"graph-defaults-{time.strftime('%Y%m%d-%H%M%S')}.json"
    json_out.parent.mkdir(parents=True, exist_ok=True)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="colonnade-graph-defaults-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results: dict = {
        "command": command, "argv": sys.argv, "date": started, "commit": commit(),
        "colonnade": colonnade_version(a.bin_dir), "bin_dir": str(a.bin_dir),
        "machine": {**machine_info(), "lscpu": lscpu()},
        "settings": {"graphs": graphs, "samples": samples, "seeds": seeds, "graph_seeds": per_graph_seeds,
                     "threads": a.threads, "fractions": list(FRACTIONS), "splits": a.splits,
                     "train_flags": "colonnade defaults except --sample/--seed/--threads"},
        "load_average_before": os.getloadavg(),
        "runs": [], "medians": {}, "graph_seconds": {},
    }
    reused: dict = {}
    if a.reuse:
        earlier = json.loads(a.reuse.read_text())
        reused = {(r["graph"], r["sample"], r["seed"]): r for r in earlier["runs"]}
        results["reused_from"] = {"path": str(a.reuse), "command": earlier.get("command"),
                                  "date": earlier.get("date"), "commit": earlier.get("commit"),
                                  "colonnade": earlier.get("colonnade"), "bin_dir": earlier.get("bin_dir")}

    def save() -> None:
        json_out.write_text(json.dumps(results, indent=2, default=str))

    for g in graphs:
        edges, labels = a.graph_dir / f"{g}.edges", a.graph_dir / f"{g}.labels"
        g_seeds = per_graph_seeds.get(g, seeds)
        t_graph = time.monotonic()
        for seed in g_seeds:  # seeds outermost, so that machine noise spreads over the samples
            for sample in samples:
                if (g, sample, seed) in reused:
                    run = dict(reused[(g, sample, seed)], reused=True)
                    results["runs"].append(run)
                    log(f"{g} sample {sample_key(sample)} seed {seed}: reused from {a.reuse}")
                    continue
                tr = train(a, work, g, edges, sample, seed)
                ev = evaluate(a, Path(tr["vectors"]), labels)
                run = {"graph": g, "sample": sample, "seed": seed, "train": tr, "eval": ev}
                results["runs"].append(run)
                f1 = ev["f1"]
                log(f"{g} sample {sample_key(sample)} seed {seed}: kept {tr['kept_fraction'] * 100:.1f} %, "
                    f"train {tr['wall_seconds']:.1f} s, eval {ev['seconds']:.1f} s, Micro-F1 "
                    + " / ".join(f"{f1[str(f)]['micro']:.3f}" for f in FRACTIONS))
                if a.workdir is None:
                    Path(tr["vectors"]).unlink(missing_ok=True)
                save()
        results["graph_seconds"][g] = time.monotonic() - t_graph + sum(
            r["train"]["wall_seconds"] + r["eval"]["seconds"] for r in results["runs"] if r["graph"] == g and r.get("reused"))
        for sample in samples:
            runs = [r for r in results["runs"] if r["graph"] == g and r["sample"] == sample]
            results["medians"][f"{g}|{sample_key(sample)}"] = medians(runs)
        save()

    results["load_average_after"] = os.getloadavg()
    report = "\n".join([
        f"## Graph subsampling defaults ({started})", "",
        f"- Command: `{command}`; {results['colonnade']}; commit {results['commit']}",
        f"- Machine: {results['machine']['node']}, nproc {results['machine']['nproc']}, "
        f"{results['machine']['cpu_model']}; load average {results['load_average_before'][0]:.2f} before, "
        f"{results['load_average_after'][0]:.2f} after",
        f"- `colonnade train --graph` defaults (10 walks × 40 per node, d = 100, window 5, negative 5, 5 epochs, "
        f"min count 1), --threads {a.threads}; F1 by `colonnade eval --labels` (mean of {a.splits} splits); "
        "medians over the seeds; kept = trained_words / tokens", "",
        table(results)])
    results["markdown"] = report
    save()
    print(report)
    log(f"JSON: {json_out}")
    if a.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
