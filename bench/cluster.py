#!/usr/bin/env python3
"""The cluster mode's cost per word and its quality with many minibatches in flight.

Three parts, each optional, in one run on the same two cores:

1. **CPU per token** (--cpu-shards, --cpu-sizes): for every vector size d and
   every layout S (0 = one embedded shard, `colonnade train --embedded-shards 1
   --threads 2`; S >= 1 = S `ps-shard --threads 1` processes and one
   `colonnade train --shards ... --threads 2` worker with its defaults), the
   CPU seconds of every whole process (the worker's rusage, each shard's
   utime+stime from /proc just before it is stopped) per corpus token trained
   (tokens x epochs; every layout also writes its vectors, as an embedded
   run must), the ratio of the total to the embedded run's of the same
   binary, and S against S/2. With --old-bin-dir every layout is run with the
   old binary right before the new one, so a pair shares the machine's load.
2. **Against gensim** (--vs-gensim): gensim 4.4 `Word2Vec(workers=2)` and 2
   `ps-shard` processes + 1 worker, training words/s of each (gensim: its
   `train()` call; Colonnade: the worker's --summary seconds) and the ratio,
   --rounds times alternating, medians.
3. **Minibatches in flight** (--in-flight, --samples, --seeds): 2 `ps-shard`
   processes and one worker with threads x --in-flight x
   --minibatches-per-call = N minibatches in flight (the configurations of
   IN_FLIGHT below), on the whole corpus, 1 epoch: words/s, Google analogies
   (top-30k, case-insensitive) and WS-353 rho of the exported vectors, or the
   divergence the worker reported. Medians over the seeds.

Prints a markdown report (command, date, machine) and writes it with the JSON
results to bench/results/cluster-<time>.{json,md}.

Usage:
    bench/cluster.sh --old-bin-dir ../old/target/release            # everything, defaults
    .venv/bin/python bench/cluster.py --cpu-shards 0,4 --cpu-sizes 100 --in-flight '' --corpus testdata/sample.txt.xz
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import (
    DEFAULT_CORPUS,
    DEFAULT_EVAL,
    REPO,
    colonnade_version,
    decompress,
    evaluate,
    fmt,
    log,
    machine_info,
    make_vocab,
    parse_variant,
    proc_cpu_seconds,
    run_child,
    run_gensim,
    set_log_name,
    start_shards,
    stop_shards,
    tail,
)

set_log_name("cluster")

# Minibatches in flight -> (threads, --in-flight, --minibatches-per-call) of one worker.
IN_FLIGHT = {
    16: (2, 2, 4),
    32: (2, 4, 4),
    64: (4, 4, 4),
    128: (4, 4, 8),
    256: (4, 4, 16),
    512: (8, 4, 16),
    1024: (8, 8, 16),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", type=Path, default=REPO / "target" / "release")
    p.add_argument("--old-bin-dir", type=Path, help="an older build, run beside --bin-dir in part 1")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    p.add_argument("--work", type=Path, help="keep the work files here (default: a temporary directory)")
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--cpu-shards", default="0,1,2,4,8", help="layouts of part 1 (0 = embedded); '' skips it")
    p.add_argument("--cpu-sizes", default="100,300")
    p.add_argument("--cpu-sample", type=float, default=1e-4)
    p.add_argument("--vs-gensim", action="store_true", help="run part 2")
    p.add_argument("--rounds", type=int, default=3, help="rounds of part 2")
    p.add_argument("--in-flight", default="16,64,256,1024",
                   help="minibatches in flight of part 3, each N (IN_FLIGHT's configuration) or "
                        "threads/in-flight/per-call; '' skips it")
    p.add_argument("--samples", default="1e-3,1e-4")
    p.add_argument("--variants", default="",
                   help="name[@bin-dir]=flags, comma-separated (e.g. 'old-pair@../old/target/release=,"
                        "pair=,shared=--shared-negatives'): every part runs once per variant, with its build "
                        "(default --bin-dir) and extra train flags, instead of new/old")
    p.add_argument("--cpu-eval", action="store_true",
                   help="part 1 also evaluates every run's vectors (analogy, WS-353)")
    p.add_argument("--seeds", default="1")
    return p.parse_args(argv)


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def train_flags(args, plain: Path, vocab: Path, size: int, sample: float, seed: int = 1) -> list[str]:
    return [
        "--corpus", str(plain), "--vocab", str(vocab), "--size", str(size), "--window", str(args.window),
        "--negative", str(args.negative), "--min-count", str(args.min_count), "--sample", repr(sample),
        "--alpha", "0.025", "--iter", "1", "--seed", str(seed),
    ]


def run_layout(bin_dir: Path, shards: int, flags: list[str], work: Path, tag: str,
               worker_flags: tuple[str, ...] = ("--threads", "2"), output: Path | None = None) -> dict:
    """One training run: embedded (shards == 0) or `shards` ps-shard processes
    and one worker. Returns CPU seconds per process, tokens, words/s, and the
    worker's exit code and last lines when it failed."""
    summary = work / f"{tag}.summary.json"
    out = ["--output-binary", str(output), "--output", str(output.with_suffix(".h5"))] if output else []
    colonnade = str(bin_dir / "colonnade")
    if shards == 0:
        cmd = [colonnade, "train", "--embedded-shards", "1", *worker_flags, *flags, "--summary", str(summary), *out]
        run = run_child(cmd, work / f"{tag}.log")
        shard_cpu: list[float] = []
    else:
        procs = start_shards(bin_dir, shards, work, tag)
        try:
            endpoints = ",".join(e for _, e in procs)
            cmd = [colonnade, "train", "--shards", endpoints, *worker_flags, *flags, "--summary", str(summary), *out]
            run = run_child(cmd, work / f"{tag}.log")
            shard_cpu = [proc_cpu_seconds(p.pid) or 0.0 for p, _ in procs]
        finally:
            stop_shards(procs)
    r = {"tag": tag, "bin_dir": str(bin_dir), "shards": shards, "command": cmd, "returncode": run["returncode"],
         "worker_cpu": run["cpu_seconds"], "shard_cpu": shard_cpu, "wall_seconds": run["wall_seconds"]}
    if run["returncode"] != 0:
        r["failure"] = tail(work / f"{tag}.log", 6)
        return r
    s = json.loads(summary.read_text())
    r.update(tokens=s["tokens"], train_seconds=s["seconds"], words_per_second=s["tokens_per_second"],
             trained_words=s.get("trained_words"))
    total = r["worker_cpu"] + sum(shard_cpu)
    r["cpu_total"] = total
    r["ns_per_token"] = 1e9 * total / s["tokens"]
    r["worker_ns_per_token"] = 1e9 * r["worker_cpu"] / s["tokens"]
    r["shard_ns_per_token"] = [1e9 * c / s["tokens"] for c in shard_cpu]
    return r


