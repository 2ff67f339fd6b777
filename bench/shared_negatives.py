#!/usr/bin/env python3
"""Does sharing negatives among an input position's pairs cost quality? (issue 43)

A shard's CPU per token is mostly a fixed cost per dot product (drawing,
planning and visiting its target), paid again by every shard. Skip-gram
draws `negative` negatives per (input, context) pair; an input position with
w context words has w·(1 + negative) dot products. If a position's pairs
shared K negatives, each weighted w·negative/K (the same expected gradient),
their dot products with the position's input row are the same for every pair
and are computed once: w + K dot products (11.7 instead of 34 at window 5,
negative 5, K = 5). Ji et al. (2016; BlazingText's section 2) share negatives
across a window for the same reason. This script measures what the sharing
costs in quality before the protocol is changed, with one independent
single-threaded trainer (numba) for every mode, so that only the negatives
differ:

- `pair`: `negative` fresh negatives per pair (Colonnade's orientation: the
  input row is the position's word, its context words are the positives);
- `shared-K`: K negatives per input position, each weighted w·negative/K.
  Both defer the input row's update to the end of its position (as
  Colonnade's minibatches do); output rows are updated at once.
- `c-pair`: word2vec C's orientation (each context word's input row against
  the centre word and `negative` fresh negatives per pair);
- `c-window`: the same, the `negative` negatives drawn once per window and
  used by every pair of it (Ji et al.): still w·(1 + n) dot products, each
  pair its own, but 1 + n output rows per window instead of w·(1 + n), and n
  draws instead of w·n;
- `c-window-deferred`, `c-pair-deferred`: `c-window` and `c-pair` as one of
  Colonnade's minibatches defers a window (issue 44): every dot product of
  the window from its rows as the window found them, every row's steps
  summed and applied at the window's end, where word2vec and gensim update
  each output row at once and each context row after its own pair.
Subsampling,
the shrunk window, the unigram^0.75 table and the linear rate schedule are
word2vec's. Evaluation: the same as every bench script (analogies restricted
to the 30K most frequent words, WS-353).

Needs numba in .venv (not a project dependency): .venv/bin/pip install numba

    .venv/bin/python bench/shared_negatives.py --modes pair,shared-5,shared-10 --seeds 1,2
    .venv/bin/python bench/shared_negatives.py --modes c-pair,c-window --seeds 1,2
    .venv/bin/python bench/shared_negatives.py --modes cbow,cbow-maxexp --seeds 1,2 --alpha 0.05 \
        --epochs 2 --init-scale 1.0     # issue 44: an independent CBOW
    .venv/bin/python bench/shared_negatives.py --modes c-window,c-window-deferred,c-pair --seeds 1,2,3 \
        --alpha 0.05 --sample 1e-3 --init-scale 1.0   # issue 44: what deferring a window changes
"""
from __future__ import annotations

import argparse
import collections
import json
import lzma
import time
from pathlib import Path

import numpy as np

try:
    from numba import njit
except ImportError as e:  # pragma: no cover - a bench-only dependency
    raise SystemExit("bench/shared_negatives.py needs numba: .venv/bin/pip install numba") from e

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"


@njit(cache=True, fastmath=True)
def _sentence(corpus, keep, pos, sen):
    """The next sentence from `pos`: up to 1,000 kept words (word2vec's
    MAX_SENTENCE_LENGTH), subsampled; returns its length and the new `pos`."""
    n = 0
    while n < 1000 and pos < corpus.shape[0]:
        w = corpus[pos]
        pos += 1
        if keep[w] >= 1.0 or keep[w] >= np.random.random():
            sen[n] = w
            n += 1
    return n, pos


@njit(cache=True, fastmath=True)
def _window(t, n, window):
    """The shrunk window around position t of a sentence of n words."""
    b = np.random.randint(0, window)
    return max(0, t - (window - b)), min(n, t + (window - b) + 1)


@njit(cache=True, fastmath=True)
def _step(syn0, i, syn1, o, label, scale, neu):
    """One dot product u_i·v_o and its update: v_o at once, u_i's into `neu`."""
    dim = syn0.shape[1]
    f = 0.0
    for j in range(dim):
        f += syn0[i, j] * syn1[o, j]
    s = 1.0 / (1.0 + np.exp(-max(min(f, 30.0), -30.0)))
    g = (label - s) * scale
    for j in range(dim):
        neu[j] += g * syn1[o, j]
        syn1[o, j] += g * syn0[i, j]


