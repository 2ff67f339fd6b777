#!/usr/bin/env python3
"""Scale benchmark (issue 16): large vocabularies end to end.

For each V in --words (default 1M,5M,20M), on a `colonnade synth` corpus of
--tokens-per-word × V tokens (Zipf head, rare tail, planted groups):

  vocab (spilling, --memory-budget) → encode (4 parts) →
  train --encoded, 4 embedded shards (--embedded-shards; create, one
  epoch, HDF5 export) →
  train --encoded over 4 `ps-shard` processes → colonnade export →
  eval --groups (planted recall)

recording each stage's wall time and peak RSS, and each shard process's peak
RSS against the sizing formula 2·V·row(cols) + 16·V (a bound) and against
the same without the alias table's 8·V, which from a million words on is a
table over runs of equal counts of a few KB. In the same run:
embedded training on part 01 (its own 68K-word vocabulary, the same flags)
for the words/s ratio, and gensim on the corpus of every V in --gensim-words
(its RSS, words/s; a failure is recorded, not fatal).

`--repeats N` trains part 01 and every size's embedded model N times,
interleaved, and takes the ratios from the medians (and gives the ratio of
each part 01 run and the size run after it).

`--types-only N` instead builds the vocabulary of a corpus with N distinct
types under --memory-budget and records its time and peak RSS.

    bench/scale.sh --words 1M,5M --gensim-words 5M
    bench/scale.sh --types-only 100M --memory-budget 4G
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
from _common import status_kib  # noqa: E402


def parse_count(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def step(name: str, cmd: list, work: Path, results: dict) -> dict:
    c.log(f"{name}: {shlex.join(map(str, cmd))}")
    r = c.run_child([str(x) for x in cmd], work / f"{name}.log")
    if r["returncode"] != 0:
        raise SystemExit(f"{name} failed (exit {r['returncode']}):\n{c.tail(work / f'{name}.log')}")
    r["command"] = [str(x) for x in cmd]
    results[name] = r
    c.log(f"{name}: {r['wall_seconds']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB")
    return r


def formula(words: int, cols: int, table_over_runs: bool = False) -> int:
    """README's sizing bound (docs/deploy.md "Sizing": a row's cells and its 4-byte lock slot, or
    1-byte lock apart for a multiple of 16 columns); with `table_over_runs` (a count-ordered
    vocabulary of a million words or more, as `synth` + `vocab` make) without the alias table's
    8·V, which is then a few KB."""
    row = cols * 4 + (1 if cols > 0 and cols % 16 == 0 else 4)
    return 2 * words * row + (8 if table_over_runs else 16) * words


def summary_of(path: Path) -> dict:
    s = json.loads(path.read_text())
    return {k: s[k] for k in ("words", "tokens", "seconds", "final_loss") if k in s} | {
        "words_per_second": s["words"] / s["seconds"] if s.get("seconds") else None
    }


def log_value(path: Path, marker: str, key: str) -> str | None:
    for line in path.read_text(errors="replace").splitlines():
        if marker in line:
            for tok in line.split():
                if tok.startswith(key + "="):
                    return tok.split("=", 1)[1].strip('"')
    return None


def train_flags(args, min_count: int) -> list:
    """The training flags every run of this bench shares (one epoch, d = --size)."""
    return ["--size", args.size, "--window", 5, "--negative", 5, "--min-count", min_count, "--sample", "1e-4",
            "--iter", 1, "--threads", args.threads, "--seed", 1]


def one_size(args, words: int, root: Path) -> dict:
    work = root / f"v{words}"
    work.mkdir(parents=True, exist_ok=True)
    b = args.bin_dir / "colonnade"
    corpus, groups, vocab, enc = work / "synth.txt", work / "groups.txt", work / "vocab.tsv", work / "enc"
    r: dict = {"words": words, "tokens": words * args.tokens_per_word}
    step("synth", [b, "synth", "--words", words, "--tokens", words * args.tokens_per_word, "--output", corpus,
                   "--groups", groups, "--seed", 1], work, r)
    step("vocab", [b, "vocab", "--corpus", corpus, "--min-count", 1, "--memory-budget", args.memory_budget,
                   "--spill-dir", work, "--output", vocab], work, r)
    step("encode", [b, "encode", "--corpus", corpus, "--vocab", vocab, "--parts", 4, "--output", enc], work, r)
    flags = train_flags(args, min_count=1)
    h5 = work / "embedded.h5"
    if not args.skip_embedded:
        train_embedded(args, work, r, "train_embedded")
    if not args.skip_cluster:
        r["cluster"] = cluster(args, words, work, enc, vocab, flags)
        if args.skip_embedded:
            h5 = work / "cluster.h5"  # eval what the cluster trained
    if not args.skip_eval:
        ev = step("eval_groups", [b, "eval", "--vectors", h5, "--groups", groups, "--group-queries", 100,
                                  "--json"], work, r)
        out = json.loads(_json_tail(work / "eval_groups.log"))
        ev["recall"] = {s["sample"]: s["recall"] for s in out["groups"]["samples"]}
        ev["vectors"] = str(h5)
        ev["mapped"] = "vectors mapped" in (work / "eval_groups.log").read_text(errors="replace")
        c.log(f"recall: {ev['recall']}")
    return r


def train_embedded(args, work: Path, r: dict, name: str) -> None:
    """One embedded training of the encoded corpus in `work` (create, one epoch, HDF5), as `r[name]`."""
    b = args.bin_dir / "colonnade"
    step(name, [b, "train", "--encoded", work / "enc", "--vocab", work / "vocab.tsv",
                "--embedded-shards", args.embedded_shards, *train_flags(args, min_count=1),
                "--summary", work / "embedded.json", "--output", work / "embedded.h5"], work, r)
    r[name]["summary"] = summary_of(work / "embedded.json")
    r[name]["hdf5_write_seconds"] = log_value(work / f"{name}.log", "written", "seconds")
    r.setdefault("train_embedded_runs", []).append(r[name]["summary"]["words_per_second"])
    c.log(f"embedded: {r[name]['summary']['words_per_second']:,.0f} words/s")


def clean_size(work: Path) -> None:
    for p in (work / "synth.txt", work / "embedded.h5", work / "cluster.h5"):
        p.unlink(missing_ok=True)
    subprocess.run(["rm", "-rf", str(work / "enc")], check=False)


def _json_tail(path: Path) -> str:
    text = path.read_text(errors="replace")
    return text[text.index("{"):]


def cluster(args, words: int, work: Path, enc: Path, vocab: Path, flags: list) -> dict:
    b = args.bin_dir / "colonnade"
    shards = c.start_shards(args.bin_dir, 4, work, "cluster")
    try:
        base = [status_kib(p.pid, "VmRSS") * 1024 for p, _ in shards]
        cpu0 = [c.proc_cpu_seconds(p.pid) for p, _ in shards]
        endpoints = ",".join(e for _, e in shards)
        res: dict = {}
        step("train_cluster", [b, "train", "--encoded", enc, "--vocab", vocab, "--shards", endpoints, *flags,
                               "--summary", work / "cluster.json"], work, res)
        res["train_cluster"]["summary"] = summary_of(work / "cluster.json")
        per = []
        for i, (p, e) in enumerate(shards):
            cols = args.size * (i + 1) // 4 - args.size * i // 4  # common::model::column_range
            need = formula(words, cols)
            exact = formula(words, cols, table_over_runs=words >= 1 << 20)
            peak = status_kib(p.pid, "VmHWM") * 1024 - base[i]
            held = status_kib(p.pid, "VmRSS") * 1024 - base[i]
            per.append({"endpoint": e, "formula_bytes": need, "peak_bytes": peak, "held_bytes": held,
                        "peak_over_formula": peak / need, "formula_with_table_bytes": exact,
                        "peak_over_formula_with_table": peak / exact,
                        "train_cpu_seconds": c.proc_cpu_seconds(p.pid) - cpu0[i]})
        res["shards"] = per
        c.log("shards: peak/formula " + ", ".join(f"{s['peak_over_formula']:.3f}" for s in per)
              + "; with the table they hold " + ", ".join(f"{s['peak_over_formula_with_table']:.3f}" for s in per)
              + "; CPU s over create + training " + ", ".join(f"{s['train_cpu_seconds']:.0f}" for s in per))
        step("export", [b, "export", "--shards", endpoints, "--vocab", vocab, "--output", work / "cluster.h5"],
             work, res)
        return res
    finally:
        c.stop_shards(shards)


def part01(args, root: Path) -> dict:
    work = root / "part01"
    work.mkdir(parents=True, exist_ok=True)
    plain = work / "part01.txt"
    if not plain.exists():
        c.decompress(c.DEFAULT_CORPUS, plain)
    b = args.bin_dir / "colonnade"
    r: dict = {}
    train_part01(args, work, r, "train_part01")
    if not args.skip_cluster:
        # Part 01 over the same 4 ps-shard processes: the cluster's own
        # words/s at a small vocabulary, for its cost of size.
        vocab, enc = work / "vocab.tsv", work / "enc"
        step("vocab", [b, "vocab", "--corpus", plain, "--min-count", 5, "--output", vocab], work, r)
        step("encode", [b, "encode", "--corpus", plain, "--vocab", vocab, "--parts", 4, "--output", enc], work, r)
        words = sum(1 for line in vocab.read_text().splitlines() if line and not line.startswith("#"))
        flags = train_flags(args, min_count=5)
        r["cluster"] = cluster(args, words, work, enc, vocab, flags)
        c.log(f"part 01 over the cluster: {r['cluster']['train_cluster']['summary']['words_per_second']:,.0f} words/s")
    return r


def train_part01(args, work: Path, r: dict, name: str) -> None:
    """One embedded training on part 01 (its own vocabulary, min-count 5), as `r[name]`."""
    b = args.bin_dir / "colonnade"
    step(name, [b, "train", "--corpus", work / "part01.txt", "--embedded-shards", args.embedded_shards,
                *train_flags(args, min_count=5), "--summary", work / "s.json", "--output", work / "p.h5"], work, r)
    r[name]["summary"] = summary_of(work / "s.json")
    r.setdefault("train_part01_runs", []).append(r[name]["summary"]["words_per_second"])
    c.log(f"part 01: {r[name]['summary']['words_per_second']:,.0f} words/s")


def repeat_embedded(args, report: dict, root: Path) -> None:
    """Runs 2..--repeats of the embedded trainings, part 01 and every size interleaved
    (part 01, sizes, part 01, sizes, ...), so that a drift of the machine's speed
    reaches both sides of the ratio alike. Each run's words/s joins its entry's
    `train_*_runs`."""
    for i in range(2, args.repeats + 1):
        if "part01" in report and not args.skip_embedded:
            train_part01(args, root / "part01", report["part01"], f"train_part01_{i}")
        for s in report["sizes"]:
            if "train_embedded" in s:
                train_embedded(args, root / f"v{s['words']}", s, f"train_embedded_{i}")


def gensim(args, words: int, root: Path) -> dict:
    work = root / f"v{words}"
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "synth.txt"
    b = args.bin_dir / "colonnade"
    if not corpus.exists():
        step("synth_gensim", [b, "synth", "--words", words, "--tokens", words * args.tokens_per_word,
                              "--output", corpus, "--seed", 1], work, {})
    ns = argparse.Namespace(size=args.size, window=5, negative=5, min_count=1, sample=1e-4, alpha=0.025, iter=1,
                            threads=args.threads)
    try:
        res = c.run_gensim(ns, corpus, work)
        res["words_per_second"] = res["raw_words"] / res["train_seconds"]
        c.log(f"gensim at {words:,}: {res['words_per_second']:,.0f} words/s, peak RSS {res['peak_rss_mb']:.0f} MB")
    except SystemExit as e:
        res = {"failed": str(e)[-2000:]}
        c.log(f"gensim at {words:,} failed")
    finally:
        if not args.keep:
            corpus.unlink(missing_ok=True)
            (work / "gensim.bin").unlink(missing_ok=True)
    return res


def types_only(args, root: Path) -> dict:
    work = root / "types"
    work.mkdir(parents=True, exist_ok=True)
    b = args.bin_dir / "colonnade"
    corpus, vocab = work / "types.txt", work / "types.vocab"
    n = args.types_only
    r: dict = {"types": n, "tokens": n + n // 10}
    step("synth", [b, "synth", "--words", n, "--tokens", n + n // 10, "--output", corpus], work, r)
    r["corpus_bytes"] = corpus.stat().st_size
    step("vocab", [b, "vocab", "--corpus", corpus, "--min-count", 1, "--memory-budget", args.memory_budget,
                   "--spill-dir", work, "--output", vocab], work, r)
    r["vocab"]["spills"] = log_value(work / "vocab.log", "vocabulary written", "spills")
    r["vocab"]["words"] = log_value(work / "vocab.log", "vocabulary written", "words")
    if not args.keep:
        corpus.unlink(missing_ok=True)
        vocab.unlink(missing_ok=True)
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--words", default="1M,5M,20M")
    p.add_argument("--tokens-per-word", type=int, default=5)
    p.add_argument("--gensim-words", default="5M")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory-budget", default="4G")
    p.add_argument("--types-only", type=parse_count)
    p.add_argument("--embedded-shards", type=int, default=4,
                   help="shards of the embedded runs, part 01's included (the cluster has 4 processes)")
    p.add_argument("--skip-cluster", action="store_true")
    p.add_argument("--skip-embedded", action="store_true",
                   help="train over ps-shard processes only (eval then reads their export)")
    p.add_argument("--skip-eval", action="store_true")
    p.add_argument("--skip-part01", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the corpora and models")
    p.add_argument("--repeats", type=int, default=1,
                   help="embedded trainings of part 01 and of every size, interleaved; the ratios use their medians")
    p.add_argument("--work", type=Path, default=Path("/tmp/colonnade-scale"))
    p.add_argument("--bin-dir", type=Path, default=c.REPO / "target" / "release")
    p.add_argument("--out", type=Path, default=c.REPO / "bench" / "results")
    args = p.parse_args()
    c.set_log_name("scale")
    args.work.mkdir(parents=True, exist_ok=True)
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": c.machine_info(),
                    "version": c.colonnade_version(args.bin_dir), "command": sys.argv, "args": vars(args) | {
                        "work": str(args.work), "bin_dir": str(args.bin_dir), "out": str(args.out)}}
    if args.types_only:
        report["types"] = types_only(args, args.work)
    else:
        if not args.skip_part01:
            report["part01"] = part01(args, args.work)
        report["sizes"] = [one_size(args, parse_count(w), args.work) for w in args.words.split(",") if w]
        repeat_embedded(args, report, args.work)
        if not args.keep:
            for s in report["sizes"]:
                clean_size(args.work / f"v{s['words']}")
        report["gensim"] = {w: gensim(args, parse_count(w), args.work)
                            for w in args.gensim_words.split(",") if w}
        base_runs = report.get("part01", {}).get("train_part01_runs", [])
        base = statistics.median(base_runs) if base_runs else None
        for s in report["sizes"]:
            if "train_embedded" in s:
                # With --repeats N: the median of N runs on each side, and the
                # median of the ratios of the runs made one after the other.
                wps = statistics.median(s["train_embedded_runs"])
                s["embedded_words_per_second_median"] = wps
                s["embedded_over_part01"] = wps / base if base else None
                if base_runs:
                    pairs = [a / p for a, p in zip(s["train_embedded_runs"], base_runs)]
                    s["embedded_over_part01_pairs"] = pairs
                    s["embedded_over_part01_pairs_median"] = statistics.median(pairs)
                    c.log(f"{s['words']:,} ÷ part 01: medians {wps:,.0f} / {base:,.0f} = {wps / base:.3f}; "
                          f"pairs {', '.join(f'{x:.3f}' for x in pairs)}")
            if "cluster" in s:
                wps = s["cluster"]["train_cluster"]["summary"]["words_per_second"]
                s["cluster_over_part01"] = wps / base if base else None
                cbase = (report.get("part01", {}).get("cluster", {}).get("train_cluster", {})
                         .get("summary", {}).get("words_per_second"))
                s["cluster_over_cluster_part01"] = wps / cbase if cbase else None
        for w, g in report["gensim"].items():
            match = [s for s in report["sizes"] if s["words"] == parse_count(w)]
            if match and "words_per_second" in g and "train_embedded" in match[0]:
                g["colonnade_embedded_over_gensim"] = (
                    match[0]["embedded_words_per_second_median"] / g["words_per_second"])
                if "cluster" in match[0]:
                    g["colonnade_cluster_over_gensim"] = (
                        match[0]["cluster"]["train_cluster"]["summary"]["words_per_second"] / g["words_per_second"])
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    c.log(f"report: {out}")
    print(json.dumps({k: v for k, v in report.items() if k not in ("machine",)}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
