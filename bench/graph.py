#!/usr/bin/env python3
"""Graph embeddings: Colonnade's DeepWalk and node2vec against gensim fed
with walks from Python, on the labelled graphs of ../shared/data/graphs, and
a large generated graph over separate ps-shard processes.

Sections (each optional):

- deepwalk: for each graph, the DeepWalk settings of the shared baseline
  (80 walks of length 40 per node, d = 128, window 10, negative 5, one
  epoch): gensim with uniform random walks generated in Python (as the
  DeepWalk reference code does) against `colonnade train --graph`; end-to-end
  wall time (walks + training, whole processes) and node classification
  (one-vs-rest logistic regression, Micro/Macro-F1), scored by
  scikit-learn and by `colonnade eval --labels` on the same vectors.
- node2vec: for each graph and (p, q), Colonnade's node2vec walks
  (--save-walks) trained by Colonnade and the *same walks* fed to gensim;
  node classification of both (node2vec's settings: 10 walks of length 80,
  window 10, d = 128).
- big: a Barabási–Albert graph (graph/examples/powerlaw.rs) trained over
  separate ps-shard processes: time and peak RSS of every process.

Prints a markdown report and writes JSON (bench/results/ by default).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (DATA, REPO, colonnade_version, fmt, log, machine_info, parse_variant, run_child,  # noqa: E402
                     set_log_name, tail)

GRAPHS = DATA / "graphs"
FRACTIONS = (0.1, 0.5, 0.9)


# --------------------------------------------------------------------------- gensim child


def gensim_child(a: argparse.Namespace) -> None:
    """Runs in a child process: walks in Python (or read from a file), then
    gensim skip-gram; writes vectors and timings."""
    import logging

    import gensim
    from gensim.models import Word2Vec

    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
    t0 = time.monotonic()
    if a.walks_file:
        walks = [line.split() for line in open(a.walks_file)]
    else:
        # DeepWalk's reference walks (phanein/deepwalk graph.py): adjacency
        # lists, every round shuffles the nodes and starts one uniform walk
        # of `walk_length` nodes at each; self-loops ignored.
        adj: dict[str, list[str]] = collections.defaultdict(list)
        for line in open(a.edges):
            f = line.split()
            if len(f) >= 2 and f[0] != f[1]:
                adj[f[0]].append(f[1])
                adj[f[1]].append(f[0])
        rand = random.Random(a.seed)
        nodes = list(adj)
        walks = []
        for _ in range(a.walks_per_node):
            rand.shuffle(nodes)
            for start in nodes:
                walk = [start]
                while len(walk) < a.walk_length:
                    walk.append(rand.choice(adj[walk[-1]]))
                walks.append(walk)
    walk_seconds = time.monotonic() - t0
    t1 = time.monotonic()
    model = Word2Vec(
        walks,
        vector_size=a.size,
        window=a.window,
        negative=a.negative,
        sg=1,
        hs=0,
        epochs=a.iter,
        workers=a.threads,
        seed=1,
        min_count=a.min_count,
        sample=a.sample,
    )
    train_seconds = time.monotonic() - t1
    model.wv.save_word2vec_format(a.out, binary=True)
    Path(a.result).write_text(json.dumps({
        "gensim_version": gensim.__version__,
        "walk_seconds": walk_seconds,
        "train_seconds": train_seconds,
        "walks": len(walks),
        "tokens": sum(map(len, walks)),
        "nodes": len(model.wv),
    }))


def run_gensim(a, work: Path, name: str, edges: Path | None, walks_file: Path | None, walks: int, length: int) -> dict:
    out, result = work / f"{name}.gensim.bin", work / f"{name}.gensim.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--gensim-child", "--out", str(out), "--result", str(result),
           "--size", str(a.size), "--window", str(a.window), "--negative", str(a.negative), "--iter", str(a.iter),
           "--threads", str(a.threads), "--walks-per-node", str(walks), "--walk-length", str(length),
           "--seed", str(a.seed), "--min-count", "1", "--sample", str(a.sample)]
    cmd += ["--walks-file", str(walks_file)] if walks_file else ["--edges", str(edges)]
    log(f"{name}: gensim ({'same walks' if walks_file else 'Python walks'})")
    proc = run_child(cmd, work / f"{name}.gensim.log")
    if proc["returncode"] != 0:
        raise SystemExit(f"gensim failed:\n{tail(work / f'{name}.gensim.log')}")
    res = json.loads(result.read_text())
    res.update(proc)
    res["vectors"] = str(out)
    return res


# --------------------------------------------------------------------------- colonnade


def run_colonnade(a, work: Path, name: str, edges: Path, walks: int, length: int, extra: list[str]) -> dict:
    out = work / f"{name}.colonnade.bin"
    summary = work / f"{name}.colonnade.summary.json"
    cmd = [str(a.bin_dir / "colonnade"), "train", "--graph", str(edges), "--embedded-shards", "1",
           "--walks-per-node", str(walks), "--walk-length", str(length), "--size", str(a.size),
           "--window", str(a.window), "--negative", str(a.negative), "--iter", str(a.iter),
           "--threads", str(a.threads), "--seed", str(a.seed), "--sample", str(a.sample), "--output-binary", str(out),
           "--summary", str(summary), *extra]
    log(f"{name}: colonnade {shlex.join(extra)}")
    proc = run_child(cmd, work / f"{name}.colonnade.log")
    if proc["returncode"] != 0:
        raise SystemExit(f"colonnade failed:\n{tail(work / f'{name}.colonnade.log')}")
    res = {"vectors": str(out), "command": shlex.join(cmd), **proc}
    res["summary"] = json.loads(summary.read_text())
    return res


# --------------------------------------------------------------------------- node classification


def load_labels(path: Path) -> dict[str, list[str]]:
    by_node: dict[str, list[str]] = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            node, label = line.split()
            by_node[node].append(label)
    return by_node


def sklearn_f1(vectors: Path, labels: Path, fractions, orders: list[list[str]]) -> dict:
    """scikit-learn's one-vs-rest LogisticRegression (L2, C = 1, lbfgs, tol
    1e-6), each test node given its k most probable labels (k = its true
    label count); Micro/Macro-F1 means over the given split orders (split s
    trains on the first ⌊f·n⌋ nodes of orders[s]: `colonnade eval`'s splits)."""
    import numpy as np
    from gensim.models import KeyedVectors
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import MultiLabelBinarizer

    kv = KeyedVectors.load_word2vec_format(str(vectors), binary=True)
    by_node = load_labels(labels)
    nodes = sorted(n for n in by_node if n in kv.key_to_index)
    index = {n: i for i, n in enumerate(nodes)}
    x = np.array([kv[n] for n in nodes], dtype=np.float64)
    y = MultiLabelBinarizer().fit_transform([by_node[n] for n in nodes])
    out = {}
    for frac in fractions:
        micro, macro = [], []
        for order in orders:
            idx = np.array([index[n] for n in order])
            k = int(frac * len(idx))
            tr, te = idx[:k], idx[k:]
            clf = OneVsRestClassifier(LogisticRegression(max_iter=1000, tol=1e-6)).fit(x[tr], y[tr])
            proba = clf.predict_proba(x[te])
            pred = np.zeros_like(y[te])
            for i, row in enumerate(proba):
                pred[i, np.argsort(-row, kind="stable")[: y[te][i].sum()]] = 1
            micro.append(f1_score(y[te], pred, average="micro"))
            macro.append(f1_score(y[te], pred, average="macro", zero_division=0))
        out[str(frac)] = {"micro": float(np.mean(micro)), "macro": float(np.mean(macro)),
                          "micro_sd": float(np.std(micro)), "macro_sd": float(np.std(macro))}
    return out


def colonnade_f1(a, vectors: Path, labels: Path, fractions, splits: int) -> tuple[dict, list[list[str]]]:
    """`colonnade eval --labels` on the vectors: F1 per fraction, and the
    split orders it used (for scikit-learn to score the same splits)."""
    cmd = [str(a.bin_dir / "colonnade"), "eval", "--vectors", str(vectors), "--labels", str(labels),
           "--label-fractions", ",".join(map(str, fractions)), "--label-splits", str(splits), "--json"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"colonnade eval --labels failed: {proc.stderr.strip()[-500:]}")
    seconds = time.monotonic() - t0
    report = json.loads(proc.stdout)["labels"]
    out = {"seconds": seconds}
    for r in report["fractions"]:
        out[str(r["fraction"])] = {"micro": r["micro_f1"]["mean"], "macro": r["macro_f1"]["mean"]}
    return out, [s["order"] for s in report["splits"]]


def score(a, result: dict, labels: Path) -> None:
    """Node classification of one system's vectors, by both scorers."""
    vectors = Path(result["vectors"])
    ours, orders = colonnade_f1(a, vectors, labels, FRACTIONS, a.splits)
    result["f1_colonnade_eval"] = ours
    t0 = time.monotonic()
    result["f1_sklearn"] = sklearn_f1(vectors, labels, FRACTIONS, orders)
    result["f1_sklearn"]["seconds"] = time.monotonic() - t0
    result["f1_max_disagreement"] = max(
        abs(ours[str(f)][m] - result["f1_sklearn"][str(f)][m]) for f in FRACTIONS for m in ("micro", "macro"))


# --------------------------------------------------------------------------- big graph


def proc_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def big_graph(a, work: Path) -> dict:
    edges = work / f"ba-{a.big_nodes}.edges"
    t0 = time.monotonic()
    gen = REPO / "target" / "release" / "examples" / "powerlaw"
    subprocess.run([str(gen), str(a.big_nodes), str(a.big_m), "1", str(edges)], check=True)
    gen_seconds = time.monotonic() - t0
    log(f"big: generated {edges} ({edges.stat().st_size / 1e9:.2f} GB) in {gen_seconds:.0f} s")
    shards, logs = [], []
    endpoints = []
    for i in range(a.big_shards):
        port = 52100 + i
        log_path = work / f"big-shard{i}.log"
        logs.append(log_path)
        p = subprocess.Popen([str(a.bin_dir / "ps-shard"), "--listen", f"127.0.0.1:{port}", "--threads", "1"],
                             stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
        shards.append(p)
        endpoints.append(f"127.0.0.1:{port}")
    time.sleep(1.0)
    out_h5 = work / "big.h5"
    vocab = work / "big.vocab"
    summary = work / "big.summary.json"
    cmd = [str(a.bin_dir / "colonnade"), "train", "--graph", str(edges), "--shards", ",".join(endpoints),
           "--walks-per-node", str(a.big_walks), "--walk-length", str(a.big_length), "--size", str(a.big_size),
           "--window", "5", "--negative", "5", "--iter", "1", "--threads", str(a.threads),
           "--save-vocab", str(vocab), "--summary", str(summary), "--output", str(out_h5)]
    log(f"big: training over {a.big_shards} ps-shard processes")
    try:
        proc = run_child(cmd, work / "big.client.log")
        shard_rss = [proc_hwm_mb(p.pid) for p in shards]
    finally:
        for p in shards:
            p.terminate()
        for p in shards:
            p.wait(timeout=60)
    if proc["returncode"] != 0:
        raise SystemExit(f"big graph training failed:\n{tail(work / 'big.client.log')}")
    log_text = (work / "big.client.log").read_text()
    return {
        "nodes": a.big_nodes, "m": a.big_m, "edges_file_gb": edges.stat().st_size / 1e9,
        "generate_seconds": gen_seconds, "client": proc, "shard_peak_rss_mb": shard_rss,
        "summary": json.loads(summary.read_text()), "h5_gb": out_h5.stat().st_size / 1e9,
        "log_lines": [line for line in log_text.splitlines()
                      if any(k in line for k in ("graph loaded", "walks counted", "memory", "training done",
                                                 "written", "model ready"))],
        "command": shlex.join(cmd),
    }


# --------------------------------------------------------------------------- report


def f1_cells(f1: dict | None) -> list[str]:
    if not f1:
        return ["n/a"] * len(FRACTIONS)
    return [f"{f1[str(fr)]['micro']:.3f} / {f1[str(fr)]['macro']:.3f}" if str(fr) in f1 else "n/a" for fr in FRACTIONS]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gensim-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--edges", help=argparse.SUPPRESS)
    p.add_argument("--walks-file", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--walks-per-node", type=int, default=80, help=argparse.SUPPRESS)
    p.add_argument("--walk-length", type=int, default=40, help=argparse.SUPPRESS)
    p.add_argument("--min-count", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("COLONNADE_BIN_DIR", REPO / "target" / "release")))
    p.add_argument("--deepwalk", default="blogcatalog,ppi,cora", help="graphs for the DeepWalk section ('' skips it)")
    p.add_argument("--node2vec", default="ppi:1:1,ppi:4:1,ppi:1:4,ppi:0.25:4,wikipedia_pos:1:1,wikipedia_pos:4:0.5",
                   help="graph:p:q runs of the node2vec section ('' skips it)")
    p.add_argument("--big-nodes", type=int, default=0, help="nodes of the generated graph (0 skips it)")
    p.add_argument("--big-m", type=int, default=5)
    p.add_argument("--big-shards", type=int, default=4)
    p.add_argument("--big-size", type=int, default=64)
    p.add_argument("--big-walks", type=int, default=1)
    p.add_argument("--big-length", type=int, default=20)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--negative", type=int, default=5)
    # Given to both trainers: the recorded results used 1e-3, gensim's default
    # (Colonnade's default for graphs is 0: bench/graph_defaults.py).
    p.add_argument("--sample", type=float, default=1e-3)
    p.add_argument("--iter", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--splits", type=int, default=5, help="seeded splits per labelled fraction")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS", type=parse_variant,
                   help="DeepWalk: also train each graph with these extra `colonnade train` flags, "
                        "reported as 'Colonnade (NAME)'; repeatable")
    p.add_argument("--json-out", type=Path, default=None)
    a = p.parse_args()
    if a.gensim_child:
        gensim_child(a)
        return 0
    set_log_name("graph")
    command = "bench/graph.sh " + shlex.join(sys.argv[1:])
    work = a.workdir or Path(tempfile.mkdtemp(prefix="colonnade-graph-"))
    work.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()[0]
    results: dict = {"command": command, "date": started, "machine": machine,
                     "colonnade": colonnade_version(a.bin_dir), "deepwalk": {}, "node2vec": [], "big": None}
    for name in filter(None, a.deepwalk.split(",")):
        edges, labels = GRAPHS / f"{name}.edges", GRAPHS / f"{name}.labels"
        g = run_gensim(a, work, name, edges, None, 80, 40)
        c = run_colonnade(a, work, name, edges, 80, 40, [])
        row = {"gensim": g, "colonnade": c}
        for vname, flags in a.variant:
            row[f"colonnade ({vname})"] = run_colonnade(a, work, f"{name}-{vname}", edges, 80, 40, flags)
        for who in row:
            score(a, row[who], labels)
        results["deepwalk"][name] = row
        log(f"{name}: gensim {g['wall_seconds']:.1f} s, colonnade {c['wall_seconds']:.1f} s")
    for spec in filter(None, a.node2vec.split(",")):
        name, pp, qq = spec.split(":")
        edges, labels = GRAPHS / f"{name}.edges", GRAPHS / f"{name}.labels"
        tag = f"{name}-p{pp}-q{qq}"
        walks_file = work / f"{tag}.walks"
        c = run_colonnade(a, work, tag, edges, 10, 80, ["--p", pp, "--q", qq, "--save-walks", str(walks_file)])
        g = run_gensim(a, work, tag, None, walks_file, 10, 80)
        row = {"graph": name, "p": float(pp), "q": float(qq), "colonnade": c, "gensim_same_walks": g}
        for who in ("colonnade", "gensim_same_walks"):
            score(a, row[who], labels)
        results["node2vec"].append(row)
    if a.big_nodes:
        results["big"] = big_graph(a, work)
    results["load_average"] = [load_before, os.getloadavg()[0]]

    out = [f"## Graph benchmark ({started})", "",
           f"- Command: `{command}`; {results['colonnade']}",
           f"- Machine: {machine['node']}, nproc {machine['nproc']}, {machine['cpu_model']}, "
           f"{fmt(machine['mem_total_gib'], '.1f')} GiB, Linux {machine['kernel']}; load average "
           f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after",
           f"- DeepWalk: 80 walks × 40 nodes per node, d = {a.size}, window {a.window}, negative {a.negative}, "
           f"{a.iter} epoch, {a.threads} threads, gensim min_count 1 (every node); F1 = Micro / Macro, mean of "
           f"{a.splits} seeded splits (`colonnade eval --labels`'s, scored by it and by scikit-learn's one-vs-rest "
           "LogisticRegression, C = 1, tol 1e-6, on the same splits)", ""]
    if results["deepwalk"]:
        out += ["| graph | system | wall s (walks + train) | ×gensim | peak RSS MB | "
                + " | ".join(f"F1 {int(f * 100)} %" for f in FRACTIONS) + " | F1 by `colonnade eval` " + " / ".join(f"{int(f*100)} %" for f in FRACTIONS) + " | max |ours − sklearn| |",
                "|---|---|---:|---:|---:|" + "---|" * len(FRACTIONS) + "---|---:|"]
        for name, row in results["deepwalk"].items():
            g = row["gensim"]
            for who, r in row.items():
                who = {"gensim": "gensim (Python walks)", "colonnade": "Colonnade"}.get(who, who.replace("colonnade", "Colonnade"))
                wall = r["wall_seconds"]
                detail = (f"{wall:.1f} ({r['walk_seconds']:.1f} + {r['train_seconds']:.1f})" if "walk_seconds" in r
                          else f"{wall:.1f}")
                ours = r["f1_colonnade_eval"]
                out.append(f"| {name} | {who} | {detail} | {g['wall_seconds'] / wall:.2f}× | {r['peak_rss_mb']:.0f} | "
                           + " | ".join(f1_cells(r["f1_sklearn"])) + " | " + ", ".join(f1_cells(ours))
                           + f" | {r['f1_max_disagreement']:.4f} |")
    if results["node2vec"]:
        out += ["", "node2vec: Colonnade's walks (10 × 80 per node, `--save-walks`) trained by Colonnade and the same "
                "walks fed to gensim; F1 Micro / Macro by scikit-learn:", "",
                "| graph | p | q | Colonnade wall s | gensim train s | "
                + " | ".join(f"Colonnade {int(f*100)} %" for f in FRACTIONS) + " | "
                + " | ".join(f"gensim {int(f*100)} %" for f in FRACTIONS) + " |",
                "|---|---:|---:|---:|---:|" + "---|" * (2 * len(FRACTIONS))]
        for r in results["node2vec"]:
            c, g = r["colonnade"], r["gensim_same_walks"]
            out.append(f"| {r['graph']} | {r['p']:g} | {r['q']:g} | {c['wall_seconds']:.1f} | {g['train_seconds']:.1f} | "
                       + " | ".join(f1_cells(c["f1_sklearn"])) + " | " + " | ".join(f1_cells(g["f1_sklearn"])) + " |")
    if results["big"]:
        b = results["big"]
        s = b["summary"]
        out += ["", f"Generated graph: Barabási–Albert, {b['nodes']:,} nodes, m = {b['m']} "
                f"({b['edges_file_gb']:.2f} GB edge list, generated in {b['generate_seconds']:.0f} s), "
                f"{a.big_shards} ps-shard processes, d = {a.big_size}, {a.big_walks} walk(s) × {a.big_length} per node:", "",
                f"- client: wall {b['client']['wall_seconds']:.0f} s, CPU {b['client']['cpu_seconds']:.0f} s, "
                f"peak RSS {b['client']['peak_rss_mb']:.0f} MB; training {s.get('seconds', 0):.0f} s, "
                f"{s.get('tokens_per_second', 0):,.0f} words/s",
                "- shards' peak RSS MB: " + ", ".join(fmt(x, ".0f") for x in b["shard_peak_rss_mb"]),
                f"- HDF5 written: {b['h5_gb']:.2f} GB", "", "```", *b["log_lines"], "```"]
    report = "\n".join(out)
    print(report)
    json_out = a.json_out or REPO / "bench" / "results" / f"graph-{time.strftime('%Y%m%d-%H%M%S')}.json"
    json_out.parent.mkdir(parents=True, exist_ok=True)
    results["markdown"] = report
    json_out.write_text(json.dumps(results, indent=2, default=str))
    log(f"JSON: {json_out}")
    if a.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
