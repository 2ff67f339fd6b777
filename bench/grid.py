#!/usr/bin/env python3
"""Issue 44's quality grid: Colonnade against gensim in every setting a user picks.

For every cell of objective (sg, cbow) x alpha x threads x epochs x sample,
and every seed, in one run on the same decompressed corpus and vocabulary:

- gensim 4.4 (`sentences=` mode, `workers` = the cell's threads; CBOW as
  `sg=0, cbow_mean=1`),
- Colonnade with one embedded shard (`colonnade train --embedded-shards 1
  --threads T`),
- Colonnade over processes: 2 `ps-shard` processes and one worker
  (`colonnade train --shards a,b --threads T`, its defaults otherwise),

each scored by the same code: Google analogies (`_common.evaluate`: top
30,000 words, case-insensitive) and Spearman rho on WS-353, SimLex-999 and
MEN (gensim's `evaluate_word_pairs`). Per cell it reports the medians over
the seeds and each Colonnade mode's difference from gensim, and marks a
cell that misses issue 44's bar: more than 0.5 analogy points or 0.01 rho
below gensim (a median over the seeds).

The grid is long (the issue's full grid is 48 cells x 3 seeds x 3 trainers),
so every finished run is saved at once to the JSON file (--json), and a run
already there (same cell, seed, trainer, corpus and binary commit) is not
run again: the grid fills up over several invocations, and the report is
always made from everything the file holds for this build and corpus.

Usage (from the repository, after `cargo build --release` and scripts/setup.sh):
    .venv/bin/python bench/grid.py --objectives sg,cbow --alphas 0.025,0.05 --threads 2 --epochs 1 \\
        --samples 1e-4 --seeds 1,2,3
    .venv/bin/python bench/grid.py --json bench/results/grid-part01.json      # the whole grid, resumable
    .venv/bin/python bench/grid.py --max-tokens 2000000 --seeds 1 --objectives sg --alphas 0.025 \\
        --threads 2 --epochs 1 --samples 1e-4 --json /tmp/grid-smoke.json    # a quick check of the script
    .venv/bin/python bench/grid.py --status --json bench/results/grid-part01.json   # the grid as it stands
    .venv/bin/python bench/grid.py --report-only --paired --label 9227670 --reference-label default \\
        --json bench/results/grid-issue44-simlex-20261202.json   # one build's runs, paired by seed
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DATA,
    REPO,
    colonnade_version,
    decompress,
    evaluate_kv,
    log,
    machine_info,
    make_vocab,
    pair_rhos,
    run_child,
    run_gensim,
    set_log_name,
    start_shards,
    stop_shards,
    tail,
)

DEFAULT_CORPUS = DATA / "corpus" / "enwiki_text8style_part01.txt.xz"
TRAINERS = ("gensim", "embedded", "processes")
# Issue 44's bar: a Colonnade median at most this far below gensim's.
ANALOGY_POINTS = 0.5
RHO = 0.01
# The scores of a run: (key in its `scores`, scale to the reported unit, bar, format).
METRICS = (("analogy_accuracy", 100, ANALOGY_POINTS, ".2f"), ("ws353_spearman", 1, RHO, ".3f"),
           ("simlex_spearman", 1, RHO, ".3f"), ("men_spearman", 1, RHO, ".3f"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("COLONNADE_BIN_DIR", REPO / "target" / "release")))
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--max-tokens", type=int, default=0,
                   help="train on the corpus's first lines up to this many tokens (0: all of it)")
    p.add_argument("--eval-dir", type=Path, default=DATA / "eval")
    p.add_argument("--objectives", default="sg,cbow")
    p.add_argument("--alphas", default="0.025,0.05")
    p.add_argument("--threads", default="2,8,16")
    p.add_argument("--epochs", default="1,5")
    p.add_argument("--samples", default="1e-3,1e-4")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--trainers", default=",".join(TRAINERS), help=f"a subset of {','.join(TRAINERS)}")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--json", type=Path, default=None,
                   help="results file, read first and written after every run "
                        "(default: bench/results/grid-<time>.json)")
    p.add_argument("--workdir", type=Path, default=None, help="keep corpus, vectors and logs here")
    p.add_argument("--colonnade-args", default="",
                   help="extra flags for both Colonnade trainers, one string (give the variant its own --label)")
    p.add_argument("--report-only", action="store_true", help="train nothing: the report of what --json holds")
    p.add_argument("--status", action="store_true",
                   help="train nothing: every cell --json holds, each trainer's runs from the newest build "
                        "(commit) that ran it, with the builds named")
    p.add_argument("--paired", action="store_true",
                   help="also report, per cell and Colonnade trainer, the mean and standard error over seeds of "
                        "its score minus gensim's of the same seed (seeds both ran)")
    p.add_argument("--reference-label", default=None,
                   help="report gensim's and the embedded mode's runs of this earlier label where this one "
                        "has none (e.g. a variant run with --trainers processes)")
    p.add_argument("--label", default=None,
                   help="names the build in the results (default: the commit, `-dirty` with changes outside "
                        "bench/results and docs); a run is kept per label, so a new build fills the grid anew")
    a = p.parse_args(argv)
    bad = set(split(a.trainers)) - set(TRAINERS)
    if bad:
        p.error(f"--trainers: unknown {', '.join(sorted(bad))} (known: {', '.join(TRAINERS)})")
    if bad := set(split(a.objectives)) - {"sg", "cbow"}:
        p.error(f"--objectives: unknown {', '.join(sorted(bad))} (known: sg, cbow)")
    return a


def split(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def cells(a: argparse.Namespace) -> list[dict]:
    return [
        {"objective": o, "alpha": float(al), "threads": int(t), "epochs": int(e), "sample": float(s)}
        for o, al, t, e, s in itertools.product(
            split(a.objectives), split(a.alphas), split(a.threads), split(a.epochs), split(a.samples))
    ]


def cell_name(c: dict) -> str:
    return f"{c['objective']} α{c['alpha']:g} t{c['threads']} e{c['epochs']} s{c['sample']:g}"


def hyper(a: argparse.Namespace, c: dict) -> argparse.Namespace:
    """The namespace `_common.run_gensim` reads: the cell's settings."""
    return argparse.Namespace(size=a.size, window=a.window, negative=a.negative, min_count=a.min_count,
                              sample=c["sample"], alpha=c["alpha"], iter=c["epochs"], threads=c["threads"],
                              cbow=c["objective"] == "cbow")