def variants(args) -> list[tuple[str, Path, list[str]]]:
    """(name, bin dir, extra train flags) of every build or variant a part runs:
    --variants on --bin-dir, else "new" (and "old" with --old-bin-dir)."""
    if args.variants.strip():
        out = []
        for item in [x.strip() for x in args.variants.split(",") if x.strip()]:
            name, flags = parse_variant(item)
            name, _, bin_dir = name.partition("@")
            out.append((name, Path(bin_dir).resolve() if bin_dir else args.bin_dir, flags))
        return out
    return [("new", args.bin_dir, [])] + ([("old", args.old_bin_dir, [])] if args.old_bin_dir else [])


def cpu_part(args, plain: Path, vocab: Path, work: Path) -> list[dict]:
    rows = []
    bins = variants(args)
    for size in ints(args.cpu_sizes):
        for shards in ints(args.cpu_shards):
            for name, bin_dir, extra in reversed(bins):  # old first, then new
                tag = f"cpu-{name}-d{size}-s{shards}"
                log(f"{tag}: training")
                # Every layout writes its vectors: an embedded run must, and
                # so all pay for an export.
                vec = work / f"{tag}.bin"
                r = run_layout(bin_dir, shards, train_flags(args, plain, vocab, size, args.cpu_sample) + extra, work,
                               tag, output=vec)
                r.update(binary=name, size=size)
                if args.cpu_eval and "failure" not in r:
                    r["eval"] = evaluate(vec, args.eval_dir)
                    log(f"{tag}: analogy {100 * r['eval']['analogy_accuracy']:.2f} %, "
                        f"WS-353 {r['eval']['ws353_spearman']:.3f}")
                for f in (vec, vec.with_suffix(".h5")):
                    f.unlink(missing_ok=True)
                if "failure" in r:
                    log(f"{tag}: FAILED\n{r['failure']}")
                else:
                    log(f"{tag}: {r['ns_per_token']:.0f} ns/token (worker {r['worker_ns_per_token']:.0f}, shards "
                        + " + ".join(f"{x:.0f}" for x in r["shard_ns_per_token"]) + f"), {r['words_per_second']:,.0f} words/s")
                rows.append(r)
    return rows