@njit(cache=True, fastmath=True)
def _position(syn0, syn1, sen, t, lo, hi, table, negative, shared_k, negs, alpha, neu):
    """Colonnade's orientation: the input row of the word at t against its
    context words, with `negative` fresh negatives per pair (shared_k 0) or
    shared_k negatives for all its pairs."""
    word = sen[t]
    pairs = hi - lo - 1
    if pairs <= 0:
        return
    neu[:] = 0.0
    for k in range(shared_k):
        negs[k] = table[np.random.randint(0, table.shape[0])]
    for c in range(lo, hi):
        if c == t:
            continue
        ctx = sen[c]
        _step(syn0, word, syn1, ctx, 1.0, alpha, neu)
        if shared_k == 0:
            for _d in range(negative):
                tgt = table[np.random.randint(0, table.shape[0])]
                if tgt != ctx:
                    _step(syn0, word, syn1, tgt, 0.0, alpha, neu)
    # Each shared negative stands for (pairs − those whose context it is)·
    # negative/K of them: one dot product, its step weighted (a negative
    # equal to a pair's context stands for none of that pair's: word2vec
    # skips it).
    for k in range(shared_k):
        tgt = negs[k]
        same = 0
        for c in range(lo, hi):
            if c != t and sen[c] == tgt:
                same += 1
        if same < pairs:
            _step(syn0, word, syn1, tgt, 0.0, alpha * (pairs - same) * negative / shared_k, neu)
    syn0[word] += neu


@njit(cache=True, fastmath=True)
def _position_c(syn0, syn1, sen, t, lo, hi, table, negative, share, negs, alpha, neu):
    """word2vec C's orientation: each context word's input row against the
    word at t and `negative` negatives, drawn per pair, or (`share`) once per
    window for all its pairs (Ji et al.)."""
    word = sen[t]
    if share:
        for k in range(negative):
            negs[k] = table[np.random.randint(0, table.shape[0])]
    for c in range(lo, hi):
        if c == t:
            continue
        ctx = sen[c]
        neu[:] = 0.0
        _step(syn0, ctx, syn1, word, 1.0, alpha, neu)
        for d in range(negative):
            tgt = negs[d] if share else table[np.random.randint(0, table.shape[0])]
            if tgt != word:
                _step(syn0, ctx, syn1, tgt, 0.0, alpha, neu)
        syn0[ctx] += neu


@njit(cache=True, fastmath=True)
def _position_c_deferred(syn0, syn1, sen, t, lo, hi, table, negative, share, negs, alpha, d0, d1, tgts):
    """[`_position_c`] as one of Colonnade's minibatches defers it: every dot
    product of the window from the rows as the window found them, every
    row's steps summed and applied at the window's end (a row that is both a
    context and a target, or twice a context, gets all its steps). `d0`
    holds each context's Δu, `d1` and `tgts` each (context, target) pair's
    Δv and output row (−1: a negative equal to the word, no step)."""
    word = sen[t]
    dim = syn0.shape[1]
    if hi - lo - 1 <= 0:
        return
    if share:
        for k in range(negative):
            negs[k] = table[np.random.randint(0, table.shape[0])]
    d0[:, :] = 0.0
    d1[:, :] = 0.0
    tgts[:] = -1
    for ci in range(hi - lo):
        ctx = sen[lo + ci]
        if lo + ci == t:
            continue
        for d in range(negative + 1):
            if d == 0:
                tgt, label = word, 1.0
            else:
                tgt = negs[d - 1] if share else table[np.random.randint(0, table.shape[0])]
                label = 0.0
                if tgt == word:
                    continue
            f = 0.0
            for j in range(dim):
                f += syn0[ctx, j] * syn1[tgt, j]
            s = 1.0 / (1.0 + np.exp(-max(min(f, 30.0), -30.0)))
            g = (label - s) * alpha
            pair = ci * (negative + 1) + d
            tgts[pair] = tgt
            for j in range(dim):
                d0[ci, j] += g * syn1[tgt, j]
                d1[pair, j] += g * syn0[ctx, j]
    for pair in range(tgts.shape[0]):
        if tgts[pair] >= 0:
            syn1[tgts[pair]] += d1[pair]
    for ci in range(hi - lo):
        if lo + ci != t:
            syn0[sen[lo + ci]] += d0[ci]