def colonnade_flags(a: argparse.Namespace, c: dict, plain: Path, vocab: Path, seed: int) -> list[str]:
    return ["--corpus", str(plain), "--vocab", str(vocab), "--size", str(a.size), "--window", str(a.window),
            "--negative", str(a.negative), "--min-count", str(a.min_count), "--sample", repr(c["sample"]),
            "--alpha", repr(c["alpha"]), "--iter", str(c["epochs"]), "--threads", str(c["threads"]),
            "--seed", str(seed), *(["--cbow"] if c["objective"] == "cbow" else []), *shlex.split(a.colonnade_args)]


def run_colonnade(a, c: dict, trainer: str, plain: Path, vocab: Path, work: Path, seed: int, tag: str) -> dict:
    out = work / f"{tag}.bin"
    summary = work / f"{tag}.summary.json"
    colonnade = str(a.bin_dir / "colonnade")
    flags = [*colonnade_flags(a, c, plain, vocab, seed), "--output-binary", str(out), "--summary", str(summary)]
    shards = []
    if trainer == "embedded":
        cmd = [colonnade, "train", "--embedded-shards", "1", *flags]
    else:
        shards = start_shards(a.bin_dir, 2, work, tag)
        cmd = [colonnade, "train", "--shards", ",".join(e for _, e in shards), *flags]
    log(f"{tag}: {shlex.join(cmd)}")
    try:
        proc = run_child(cmd, work / f"{tag}.log")
    finally:
        if shards:
            stop_shards(shards)
    if proc["returncode"] != 0:
        # A run that fails (e.g. diverges) is a result of its cell, not the end of the grid.
        return {"failed": tail(work / f"{tag}.log", 6), "command": shlex.join(cmd)}
    s = json.loads(summary.read_text())
    return {"vectors": str(out), "train_seconds": s.get("seconds"), "words_per_second": s.get("tokens_per_second"),
            "command": shlex.join(cmd)}