def cpu_table(rows: list[dict]) -> str:
    def find(binary, size, shards):
        return next((r for r in rows if r["binary"] == binary and r["size"] == size and r["shards"] == shards
                     and "ns_per_token" in r), None)

    evals = any("eval" in r for r in rows)
    lines = ["| binary | d | layout | CPU ns/token, total | worker | each shard (median) | × embedded | × S/2 | words/s |"
             + (" analogy % | WS-353 ρ |" if evals else ""),
             "|---|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if evals else "")]
    for r in rows:
        layout = "embedded, 1 shard" if r["shards"] == 0 else f"{r['shards']} ps-shard + 1 worker"
        if "ns_per_token" not in r:
            lines.append(f"| {r['binary']} | {r['size']} | {layout} | failed | | | | | |")
            continue
        emb = find(r["binary"], r["size"], 0)
        half = find(r["binary"], r["size"], r["shards"] // 2) if r["shards"] >= 2 else None
        per_shard = statistics.median(r["shard_ns_per_token"]) if r["shard_ns_per_token"] else None
        lines.append(
            f"| {r['binary']} | {r['size']} | {layout} | {r['ns_per_token']:,.0f} | {r['worker_ns_per_token']:,.0f} "
            f"| {fmt(per_shard, ',.0f', '–')} | {fmt(r['ns_per_token'] / emb['ns_per_token'] if emb else None, '.2f')} "
            f"| {fmt(r['ns_per_token'] / half['ns_per_token'] if half and r['shards'] > 1 else None, '.2f', '–')} "
            f"| {r['words_per_second']:,.0f} |"
            + (f" {fmt(100 * r['eval']['analogy_accuracy'] if 'eval' in r else None, '.2f')} "
               f"| {fmt(r['eval']['ws353_spearman'] if 'eval' in r else None, '.3f')} |" if evals else ""))
    return "\n".join(lines)


def gensim_part(args, plain: Path, vocab: Path, work: Path) -> dict:
    g_args = argparse.Namespace(size=100, window=args.window, negative=args.negative, min_count=args.min_count,
                                sample=args.cpu_sample, alpha=0.025, iter=1, threads=2, cbow=False)
    names = [name for name, _, _ in variants(args)]
    runs = {"gensim": [], "cluster": [], "variants": {n: [] for n in names}}
    for i in range(args.rounds):
        g = run_gensim(g_args, plain, work, tag=f"gensim{i}")
        runs["gensim"].append(g["corpus_tokens"] / g["train_seconds"])
        for name, bin_dir, extra in variants(args):
            r = run_layout(bin_dir, 2, train_flags(args, plain, vocab, 100, args.cpu_sample) + extra, work,
                           f"vsg{i}-{name}", output=work / f"vsg{i}-{name}.bin")
            runs["variants"][name].append(r.get("words_per_second"))
            log(f"round {i}: gensim {runs['gensim'][-1]:,.0f} words/s, 2 ps-shard + 1 worker ({name}) "
                f"{fmt(runs['variants'][name][-1], ',.0f')} words/s")
    runs["cluster"] = runs["variants"][names[0]]
    runs["median_ratios"] = {}
    for name in names:
        ratios = [c / g for c, g in zip(runs["variants"][name], runs["gensim"]) if c]
        runs["median_ratios"][name] = statistics.median(ratios) if ratios else None
    runs["median_ratio"] = runs["median_ratios"][names[0]]
    return runs


def in_flight_part(args, plain: Path, vocab: Path, work: Path) -> list[dict]:
    rows = []
    for sample in floats(args.samples):
        for item in [x.strip() for x in args.in_flight.split(",") if x.strip()]:
            if "/" in item:
                threads, in_flight, per_call = (int(x) for x in item.split("/"))
            else:
                threads, in_flight, per_call = IN_FLIGHT[int(item)]
            n = threads * in_flight * per_call
            for seed in ints(args.seeds):
                for name, bin_dir, extra in variants(args):
                    tag = f"if{n}-s{sample:g}-seed{seed}" + (f"-{name}" if args.variants.strip() else "")
                    flags = ("--threads", str(threads), "--in-flight", str(in_flight),
                             "--minibatches-per-call", str(per_call))
                    log(f"{tag}: training ({threads} threads x {in_flight} in flight x {per_call} per call)")
                    vec = work / f"{tag}.bin"
                    r = run_layout(bin_dir, 2, train_flags(args, plain, vocab, 100, sample, seed) + extra, work, tag,
                                   worker_flags=flags, output=vec)
                    r.update(in_flight=n, sample=sample, seed=seed, config=f"{threads}/{in_flight}/{per_call}",
                             variant=name)
                    if "failure" in r:
                        r["diverged"] = "diverged" in r["failure"]
                        log(f"{tag}: FAILED\n{r['failure']}")
                    else:
                        r["eval"] = evaluate(vec, args.eval_dir)
                        log(f"{tag}: analogy {100 * r['eval']['analogy_accuracy']:.2f} %, "
                            f"WS-353 {r['eval']['ws353_spearman']:.3f}, {r['words_per_second']:,.0f} words/s")
                        for f in (vec, vec.with_suffix(".h5")):
                            f.unlink(missing_ok=True)
                    rows.append(r)
    return rows


def in_flight_table(rows: list[dict]) -> str:
    lines = ["| variant | sample | in flight | threads/in-flight/per call | seeds | analogy % (median) "
             "| WS-353 ρ (median) | Δ analogy vs 16 | words/s (median) | failed |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.get("variant", "new"), r["sample"], r["in_flight"], r["config"]), []).append(r)
    base = {}
    for (variant, sample, n, _), rs in groups.items():
        ok = [r for r in rs if "eval" in r]
        an = statistics.median(100 * r["eval"]["analogy_accuracy"] for r in ok) if ok else None
        ws = statistics.median(r["eval"]["ws353_spearman"] for r in ok) if ok else None
        wps = statistics.median(r["words_per_second"] for r in ok) if ok else None
        if n == 16 and (variant, sample) not in base:
            base[(variant, sample)] = an
        b = base.get((variant, sample))
        delta = an - b if an is not None and b is not None else None
        failed = [("diverged" if r.get("diverged") else "error") + f" (seed {r['seed']})" for r in rs if "eval" not in r]
        lines.append(f"| {variant} | {sample:g} | {n} | {rs[0]['config']} | {len(rs)} | {fmt(an, '.2f')} | {fmt(ws, '.3f')} "
                     f"| {fmt(delta, '+.2f', '–')} | {fmt(wps, ',.0f')} | {', '.join(failed) or 'none'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    for d in ("bin_dir", "old_bin_dir", "corpus", "eval_dir"):
        if getattr(args, d) is not None:
            setattr(args, d, getattr(args, d).resolve())
    for b in {args.bin_dir, *([args.old_bin_dir] if args.old_bin_dir else []), *(v[1] for v in variants(args))}:
        for exe in ("colonnade", "ps-shard"):
            if not os.access(b / exe, os.X_OK):
                raise SystemExit(f"{b / exe} not found: run `cargo build --release` (or bench/cluster.sh)")
    tmp = None
    if args.work:
        work = args.work.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="colonnade-cluster-")
        work = Path(tmp.name)
    started = _dt.datetime.now(_dt.timezone.utc)
    plain = work / "corpus.txt"
    tokens = decompress(args.corpus, plain)
    log(f"corpus: {tokens:,} tokens from {args.corpus}")
    vocab_args = argparse.Namespace(bin_dir=args.bin_dir, min_count=args.min_count)
    vocab = Path(make_vocab(vocab_args, plain, work)["path"])

    result = {"command": os.environ.get("COLONNADE_BENCH_ENTRY", "bench/cluster.py") + " " + shlex.join(argv),
              "date": started.isoformat(timespec="seconds"), "machine": machine_info(),
              "version": colonnade_version(args.bin_dir), "corpus": str(args.corpus), "tokens": tokens}
    if args.old_bin_dir:
        result["old_version"] = colonnade_version(args.old_bin_dir)
    report = [f"# Cluster benchmark, {result['date']}", "", f"`{result['command']}`", "",
              f"Machine: {result['machine']['cpu_model']}, {result['machine']['nproc']} CPUs, "
              f"{result['machine']['mem_total_gib']} GiB; {result['version']}"
              + (f" against {result['old_version']} ({args.old_bin_dir})" if args.old_bin_dir else "")
              + f"; corpus {args.corpus.name}, {tokens:,} tokens.", ""]
    if ints(args.cpu_shards):
        rows = cpu_part(args, plain, vocab, work)
        result["cpu"] = rows
        report += ["## CPU per token (1 epoch, sample %g)" % args.cpu_sample, "", cpu_table(rows), ""]
    if args.vs_gensim:
        g = gensim_part(args, plain, vocab, work)
        result["vs_gensim"] = g
        names = list(g["variants"])
        report += ["## 2 ps-shard processes + 1 worker against gensim (d 100, 1 epoch)", "",
                   "| round | gensim words/s | " + " | ".join(f"{n} words/s | ratio" for n in names) + " |",
                   "|---:|---:|" + "---:|---:|" * len(names)]
        for i, gw in enumerate(g["gensim"]):
            cells = []
            for n in names:
                cw = g["variants"][n][i]
                cells.append(f"{fmt(cw, ',.0f')} | {fmt(cw / gw if cw else None, '.2f')}")
            report.append(f"| {i} | {gw:,.0f} | " + " | ".join(cells) + " |")
        report += ["", "Median ratio: " + ", ".join(f"{n} {fmt(g['median_ratios'][n], '.2f')}" for n in names), ""]
    if args.in_flight.strip():
        rows = in_flight_part(args, plain, vocab, work)
        result["in_flight"] = rows
        report += ["## Minibatches in flight (2 ps-shard processes, 1 worker, d 100, 1 epoch)", "",
                   in_flight_table(rows), ""]
    text = "\n".join(report)
    print(text)
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    stem = out_dir / f"cluster-{started.strftime('%Y%m%dT%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
    stem.with_suffix(".md").write_text(text + "\n")
    log(f"written {stem}.md and .json")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
