"""Rare words' neighbourhoods against gensim's (issue 44).

A minibatch defers every update of its rows to its end; the rare words learn
from the frequent rows around them, so a long minibatch moves them into other
neighbourhoods than per-word SGD (gensim, word2vec C) gives them. The measure
is bench/buckets.py's: of the words whose corpus count is in a bucket, the
share of their top-10 cosine neighbours (over the whole vocabulary) that
Colonnade's vectors and gensim's have in common, both trained alike on the
shipped 2M-word sample, 3 epochs. Measured (seeds 1 / 2 against gensim's same
seed; docs/benchmarks.md, "A call's fixed costs, and 32 input words in
process"): count 5-49, gensim's seed 1 against its seed 2 0.136, minibatches
of 256 input words (the default before) 0.080 / 0.073, of 32 (the default in
process) 0.116 / 0.105; count 50-499, 0.500, 0.350 / 0.344, 0.455 / 0.454. The
floors sit between the two.
"""

from __future__ import annotations

import lzma

import numpy as np
from gensim.models import KeyedVectors, Word2Vec
from gensim.models.word2vec import LineSentence

from conftest import SAMPLE_XZ, colonnade, read_vocab_file, run, train_args

EPOCHS = 3
NEIGHBOURS = 10
WORDS = 600
# (counts from, counts below, the least agreement with gensim)
FLOORS = [(5, 50, 0.095), (50, 500, 0.40)]


def neighbours(kv: KeyedVectors, words: list[str]) -> list[set[str]]:
    """Each word's NEIGHBOURS nearest words by cosine over all of `kv`."""
    return [{w for w, _ in kv.most_similar(word, topn=NEIGHBOURS)} for word in words]


def test_rare_words_have_gensims_neighbours(tmp_path):
    corpus = tmp_path / "sample.txt"
    with lzma.open(SAMPLE_XZ, "rb") as src:
        corpus.write_bytes(src.read())
    settings = dict(size=100, window=5, negative=5, min_count=5, sample=1e-4, alpha=0.025, seed=1)
    vocab = tmp_path / "vocab.tsv"
    run([str(colonnade()), "vocab", "--corpus", str(corpus), "--min-count", "5", "--output", str(vocab)])
    ours = tmp_path / "colonnade.bin"
    run(train_args(corpus, vocab=vocab, iter=EPOCHS, threads=2, output_binary=ours, **settings))
    theirs = Word2Vec(
        LineSentence(str(corpus)),
        sg=1,
        vector_size=settings["size"],
        window=settings["window"],
        negative=settings["negative"],
        min_count=settings["min_count"],
        sample=settings["sample"],
        alpha=settings["alpha"],
        epochs=EPOCHS,
        workers=2,
        seed=settings["seed"],
    ).wv
    a = KeyedVectors.load_word2vec_format(str(ours), binary=True)
    counts = dict(read_vocab_file(vocab))
    failed = []
    for lo, hi, floor in FLOORS:
        bucket = sorted(w for w, c in counts.items() if lo <= c < hi and w in a.key_to_index and w in theirs.key_to_index)
        assert len(bucket) > WORDS, f"only {len(bucket)} words of count {lo}-{hi - 1} in both models"
        words = [bucket[i] for i in np.random.default_rng(0).choice(len(bucket), WORDS, replace=False)]
        shared = [len(x & y) / NEIGHBOURS for x, y in zip(neighbours(a, words), neighbours(theirs, words))]
        agreement = float(np.mean(shared))
        if agreement < floor:
            failed.append(f"count {lo}-{hi - 1} ({WORDS} of {len(bucket)} words): {agreement:.3f}, below {floor}")
    assert not failed, f"top-{NEIGHBOURS} agreement with gensim: " + "; ".join(failed)
