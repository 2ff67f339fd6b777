#!/usr/bin/env python3
"""Quality over seeds: gensim and Colonnade, N seeds each, in one run.

One training run's analogy score moves by about a point with the seed (and,
for gensim, with its threads' timing), which is the size of the gaps the
issues ask about. This script trains both systems once per seed on the same
decompressed corpus and the same settings (those of bench/throughput.py:
--size 100 --window 5 --negative 5 --min-count 5 --sample 1e-4 --iter 5,
2 threads; `--cbow` for CBOW, gensim sg=0 with cbow_mean=1), Colonnade with
one embedded shard, and scores every model with the same code
(`_common.evaluate`: Google analogies, restrict_vocab=30000, case-insensitive;
WS-353 Spearman ρ). It prints a markdown table (per seed, then mean, median
and spread per system) and writes a JSON result file.

Usage (from the repository, after `cargo build --release` and scripts/setup.sh):
    .venv/bin/python bench/seeds.py --cbow --seeds 1,2,3
    .venv/bin/python bench/seeds.py --seeds 1,2,3 --colonnade-args "--minibatch 64"
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DATA,
    REPO,
    add_training_args,
    colonnade_version,
    decompress,
    evaluate,
    log,
    machine_info,
    make_vocab,
    parse_variant,
    run_child,
    run_gensim,
    set_log_name,
    tail,
    training_flags,
)

DEFAULT_CORPUS = DATA / "corpus" / "enwiki_text8style_part01.txt.xz"


def run_colonnade(a, plain: Path, vocab: Path, work: Path, seed: int, bin_dir: Path | None = None,
                  system: str = "Colonnade", extra: list[str] | None = None) -> dict:
    bin_dir = bin_dir or a.bin_dir
    tag = "-".join(re.findall(r"[a-z0-9]+", system.lower())) + f"-s{seed}"
    out = work / f"{tag}.bin"
    summary = work / f"{tag}.summary.json"
    cmd = [str(bin_dir / "colonnade"), "train", "--corpus", str(plain), "--vocab", str(vocab),
           "--embedded-shards", "1", "--threads", str(a.threads), *training_flags(a, a.iter),
           "--seed", str(seed), *(shlex.split(a.colonnade_args) if extra is None else extra),
           "--output-binary", str(out), "--summary", str(summary)]
    log(f"{tag}: {shlex.join(cmd)}")
    proc = run_child(cmd, work / f"{tag}.log")
    if proc["returncode"] != 0:
        raise SystemExit(f"{tag} failed:\n{tail(work / f'{tag}.log')}")
    s = json.loads(summary.read_text())
    return {"system": system, "seed": seed, "train_seconds": s.get("seconds"), "vectors": str(out),
            "command": shlex.join(cmd), **{k: proc[k] for k in ("wall_seconds", "cpu_seconds", "peak_rss_mb") if k in proc}}


def main() -> int:
    set_log_name("seeds")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--eval-dir", type=Path, default=DATA / "eval")
    p.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("COLONNADE_BIN_DIR", REPO / "target" / "release")))
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, one run of each system per seed")
    add_training_args(p)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cbow", action="store_true", help="CBOW in both systems (gensim sg=0, cbow_mean=1)")
    p.add_argument("--colonnade-args", default="", help="extra flags for `colonnade train`, one string")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS", type=parse_variant,
                   help="also train each seed with the same binary and these `colonnade train` flags "
                        "instead of --colonnade-args, reported as 'Colonnade (NAME)'; repeatable")
    p.add_argument("--skip-gensim", action="store_true", help="train Colonnade only (no gensim rows)")
    p.add_argument("--baseline-bin-dir", type=Path, default=None,
                   help="also train each seed with the `colonnade` in this directory (an older build), "
                        "reported as 'Colonnade (baseline)': old and new binary in one run")
    p.add_argument("--gensim-c-init", action="store_true",
                   help="also train gensim with word2vec C's initial range U[-0.5/d, 0.5/d) "
                        "(gensim 4 draws from U[-1/d, 1/d)), reported as 'gensim (C init)'")
    p.add_argument("--gensim-corpus-file", action="store_true",
                   help="also train gensim in its corpus_file= mode (each worker its own share of the file and "
                        "its own rate schedule), reported as 'gensim (corpus_file)'")
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--workdir", type=Path, default=None, help="keep corpus, vectors and logs here (default: a temp dir, removed)")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    if not seeds:
        p.error("--seeds: at least one seed")
    work = a.workdir or Path(tempfile.mkdtemp(prefix="colonnade-seeds-"))
    work.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc)
    load_before = os.getloadavg()
    try:
        plain = work / "corpus.txt"
        tokens = decompress(a.corpus, plain)
        vocab = Path(make_vocab(a, plain, work)["path"])
        rows = []
        for seed in seeds:
            gensims = [("gensim", "gensim", {})] if not a.skip_gensim else []
            if a.gensim_corpus_file:
                gensims.append(("gensim (corpus_file)", "gensim-cf", {"corpus_file": True}))
            if a.gensim_c_init:
                gensims.append(("gensim (C init)", "gensim-cinit", {"init_scale": 0.5}))
            for system, tag, how in gensims:
                g = run_gensim(a, plain, work, seed=seed, tag=f"{tag}-s{seed}", **how)
                rows.append({"system": system, "seed": seed, "train_seconds": g["train_seconds"],
                             "vectors": g["vectors"], "version": g.get("gensim_version")})
            rows.append(run_colonnade(a, plain, vocab, work, seed))
            for name, flags in a.variant:
                rows.append(run_colonnade(a, plain, vocab, work, seed, system=f"Colonnade ({name})", extra=flags))
            if a.baseline_bin_dir:
                rows.append(run_colonnade(a, plain, vocab, work, seed, a.baseline_bin_dir, "Colonnade (baseline)"))
        for r in rows:
            r["eval"] = evaluate(Path(r["vectors"]), a.eval_dir)
            log(f"{r['system']} seed {r['seed']}: analogy {100 * r['eval']['analogy_accuracy']:.2f} %")
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    objective = "CBOW (gensim sg=0, cbow_mean=1)" if a.cbow else "skip-gram"
    out = [f"## Quality over seeds: {objective}, {a.corpus.name} ({tokens:,} tokens)", "",
           f"- Command: `{shlex.join(['python', 'bench/seeds.py', *sys.argv[1:]])}`",
           f"- Date: {started:%Y-%m-%d %H:%M} UTC; {colonnade_version(a.bin_dir)}"
           + (f" (baseline: {colonnade_version(a.baseline_bin_dir)} in {a.baseline_bin_dir})" if a.baseline_bin_dir else "")
           + f"; load average {load_before[0]:.2f} before, "
           f"{os.getloadavg()[0]:.2f} after",
           f"- Settings: {shlex.join(training_flags(a, a.iter))}, {a.threads} threads; Colonnade: 1 embedded shard "
           f"{a.colonnade_args}".rstrip(), "",
           "| system | seed | train s | analogy % (sem / syn) | WS-353 ρ |", "|---|---:|---:|---|---:|"]
    for r in rows:
        e = r["eval"]
        out.append(f"| {r['system']} | {r['seed']} | {r['train_seconds']:.1f} | {100 * e['analogy_accuracy']:.2f} "
                   f"({100 * e['analogy_semantic']:.2f} / {100 * e['analogy_syntactic']:.2f}) | {e['ws353_spearman']:.3f} |")
    out += ["", "| system | runs | analogy mean | median | min – max | WS-353 mean | train s, median |",
            "|---|---:|---:|---:|---|---:|---:|"]
    stats = {}
    for system in dict.fromkeys(r["system"] for r in rows):
        acc = [100 * r["eval"]["analogy_accuracy"] for r in rows if r["system"] == system]
        ws = [r["eval"]["ws353_spearman"] for r in rows if r["system"] == system]
        stats[system] = {"mean": statistics.mean(acc), "median": statistics.median(acc), "min": min(acc), "max": max(acc),
                         "ws_mean": statistics.mean(ws),
                         "train_median": statistics.median(r["train_seconds"] for r in rows if r["system"] == system)}
        s = stats[system]
        out.append(f"| {system} | {len(acc)} | {s['mean']:.2f} | {s['median']:.2f} | {s['min']:.2f} – {s['max']:.2f} | "
                   f"{s['ws_mean']:.3f} | {s['train_median']:.1f} |")
    if "gensim" in stats:
        for system in stats:
            if system != "gensim":
                diff = stats[system]["median"] - stats["gensim"]["median"]
                out += ["", f"{system} − gensim, median analogy: {diff:+.2f} points."]
    report = "\n".join(out)
    print(report)
    json_out = a.json_out or REPO / "bench" / "results" / f"seeds-{started:%Y%m%d-%H%M%S}.json"
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps({"time": started.isoformat(), "argv": sys.argv, "machine": machine_info(),
                                    "rows": rows, "stats": stats, "markdown": report}, indent=2, default=str))
    log(f"JSON: {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
