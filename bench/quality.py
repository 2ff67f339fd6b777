#!/usr/bin/env python3
"""Quality and speed benchmark: Colonnade against gensim 4.4 skip-gram.

In one run, on the same decompressed corpus and the same settings
(default: --size 100 --window 5 --negative 5 --min-count 5 --sample 1e-4
--iter 5, 2 threads):

1. gensim `Word2Vec(sg=1, hs=0, workers=2, seed=1)`, fed the corpus streamed
   with `LineSentence` (lines cut into 10,000-token sentences, as Colonnade
   reads them); `build_vocab` and `train` are timed separately;
2. `colonnade train --embedded-shards 2 --threads 2` (once per
   `--minibatch-sweep` value, if given), vectors written in word2vec binary;
3. both evaluated by the same code: Google analogies with gensim's
   `evaluate_word_analogies(restrict_vocab=30000, case_insensitive=True)`
   (3CosAdd) and WS-353 Spearman ρ with `evaluate_word_pairs`.

Each system runs as a child process, so its wall time, CPU time and peak RSS
are its own (os.wait4). "train s" is training only: gensim's `train()` call,
Colonnade's own training time (its --summary, without counting the vocabulary
or exporting). "train CPU s" is CPU time over the same span (gensim: getrusage
around `train()`; Colonnade: /proc/<pid>/stat sampled when its log says the
model is ready and when training is done). "proc CPU s" and "peak RSS" cover
the whole child process (vocabulary, training, export).

Prints a markdown table and writes a JSON result file.

Usage (from any directory):
    bench/quality.sh                                   # build, set up, run
    .venv/bin/python bench/quality.py --iter 1 --corpus testdata/sample.txt.xz
    .venv/bin/python bench/quality.py --skip-gensim --minibatch-sweep 64,256,1024
    .venv/bin/python bench/quality.py --colonnade-only-args "--in-flight 4"
Unknown options are passed to `colonnade train` too (e.g. --minibatch 512).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import (  # bench/_common.py: helpers shared with bench/throughput.py
    DEFAULT_CORPUS,
    DEFAULT_EVAL,
    REPO,
    add_gensim_worker_args,
    add_training_args,
    colonnade_version,
    decompress,
    evaluate,
    fmt,
    gensim_worker,
    log,
    proc_cpu_seconds,
    run_child,
    run_gensim,
    set_log_name,
    tail,
    training_flags,
)

set_log_name("quality")


# --------------------------------------------------------------------------- colonnade


def run_colonnade(args: argparse.Namespace, plain: Path, work: Path, minibatch: int | None, extra: list[str]) -> dict:
    tag = f"colonnade-mb{minibatch}" if minibatch is not None else "colonnade"
    binary = work / f"{tag}.bin"
    summary = work / f"{tag}.summary.json"
    cmd = [
        str(args.bin_dir / "colonnade"), "train",
        "--corpus", str(plain),
        "--embedded-shards", str(args.embedded_shards),
        "--threads", str(args.threads),
        *training_flags(args, args.iter),
        *([] if any(a == "--seed" or a.startswith("--seed=") for a in extra) else ["--seed", "1"]),
        "--output-binary", str(binary),
        "--summary", str(summary),
    ]
    if minibatch is not None:
        cmd += ["--minibatch", str(minibatch)]
    cmd += extra
    marks: dict[str, float | None] = {}

    def on_line(line: str, pid: int) -> None:
        if "model ready on every shard" in line and "start" not in marks:
            marks["start"] = proc_cpu_seconds(pid)
        elif "training done" in line and "end" not in marks:
            marks["end"] = proc_cpu_seconds(pid)
        if "progress" in line or line.startswith("trained "):
            log(f"{tag}: {line.strip()}")

    log(f"{tag}: {shlex.join(cmd)}")
    proc = run_child(cmd, work / f"{tag}.log", on_line)
    if proc["returncode"] != 0:
        raise SystemExit(f"{tag} failed (exit {proc['returncode']}):\n{tail(work / f'{tag}.log')}")
    s = json.loads(summary.read_text())
    start, end = marks.get("start"), marks.get("end")
    with open(binary, "rb") as f:
        vocab_size = int(f.readline().split()[0])
    res = {
        "system": "colonnade" + (f" (minibatch {minibatch})" if minibatch is not None else ""),
        "command": cmd,
        "minibatch": minibatch,
        "train_seconds": s["seconds"],
        "train_cpu_seconds": (end - start) if start is not None and end is not None else None,
        "corpus_tokens": s["tokens"] // max(args.iter, 1),
        "vocab_size": vocab_size,
        "summary": s,
        "vectors": str(binary),
        "version": colonnade_version(args.bin_dir),
    }
    res.update(proc)
    log(f"{tag}: trained in {res['train_seconds']:.1f} s")
    return res


# --------------------------------------------------------------------------- report


def table(rows: list[dict], iters: int) -> str:
    head = (
        "| system | train s | corpus words/s | train CPU s | proc CPU s | proc wall s | peak RSS MB "
        "| vocab | analogy % (sem / syn) | WS-353 ρ |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        wps = r["corpus_tokens"] * iters / r["train_seconds"] if r["train_seconds"] > 0 else None
        e = r["eval"]
        sem = None if e["analogy_semantic"] is None else 100 * e["analogy_semantic"]
        syn = None if e["analogy_syntactic"] is None else 100 * e["analogy_syntactic"]
        lines.append(
            f"| {r['system']} | {r['train_seconds']:.1f} | {fmt(wps, ',.0f')} | {fmt(r.get('train_cpu_seconds'), '.1f')} "
            f"| {r['cpu_seconds']:.1f} | {r['wall_seconds']:.1f} | {r['peak_rss_mb']:.0f} | {r['vocab_size']:,} "
            f"| {100 * e['analogy_accuracy']:.1f} ({fmt(sem, '.1f')} / {fmt(syn, '.1f')}) | {e['ws353_spearman']:.3f} |"
        )
    return "\n".join(lines)


def diff_table(gensim: dict, others: list[dict]) -> str:
    lines = [
        "| Colonnade − gensim | Δ analogy (pp) | Δ WS-353 ρ | train time ratio | train CPU ratio | peak RSS ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    g = gensim["eval"]
    for r in others:
        e = r["eval"]
        cpu = (
            r["train_cpu_seconds"] / gensim["train_cpu_seconds"]
            if r.get("train_cpu_seconds") and gensim.get("train_cpu_seconds")
            else None
        )
        lines.append(
            f"| {r['system']} | {100 * (e['analogy_accuracy'] - g['analogy_accuracy']):+.1f} "
            f"| {e['ws353_spearman'] - g['ws353_spearman']:+.3f} "
            f"| {r['train_seconds'] / gensim['train_seconds']:.2f}× | {fmt(cpu, '.2f')}{'×' if cpu else ''} "
            f"| {r['peak_rss_mb'] / gensim['peak_rss_mb']:.2f}× |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Colonnade vs gensim skip-gram: speed and embedding quality on the same corpus.",
        epilog="Unknown options are passed to `colonnade train` (e.g. --minibatch 512, --in-flight 4).",
    )
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="corpus file (plain, .xz or .gz); default: %(default)s")
    p.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL, help="folder with questions-words.txt and wordsim353.tsv")
    p.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("COLONNADE_BIN_DIR", REPO / "target" / "release")))
    add_training_args(p)
    p.add_argument("--threads", type=int, default=2, help="gensim workers and Colonnade client threads")
    p.add_argument("--embedded-shards", type=int, default=2)
    p.add_argument("--skip-gensim", action="store_true", help="run and report Colonnade only")
    p.add_argument("--colonnade-only-args", default="", help="extra flags for `colonnade train` only, one string")
    p.add_argument("--minibatch-sweep", default=None, help="comma-separated minibatch sizes: one Colonnade run each")
    p.add_argument("--json-out", type=Path, default=None,
                   help="result file (default: <repo>/bench/results/quality-<time>.json)")
    p.add_argument("--workdir", type=Path, default=None, help="keep the corpus, vectors and logs here (default: a temp dir, removed)")
    # Internal: the gensim child process.
    add_gensim_worker_args(p)
    args, unknown = p.parse_known_args(argv)
    return args, unknown


def main(argv: list[str]) -> int:
    args, passthrough = parse_args(argv)
    if args.gensim_worker_corpus:
        gensim_worker(args)
        return 0
    args.corpus = args.corpus.resolve()
    args.eval_dir = args.eval_dir.resolve()
    args.bin_dir = args.bin_dir.resolve()
    for f in (args.corpus, args.eval_dir / "questions-words.txt", args.eval_dir / "wordsim353.tsv"):
        if not f.is_file():
            raise SystemExit(f"missing input file: {f}")
    if not os.access(args.bin_dir / "colonnade", os.X_OK):
        raise SystemExit(f"{args.bin_dir / 'colonnade'} not found: run `cargo build --release` (or bench/quality.sh)")
    extra = shlex.split(args.colonnade_only_args) + passthrough
    sweep = [int(x) for x in args.minibatch_sweep.split(",") if x.strip()] if args.minibatch_sweep else [None]
    if args.minibatch_sweep and any(a == "--minibatch" or a.startswith("--minibatch=") for a in extra):
        raise SystemExit("give either --minibatch-sweep or --minibatch, not both")

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_out = (args.json_out or (REPO / "bench" / "results" / f"quality-{stamp}.json")).resolve()
    keep = args.workdir is not None
    work = args.workdir.resolve() if keep else Path(tempfile.mkdtemp(prefix="colonnade-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        plain = work / "corpus.txt"
        log(f"decompressing {args.corpus} -> {plain}")
        t0 = time.monotonic()
        tokens = decompress(args.corpus, plain)
        log(f"corpus: {tokens:,} tokens ({time.monotonic() - t0:.1f} s)")

        rows = []
        gensim_row = None
        if not args.skip_gensim:
            gensim_row = run_gensim(args, plain, work)
            rows.append(gensim_row)
        for mb in sweep:
            rows.append(run_colonnade(args, plain, work, mb, extra))
        for r in rows:
            log(f"evaluating {r['system']}")
            r["eval"] = evaluate(Path(r["vectors"]), args.eval_dir)
            r["words_per_second"] = r["corpus_tokens"] * args.iter / r["train_seconds"]

        settings = (
            f"size {args.size}, window {args.window}, negative {args.negative}, min-count {args.min_count}, "
            f"sample {args.sample:g}, alpha {args.alpha:g}, iter {args.iter}, threads {args.threads}, "
            f"Colonnade --embedded-shards {args.embedded_shards}"
            + (f" {shlex.join(extra)}" if extra else "")
        )
        out = [
            f"## Quality benchmark: {args.corpus.name} ({tokens:,} tokens)",
            "",
            f"Settings: {settings}. Host: {platform.node()}, {os.cpu_count()} CPUs.",
            "Analogies: questions-words.txt, top-30k vocabulary, case-insensitive, 3CosAdd; "
            "WS-353: Spearman ρ. corpus words/s = corpus tokens × epochs ÷ train s.",
            "",
            table(rows, args.iter),
        ]
        if gensim_row is not None:
            out += ["", diff_table(gensim_row, [r for r in rows if r is not gensim_row])]
            vs = {r["vocab_size"] for r in rows}
            if len(vs) > 1:
                out += ["", f"**Warning:** vocabulary sizes differ: {sorted(vs)}"]
            ct = {r["corpus_tokens"] for r in rows}
            if len(ct) > 1:
                out += ["", f"**Warning:** corpus token counts differ: {sorted(ct)}"]
        report = "\n".join(out)
        print(report)

        result = {
            "time": stamp,
            "corpus": str(args.corpus),
            "corpus_tokens": tokens,
            "settings": {
                k: getattr(args, k)
                for k in ("size", "window", "negative", "min_count", "sample", "alpha", "iter", "threads", "embedded_shards")
            },
            "colonnade_extra_args": extra,
            "host": {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()},
            "rows": rows,
            "markdown": report,
        }
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2, default=str))
        log(f"results written to {json_out}")
        if keep:
            log(f"vectors and logs kept in {work}")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
