#!/usr/bin/env python3
"""Quality by word frequency: where two sets of vectors differ (issue 44).

Averages over a whole evaluation set hide the rare words, which learn only
from the frequent words around them. This script splits every measure by
the corpus count of the *rarest* word involved (buckets 5–50, 50–500, 500+
by default, from the vocabulary file's counts) and reports, per model and
bucket:

- word-pair similarity (WS-353, SimLex-999, MEN, RG-65): Spearman ρ of the
  pairs whose rarer word falls in the bucket (pairs with a word outside the
  vocabulary are left out, as gensim's `evaluate_word_pairs` does);
- analogies (Google): 3CosAdd accuracy over the *whole* vocabulary (not
  gensim's first 30,000 words, which would leave the rare buckets empty),
  questions bucketed by their rarest word;
- nearest-neighbour agreement: for up to --sample-words words of the bucket,
  the mean share of the top --k neighbours two models have in common. Each
  pair of models given with --agree is reported, so that Colonnade against
  gensim can be read against gensim against itself (two seeds).

Models are word2vec binary/text files (gensim's reader) named NAME=PATH.

    .venv/bin/python bench/buckets.py --vocab vocab.tsv \\
        --model c1=colonnade-1.bin --model c2=colonnade-2.bin \\
        --model g1=gensim-1.bin --model g2=gensim-2.bin \\
        --agree g1:g2 --agree c1:c2 --agree c1:g1 --agree c2:g2
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

REPO = Path(__file__).resolve().parent.parent
DEFAULT_EVAL = REPO.parent / "shared" / "data" / "eval"
PAIR_SETS = {
    "WS-353": "wordsim353.tsv",
    "SimLex-999": "simlex999.txt",
    "MEN": "EN-MEN-TR-3k.txt",
    "RG-65": "EN-RG-65.txt",
}


def read_counts(path: Path) -> dict[str, int]:
    counts = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            word, count = line.rstrip("\n").split("\t")[:2]
            counts[word] = int(count)
    return counts


def read_pairs(path: Path) -> list[tuple[str, str, float]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) < 3:
                continue
            out.append((parts[0].lower(), parts[1].lower(), float(parts[2])))
    return out


def read_analogies(path: Path) -> list[tuple[str, str, str, str]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(":") or not line.strip():
                continue
            a, b, c, d = line.lower().split()
            out.append((a, b, c, d))
    return out


class Model:
    def __init__(self, name: str, path: Path):
        from gensim.models import KeyedVectors

        binary = path.suffix != ".txt"
        kv = KeyedVectors.load_word2vec_format(str(path), binary=binary)
        self.name = name
        self.words = kv.index_to_key
        self.index = {w: i for i, w in enumerate(self.words)}
        m = kv.vectors.astype(np.float32)
        self.unit = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)

    def cos(self, a: str, b: str) -> float:
        return float(self.unit[self.index[a]] @ self.unit[self.index[b]])

    def neighbours(self, ids: np.ndarray, k: int) -> np.ndarray:
        """Top-k neighbour ids (themselves excluded) of rows `ids`."""
        out = np.empty((len(ids), k), dtype=np.int64)
        for s in range(0, len(ids), 512):
            sims = self.unit[ids[s:s + 512]] @ self.unit.T
            sims[np.arange(len(sims)), ids[s:s + 512]] = -np.inf
            top = np.argpartition(-sims, k, axis=1)[:, :k]
            out[s:s + 512] = top
        return out


def bucket_of(count: int, edges: list[int]) -> int | None:
    for i in range(len(edges) - 1):
        if edges[i] <= count < edges[i + 1]:
            return i
    return None


def analogy_by_bucket(model: Model, questions, counts, edges) -> list[tuple[int, int]]:
    """(correct, total) per bucket, 3CosAdd over the whole vocabulary."""
    result = [[0, 0] for _ in range(len(edges) - 1)]
    qs = []
    for q in questions:
        if not all(w in model.index and w in counts for w in q):
            continue
        b = bucket_of(min(counts[w] for w in q), edges)
        if b is not None:
            qs.append((b, [model.index[w] for w in q]))
    for s in range(0, len(qs), 1024):
        chunk = qs[s:s + 1024]
        ids = np.array([x[1] for x in chunk])
        target = model.unit[ids[:, 1]] - model.unit[ids[:, 0]] + model.unit[ids[:, 2]]
        sims = target @ model.unit.T
        for j in range(3):
            sims[np.arange(len(chunk)), ids[:, j]] = -np.inf
        best = sims.argmax(axis=1)
        for (b, _), hit in zip(chunk, best == ids[:, 3]):
            result[b][0] += int(hit)
            result[b][1] += 1
    return [tuple(r) for r in result]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", type=Path, required=True, help="a `colonnade vocab` file (word<TAB>count)")
    p.add_argument("--model", action="append", required=True, help="NAME=PATH of word2vec vectors")
    p.add_argument("--agree", action="append", default=[], help="A:B, two model names")
    p.add_argument("--edges", default="5,50,500", help="bucket edges; the last bucket is open")
    p.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--sample-words", type=int, default=1000)
    p.add_argument("--out", type=Path)
    args = p.parse_args()

    counts = read_counts(args.vocab)
    edges = [int(x) for x in args.edges.split(",")] + [1 << 62]
    names = [f"{edges[i]}–{edges[i + 1]}" if i + 2 < len(edges) else f"{edges[i]}+" for i in range(len(edges) - 1)]
    models = {}
    for spec in args.model:
        name, path = spec.split("=", 1)
        models[name] = Model(name, Path(path))
    result: dict = {"buckets": names, "similarity": {}, "analogy": {}, "agreement": {}}

    # Similarity per set, model and bucket.
    lines = ["| set | model | " + " | ".join(f"ρ {n} (pairs)" for n in names) + " |",
             "|---|---|" + "---:|" * len(names)]
    for set_name, file in PAIR_SETS.items():
        path = args.eval_dir / file
        if not path.exists():
            continue
        pairs = read_pairs(path)
        for m in models.values():
            per = []
            for b in range(len(names)):
                xs, ys = [], []
                for a, c, score in pairs:
                    if a in m.index and c in m.index and a in counts and c in counts \
                            and bucket_of(min(counts[a], counts[c]), edges) == b:
                        xs.append(m.cos(a, c))
                        ys.append(score)
                rho = float(spearmanr(xs, ys).statistic) if len(xs) >= 5 else None
                per.append({"rho": rho, "pairs": len(xs)})
            result["similarity"].setdefault(set_name, {})[m.name] = per
            lines.append(f"| {set_name} | {m.name} | " + " | ".join(
                (f"{x['rho']:.3f}" if x["rho"] is not None else "–") + f" ({x['pairs']})" for x in per) + " |")
    sim_table = "\n".join(lines)

    questions = read_analogies(args.eval_dir / "questions-words.txt")
    lines = ["| model | " + " | ".join(f"analogy % {n} (questions)" for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    for m in models.values():
        t = time.time()
        per = analogy_by_bucket(m, questions, counts, edges)
        result["analogy"][m.name] = [{"correct": c, "total": n} for c, n in per]
        lines.append(f"| {m.name} | " + " | ".join(
            (f"{100 * c / n:.2f}" if n else "–") + f" ({n})" for c, n in per) + " |")
        print(f"analogies of {m.name}: {time.time() - t:.0f} s", flush=True)
    ana_table = "\n".join(lines)

    lines = ["| models | " + " | ".join(f"top-{args.k} agreement {n}" for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    for pair in args.agree:
        a, b = (models[x] for x in pair.split(":"))
        per = []
        for bi in range(len(names)):
            words = sorted(w for w in a.words if w in b.index and w in counts and bucket_of(counts[w], edges) == bi)
            if len(words) > args.sample_words:
                # One sample per bucket, the same for every pair of models
                # that share the vocabulary, so that their agreements are
                # compared on the same words (a sample's own spread is about
                # 0.01 in the rare bucket).
                rng = np.random.default_rng(1 + bi)
                words = list(rng.choice(words, args.sample_words, replace=False))
            if not words:
                per.append(None)
                continue
            na = a.neighbours(np.array([a.index[w] for w in words]), args.k)
            nb = b.neighbours(np.array([b.index[w] for w in words]), args.k)
            share = np.mean([len({a.words[i] for i in ra} & {b.words[i] for i in rb}) / args.k
                             for ra, rb in zip(na, nb)])
            per.append(float(share))
        result["agreement"][pair] = per
        lines.append(f"| {pair} | " + " | ".join(f"{x:.3f}" if x is not None else "–" for x in per) + " |")
    agree_table = "\n".join(lines)

    report = "\n\n".join([sim_table, ana_table, agree_table])
    print(report)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