@njit(cache=True, fastmath=True)
def _position_cbow(syn0, syn1, sen, t, lo, hi, table, negative, max_exp, alpha, neu, neu1):
    """CBOW as gensim's `fast_sentence_cbow_neg` (cbow_mean=1): the mean of
    the context rows against the word at t and `negative` negatives (one
    equal to the word skipped); each context row gets the whole error. With
    `max_exp`, a dot product beyond ±6 takes no step, as gensim and
    word2vec C's table lookups skip it."""
    word = sen[t]
    count = hi - lo - 1
    if count <= 0:
        return
    dim = syn0.shape[1]
    neu1[:] = 0.0
    for c in range(lo, hi):
        if c != t:
            for j in range(dim):
                neu1[j] += syn0[sen[c], j]
    for j in range(dim):
        neu1[j] /= count
    neu[:] = 0.0
    for d in range(negative + 1):
        if d == 0:
            tgt, label = word, 1.0
        else:
            tgt, label = table[np.random.randint(0, table.shape[0])], 0.0
            if tgt == word:
                continue
        f = 0.0
        for j in range(dim):
            f += neu1[j] * syn1[tgt, j]
        if max_exp and (f <= -6.0 or f >= 6.0):
            continue
        s = 1.0 / (1.0 + np.exp(-max(min(f, 30.0), -30.0)))
        g = (label - s) * alpha
        for j in range(dim):
            neu[j] += g * syn1[tgt, j]
            syn1[tgt, j] += g * neu1[j]
    for c in range(lo, hi):
        if c != t:
            syn0[sen[c]] += neu


@njit(cache=True, fastmath=True)
def _train(corpus, keep, syn0, syn1, table, window, negative, shared_k, c_orientation, share,
           alpha0, min_alpha, seed, epochs, cbow, max_exp, deferred=False):
    """Sentences, windows and the rate schedule as word2vec's; each position
    trained by [`_position`] or (`c_orientation`) [`_position_c`]."""
    np.random.seed(seed)
    n_tokens = corpus.shape[0]
    total = n_tokens * epochs
    sen = np.empty(1000, dtype=np.int32)
    neu = np.zeros(syn0.shape[1], dtype=np.float32)
    neu1 = np.zeros(syn0.shape[1], dtype=np.float32)
    negs = np.empty(max(shared_k, negative, 1), dtype=np.int32)
    # The deferred window's: per context its Δu, per (context, target) pair its Δv and row.
    d0 = np.zeros((2 * window + 1, syn0.shape[1]), dtype=np.float32)
    d1 = np.zeros(((2 * window + 1) * (negative + 1), syn0.shape[1]), dtype=np.float32)
    tgts = np.full(d1.shape[0], -1, dtype=np.int32)
    done = 0
    for _ in range(epochs):
        pos = 0
        while pos < n_tokens:
            n, pos = _sentence(corpus, keep, pos, sen)
            alpha = max(alpha0 - (alpha0 - min_alpha) * ((done + pos) / total), min_alpha)
            for t in range(n):
                lo, hi = _window(t, n, window)
                if cbow:
                    _position_cbow(syn0, syn1, sen, t, lo, hi, table, negative, max_exp, alpha, neu, neu1)
                elif deferred:
                    _position_c_deferred(syn0, syn1, sen, t, lo, hi, table, negative, share, negs, alpha, d0, d1,
                                         tgts)
                elif c_orientation:
                    _position_c(syn0, syn1, sen, t, lo, hi, table, negative, share, negs, alpha, neu)
                else:
                    _position(syn0, syn1, sen, t, lo, hi, table, negative, shared_k, negs, alpha, neu)
        done += n_tokens

