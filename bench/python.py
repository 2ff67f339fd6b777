#!/usr/bin/env python3
"""The Python package against gensim and against the CLI (issue 47), in one
script: `colonnade.Word2Vec` and `gensim.models.Word2Vec` with the same
settings on the same corpus (corpus_file, and sentences from a Python
iterable), and `colonnade train` with the same flags, each run in a child
process of its own, alternating, for --rounds rounds. Reports words/s
(training span and whole call), CPU, analogy accuracy and WS-353, medians
and per-round ratios: the package against gensim (goal >= 2x on 2 cores) and
the package's whole call against the CLI process (goal <= 3 % overhead).

    .venv/bin/pip install ./python     # the package under test, into .venv
    .venv/bin/python bench/python.py   # part 01, 1 epoch, 3 rounds

Run nothing else heavy meanwhile: the figures are ratios of runs that
share the machine."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_CORPUS, DEFAULT_EVAL, REPO, decompress, evaluate, log, machine_info, set_log_name  # noqa: E402

SYSTEMS = ["gensim-file", "colonnade-file", "cli", "gensim-iter", "colonnade-iter"]


def settings(a) -> dict:
    return dict(vector_size=a.size, window=a.window, negative=a.negative, min_count=a.min_count,
                sample=a.sample, sg=1, epochs=a.epochs, workers=a.threads, seed=a.seed,
                alpha=0.025, min_alpha=0.0001)


def sentences(path: str):
    """The corpus as a Python iterable of token lists, as users feed gensim
    (gensim's LineSentence also cuts lines at 10,000 tokens)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = line.split()
            for i in range(0, len(words), 10000):
                yield words[i:i + 10000]


def child(a) -> None:
    """One run, in this (child) process: writes its result JSON."""
    kind, plain, out = a.child, a.plain, Path(a.out)
    s = settings(a)
    vectors = out.with_suffix(".bin")
    # Imports are not the call: gensim's (~1.2 s here) is paid by every
    # gensim user once per process, and the package returns gensim's
    # KeyedVectors when gensim is installed.
    import colonnade  # noqa: F401
    from gensim.models import KeyedVectors, Word2Vec  # noqa: F401

    t0 = time.monotonic()
    if kind.startswith("gensim"):
        from gensim.models import Word2Vec
        from gensim.models.word2vec import LineSentence

        model = Word2Vec(**s)
        if kind == "gensim-file":
            model.build_vocab(corpus_file=plain)
            t1 = time.monotonic()
            model.train(corpus_file=plain, total_words=model.corpus_total_words, epochs=s["epochs"])
        else:
            corpus = LineSentence(plain, max_sentence_length=10000)
            model.build_vocab(corpus_iterable=corpus)
            t1 = time.monotonic()
            model.train(corpus_iterable=corpus, total_examples=model.corpus_count, epochs=s["epochs"])
        train_s = time.monotonic() - t1
        words = model.corpus_total_words * s["epochs"]
        whole_s = time.monotonic() - t0
        model.wv.save_word2vec_format(str(vectors), binary=True)
    else:
        import colonnade

        if kind == "colonnade-file":
            model = colonnade.Word2Vec(corpus_file=plain, **s)
        else:
            model = colonnade.Word2Vec(sentences=sentences(plain), **s)
        whole_s = time.monotonic() - t0
        train_s = model.summary["seconds"]
        words = model.summary["tokens"]
        model.save_word2vec_format(vectors, binary=True)
    out.write_text(json.dumps({"whole_s": whole_s, "train_s": train_s, "words": words,
                               "vectors": str(vectors)}))


def run_one(a, kind: str, plain: Path, work: Path, r: int) -> dict:
    out = work / f"{kind}-{r}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    if kind == "cli":
        s = settings(a)
        vectors = out.with_suffix(".bin")
        cmd = [str(Path(a.bin_dir) / "colonnade"), "train", "--corpus", str(plain),
               "--size", str(s["vector_size"]), "--window", str(s["window"]),
               "--negative", str(s["negative"]), "--min-count", str(s["min_count"]),
               "--sample", repr(s["sample"]), "--iter", str(s["epochs"]), "--threads", str(s["workers"]),
               "--seed", str(s["seed"]), "--alpha", "0.025", "--min-alpha", "0.0001",
               "--output", str(work / f"cli-{r}.h5"), "--summary", str(out.with_suffix(".summary.json"))]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        whole = time.monotonic() - t0
        summary = json.loads(out.with_suffix(".summary.json").read_text())
        # The vectors for the evaluation, written outside the timed call.
        import colonnade

        colonnade.load(work / f"cli-{r}.h5").save_word2vec_format(str(vectors), binary=True)
        result = {"whole_s": whole, "train_s": summary["seconds"], "words": summary["tokens"],
                  "vectors": str(vectors)}
    else:
        cmd = [sys.executable, __file__, "--child", kind, "--plain", str(plain), "--out", str(out)]
        cmd += [f"--{k}={v}" for k, v in (("size", a.size), ("window", a.window), ("negative", a.negative),
                                          ("min-count", a.min_count), ("sample", a.sample),
                                          ("epochs", a.epochs), ("threads", a.threads), ("seed", a.seed))]
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        result = json.loads(out.read_text())
        # The child's interpreter start and imports are not in "whole_s";
        # the CLI's process start is (a few ms).
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    result["process_s"] = time.monotonic() - t0
    result["quality"] = evaluate(Path(result["vectors"]), Path(a.eval_dir))
    result["train_wps"] = result["words"] / result["train_s"]
    result["whole_wps"] = result["words"] / result["whole_s"]
    log(f"round {r} {kind}: whole {result['whole_s']:.1f} s, train {result['train_s']:.1f} s, "
        f"{result['train_wps']:,.0f} words/s, analogy {100 * result['quality']['analogy_accuracy']:.2f} %")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    p.add_argument("--eval-dir", default=str(DEFAULT_EVAL))
    p.add_argument("--bin-dir", default=str(REPO / "target" / "release"))
    p.add_argument("--work", default="/tmp/colonnade-bench-python")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--child")
    p.add_argument("--plain")
    p.add_argument("--out")
    a = p.parse_args()
    if a.child:
        child(a)
        return
    set_log_name("python")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    plain = work / "corpus.txt"
    if not plain.exists():
        log(f"decompressing {a.corpus}")
        decompress(Path(a.corpus), plain)
    systems = a.systems.split(",")
    runs: dict[str, list[dict]] = {k: [] for k in systems}
    for r in range(1, a.rounds + 1):
        for kind in systems:
            runs[kind].append(run_one(a, kind, plain, work, r))
    med = lambda xs: statistics.median(xs)  # noqa: E731
    report = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "settings": settings(a), "corpus": a.corpus, "runs": runs, "ratios": {}}
    rows = []
    for kind in systems:
        rs = runs[kind]
        rows.append(f"| {kind} | {med([x['whole_s'] for x in rs]):.1f} | {med([x['train_s'] for x in rs]):.1f} | "
                    f"{med([x['train_wps'] for x in rs]):,.0f} | {med([x['whole_wps'] for x in rs]):,.0f} | "
                    f"{med([x['cpu_s'] for x in rs]):.1f} | "
                    f"{100 * med([x['quality']['analogy_accuracy'] for x in rs]):.2f} | "
                    f"{med([x['quality']['ws353_spearman'] for x in rs]):.3f} |")

    def ratio(x: str, y: str, key: str) -> list[float] | None:
        if x in runs and y in runs:
            return [a_[key] / b_[key] for a_, b_ in zip(runs[x], runs[y])]
        return None

    pairs = {
        "package/gensim, corpus_file, train words/s": ratio("colonnade-file", "gensim-file", "train_wps"),
        "package/gensim, corpus_file, whole-call words/s": ratio("colonnade-file", "gensim-file", "whole_wps"),
        "package/gensim, iterable, whole-call words/s": ratio("colonnade-iter", "gensim-iter", "whole_wps"),
        "package corpus_file whole call / CLI process wall": ratio("colonnade-file", "cli", "whole_s"),
        "package corpus_file train span / CLI train span": ratio("colonnade-file", "cli", "train_s"),
        "package iterable whole call / CLI process wall": ratio("colonnade-iter", "cli", "whole_s"),
    }
    print("| run | whole s | train s | train words/s | whole words/s | CPU s | analogy % | WS-353 ρ |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print()
    for name, rs in pairs.items():
        if rs:
            report["ratios"][name] = rs
            print(f"- {name}: median {med(rs):.3f} (rounds: {', '.join(f'{x:.3f}' for x in rs)})")
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    path = results / f"python-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