def score(vectors: Path, eval_dir: Path) -> dict:
    """_common.evaluate (analogies, WS-353) and SimLex-999 and MEN rho."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(vectors), binary=True)
    e = evaluate_kv(kv, eval_dir) | pair_rhos(kv, eval_dir)
    return {k: e[k] for k in ("analogy_accuracy", "ws353_spearman", "simlex_spearman", "men_spearman")}


def key_of(corpus: str, commit: str, c: dict, trainer: str, seed: int) -> str:
    return f"{corpus}|{commit}|{cell_name(c)}|{trainer}|{seed}"


def load(path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"runs": {}}


def save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def report(data: dict, corpus: str, commit: str, reference: str | None = None) -> tuple[str, dict]:
    """Per cell (the runs of `corpus` by build `commit`, and of `reference`
    for the trainers `commit` has no run of): medians over seeds and each
    Colonnade mode against gensim."""
    by_cell: dict[str, dict[str, list[dict]]] = {}
    for run in data["runs"].values():
        if run["corpus"] != corpus or run["commit"] != commit:
            continue
        by_cell.setdefault(run["cell"], {}).setdefault(run["trainer"], []).append(run)
    earlier: dict[str, dict[str, list[dict]]] = {}
    for run in data["runs"].values():
        if reference is not None and run["corpus"] == corpus and run["commit"] == reference:
            earlier.setdefault(run["cell"], {}).setdefault(run["trainer"], []).append(run)
    for cell, runs in by_cell.items():
        for trainer, rs in earlier.get(cell, {}).items():
            runs.setdefault(trainer, rs)
    return table(by_cell), by_cell


def status(data: dict, corpus: str, paired: bool = False) -> str:
    """The grid as it stands: per cell and trainer, the runs of the newest
    build that ran it (builds named by a commit, not the labels of
    experiments), and which builds those are."""
    newest: dict[tuple[str, str], tuple[str, str]] = {}
    for run in data["runs"].values():
        if run["corpus"] != corpus or not re.fullmatch(r"[0-9a-f]{7,40}", run["commit"]):
            continue
        key = (run["cell"], run["trainer"])
        if key not in newest or run["date"] > newest[key][0]:
            newest[key] = (run["date"], run["commit"])
    by_cell: dict[str, dict[str, list[dict]]] = {}
    for run in data["runs"].values():
        key = (run["cell"], run["trainer"])
        if run["corpus"] == corpus and key in newest and run["commit"] == newest[key][1]:
            by_cell.setdefault(run["cell"], {}).setdefault(run["trainer"], []).append(run)
    builds = {cell: "/".join(newest.get((cell, t), ("", "–"))[1] for t in TRAINERS) for cell in by_cell}
    return table(by_cell, builds) + ("\n\n" + paired_table(by_cell) if paired else "")


def cell_order(cell: str) -> tuple:
    """Epochs, objective, sample, threads, alpha: the issue's grid order."""
    objective, alpha, threads, epochs, sample = cell.split()
    return (int(epochs[1:]), objective, -float(sample[1:]), int(threads[1:]), float(alpha[1:]))