def load_corpus(path: Path, min_count: int):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        tokens = f.read().split()
    counts = collections.Counter(tokens)
    words = [w for w, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])) if c >= min_count]
    index = {w: i for i, w in enumerate(words)}
    ids = np.fromiter((index.get(t, -1) for t in tokens), dtype=np.int32, count=len(tokens))
    ids = ids[ids >= 0]
    freq = np.array([counts[w] for w in words], dtype=np.float64)
    return words, freq, ids


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=DATA / "corpus" / "enwiki_text8style_part01.txt.xz")
    p.add_argument("--eval-dir", type=Path, default=DATA / "eval")
    p.add_argument("--modes", default="pair,shared-5,shared-10")
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-4)
    p.add_argument("--alpha", type=float, default=0.025)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--init-scale", type=float, default=0.5,
                   help="input rows start in U[-s/d, s/d): 0.5 is word2vec C's range, 1.0 gensim 4's")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()

    import sys
    sys.path.insert(0, str(REPO / "bench"))
    from _common import evaluate_kv, pair_rhos  # noqa: E402
    from gensim.models import KeyedVectors

    t0 = time.time()
    words, freq, ids = load_corpus(args.corpus, args.min_count)
    print(f"corpus: {ids.size:,} tokens, {len(words):,} words ({time.time() - t0:.0f} s)", flush=True)
    threshold = args.sample * freq.sum()
    keep = ((np.sqrt(freq / threshold) + 1) * threshold / freq).astype(np.float32) if args.sample > 0 \
        else np.ones(len(words), dtype=np.float32)
    pw = freq ** 0.75
    table = np.repeat(np.arange(len(words), dtype=np.int32),
                      np.maximum(1, np.round(pw / pw.sum() * 10_000_000)).astype(np.int64))
    rows = []
    work = Path("/tmp/colonnade-shared-negatives")
    work.mkdir(exist_ok=True)
    for seed in [int(s) for s in args.seeds.split(",")]:
        for mode in args.modes.split(","):
            k = 0 if mode in ("pair", "c-pair", "c-window", "c-pair-deferred", "c-window-deferred", "cbow",
                              "cbow-maxexp") else int(mode.split("-")[1])
            rng = np.random.default_rng(seed)
            syn0 = ((rng.random((len(words), args.size), dtype=np.float32) * 2 - 1) * args.init_scale
                    / args.size).astype(np.float32)
            syn1 = np.zeros((len(words), args.size), dtype=np.float32)
            t = time.time()
            _train(ids, keep, syn0, syn1, table, args.window, args.negative, k, mode.startswith("c-"),
                   mode.startswith("c-window"), args.alpha, args.alpha * 1e-4, seed, args.epochs,
                   mode.startswith("cbow"), mode == "cbow-maxexp", mode.endswith("-deferred"))
            secs = time.time() - t
            kv = KeyedVectors(args.size)
            kv.add_vectors(words, syn0)
            path = work / f"{mode}-{seed}.bin"
            kv.save_word2vec_format(str(path), binary=True)
            ev = evaluate_kv(kv, args.eval_dir) | pair_rhos(kv, args.eval_dir)
            row = {"mode": mode, "seed": seed, "seconds": secs, "words_per_s": ids.size * args.epochs / secs,
                   "analogy": ev["analogy_accuracy"], "ws353": ev["ws353_spearman"],
                   "simlex": ev["simlex_spearman"], "men": ev["men_spearman"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| mode | dot products per position | seeds | analogy % (each) | WS-353 ρ (each) | SimLex ρ (each) "
          "| MEN ρ (each) |\n|---|---|---:|---|---|---|---|")
    for mode in args.modes.split(","):
        rs = [r for r in rows if r["mode"] == mode]
        dots = {"pair": "w·(1 + n)", "c-pair": "w·(1 + n)", "c-window": "w·(1 + n), 1 + n rows",
                "c-pair-deferred": "w·(1 + n), deferred", "c-window-deferred": "w·(1 + n), 1 + n rows, deferred",
                "cbow": "1 + n", "cbow-maxexp": "1 + n"}.get(
            mode, f"w + {mode.split('-')[-1]}")
        print(f"| {mode} | {dots} | {len(rs)} | " + " / ".join(f"{100 * r['analogy']:.2f}" for r in rs)
              + " | " + " / ".join(f"{r['ws353']:.3f}" for r in rs)
              + " | " + " / ".join(f"{r['simlex']:.3f}" for r in rs)
              + " | " + " / ".join(f"{r['men']:.3f}" for r in rs) + " |")
    out = args.out or REPO / "bench" / "results" / f"shared-negatives-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