def table(by_cell: dict[str, dict[str, list[dict]]], builds: dict[str, str] | None = None) -> str:
    """The markdown table of `by_cell`'s runs (cell -> trainer -> runs), with
    a column of the builds that ran each cell when `builds` is given."""
    out = ["| cell | seeds | gensim analogy % | embedded − gensim | processes − gensim | "
           "ρ WS / SimLex / MEN, embedded − gensim | ρ, processes − gensim | bar |"
           + (" builds (gensim/embedded/processes) |" if builds else ""),
           "|---|---:|---:|---:|---:|---|---|---|" + ("---|" if builds else "")]
    for cell in sorted(by_cell, key=cell_order):
        runs = by_cell[cell]
        med = {}
        for trainer, rs in runs.items():
            ok = [r for r in rs if "scores" in r]
            med[trainer] = {m: median([scale * r["scores"][m] for r in ok]) for m, scale, _, _ in METRICS}
            med[trainer]["n"] = len(ok)
            med[trainer]["failed"] = len(rs) - len(ok)
        g = med.get("gensim")
        if not g or g["n"] == 0:
            continue
        misses = []

        def diff(trainer: str, m: str, bar: float, fmt: str) -> str:
            t = med.get(trainer)
            if not t or t["n"] == 0:
                if t and t["failed"]:
                    misses.append(f"{trainer} failed")
                    return "failed"
                return "–"
            d = t[m] - g[m]
            if d < -bar:
                misses.append(f"{trainer} {m.split('_')[0]}")
            return format(d, fmt) + (f" ({t['failed']} failed)" if t["failed"] and m == "analogy_accuracy" else "")

        emb_a = diff("embedded", "analogy_accuracy", ANALOGY_POINTS, "+.2f")
        proc_a = diff("processes", "analogy_accuracy", ANALOGY_POINTS, "+.2f")
        emb_r = " / ".join(diff("embedded", m, RHO, "+.3f") for m, _, _, _ in METRICS[1:])
        proc_r = " / ".join(diff("processes", m, RHO, "+.3f") for m, _, _, _ in METRICS[1:])
        seeds = min(t["n"] for t in med.values())
        bar = "met" if not misses else "missed: " + ", ".join(dict.fromkeys(misses))
        out.append(f"| {cell} | {seeds} | {g['analogy_accuracy']:.2f} | {emb_a} | {proc_a} | {emb_r} | {proc_r} | {bar} |"
                   + (f" {builds[cell]} |" if builds else ""))
    return "\n".join(out)


def paired_table(by_cell: dict[str, dict[str, list[dict]]]) -> str:
    """Per cell and Colonnade trainer, over the seeds that it and gensim both
    ran: the mean ± standard error of its score minus gensim's of the same
    seed. The two share no random stream, so the pairs are independent
    draws of the difference: its mean estimates the gap and the standard
    error tells a small real gap from the seeds' noise, which the
    difference of two medians of three does not."""
    out = ["| cell | trainer | seeds | analogy points | WS-353 | SimLex | MEN |", "|---|---|---:|---|---|---|---|"]
    for cell in sorted(by_cell, key=cell_order):
        runs = by_cell[cell]
        g = {r["seed"]: r["scores"] for r in runs.get("gensim", []) if "scores" in r}
        for trainer in TRAINERS[1:]:
            t = {r["seed"]: r["scores"] for r in runs.get(trainer, []) if "scores" in r}
            seeds = sorted(set(g) & set(t))
            if len(seeds) < 2:
                continue
            cols = []
            for m, scale, _, fmt in METRICS:
                d = [scale * (t[s][m] - g[s][m]) for s in seeds]
                se = statistics.stdev(d) / len(d) ** 0.5
                cols.append(f"{format(statistics.mean(d), '+' + fmt)} ± {format(se, fmt)}")
            out.append(f"| {cell} | {trainer} | {len(seeds)} | " + " | ".join(cols) + " |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    set_log_name("grid")
    a = parse_args(argv)
    started = _dt.datetime.now(_dt.timezone.utc)
    json_path = a.json or REPO / "bench" / "results" / f"grid-{started:%Y%m%d-%H%M%S}.json"
    data = load(json_path)
    commit = a.label or build_label()
    corpus = f"{a.corpus.name}" + (f"[:{a.max_tokens}]" if a.max_tokens else "")
    if a.status:
        print(status(data, corpus, a.paired))
        return 0
    if a.report_only:
        tokens = next((r["tokens"] for r in data["runs"].values() if r["corpus"] == corpus), 0)
    else:
        tokens = train_grid(a, data, json_path, corpus, commit)
    table, by_cell = report(data, corpus, commit, a.reference_label)
    if a.paired:
        table += "\n\nPaired by seed, Colonnade − gensim (mean ± standard error):\n\n" + paired_table(by_cell)
    md = "\n".join([
        f"## Quality grid against gensim, {corpus} ({tokens:,} tokens)", "",
        f"- Command: `{shlex.join(['python', 'bench/grid.py', *argv])}`",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC; {colonnade_version(a.bin_dir)}, build {commit}; load average {os.getloadavg()[0]:.2f} at the end",
        f"- d {a.size}, window {a.window}, negative {a.negative}, min-count {a.min_count}; medians over seeds; "
        f"bar: ≥ −{ANALOGY_POINTS} analogy points and ≥ −{RHO} ρ against gensim"
        + (f"; gensim and trainers this build did not run: build {a.reference_label}" if a.reference_label else ""),
        "", table])
    print(md)
    data["markdown"] = md
    save(json_path, data)
    log(f"JSON: {json_path}")
    return 0


def train_grid(a: argparse.Namespace, data: dict, json_path: Path, corpus: str, commit: str) -> int:
    """Trains and scores every run of the grid not yet in `data`, saving
    each to `json_path` as it ends; returns the corpus's tokens."""
    work = a.workdir or Path(tempfile.mkdtemp(prefix="colonnade-grid-"))
    work.mkdir(parents=True, exist_ok=True)
    plain = work / "corpus.txt"
    tokens = decompress(a.corpus, plain)
    if a.max_tokens and tokens > a.max_tokens:
        tokens = truncate(plain, a.max_tokens)
    log(f"corpus: {tokens:,} tokens ({corpus})")
    vocab = Path(make_vocab(a, plain, work)["path"])
    trainers = [t for t in TRAINERS if t in split(a.trainers)]
    for c in cells(a):
        for seed in [int(s) for s in split(a.seeds)]:
            for trainer in trainers:
                key = key_of(corpus, commit, c, trainer, seed)
                if key in data["runs"]:
                    continue
                tag = f"{trainer}-{c['objective']}-a{c['alpha']:g}-t{c['threads']}-e{c['epochs']}-s{c['sample']:g}-seed{seed}"
                log(f"{cell_name(c)}, seed {seed}: {trainer}")
                if trainer == "gensim":
                    g = run_gensim(hyper(a, c), plain, work, seed=seed, tag=tag)
                    run = {"vectors": g["vectors"], "train_seconds": g["train_seconds"],
                           "gensim_version": g.get("gensim_version")}
                else:
                    run = run_colonnade(a, c, trainer, plain, vocab, work, seed, tag)
                if "vectors" in run:
                    run["scores"] = score(Path(run["vectors"]), a.eval_dir)
                    log(f"  analogy {100 * run['scores']['analogy_accuracy']:.2f} %, "
                        f"WS-353 {run['scores']['ws353_spearman']:.3f}")
                else:
                    log(f"  failed: {run['failed'][-300:]}")
                run.update(corpus=corpus, tokens=tokens, commit=commit, cell=cell_name(c), trainer=trainer,
                           seed=seed, date=_dt.datetime.now(_dt.timezone.utc).isoformat(), machine=machine_info())
                data["runs"][key] = run
                save(json_path, data)
    return tokens


def build_label() -> str:
    """The commit, with `-dirty` when anything the binaries are built from has
    changes: bench/results/ (this grid's own JSON, once a run is saved) and
    docs/ do not count, so a grid started after a first save keeps the label."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always"],
                                capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no",
                                  "--", ".", ":(exclude)bench/results", ":(exclude)docs"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        return f"{commit}-dirty" if changed else commit
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def truncate(plain: Path, max_tokens: int) -> int:
    """Keeps the first lines of `plain` (sentences) up to `max_tokens` tokens;
    returns the count kept."""
    kept = 0
    short = plain.with_suffix(".short")
    with open(plain, "rb") as fin, open(short, "wb") as fout:
        for line in fin:
            n = len(line.split())
            if kept + n > max_tokens:
                break
            fout.write(line)
            kept += n
    short.replace(plain)
    return kept


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
