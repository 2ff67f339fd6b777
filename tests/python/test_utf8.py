"""Multibyte UTF-8 words survive training and every output format."""

from __future__ import annotations

import random

import h5py
import numpy as np
from gensim.models import KeyedVectors

from conftest import count_words, read_vocab_file, run, train_args

WORDS = [
    "naïve",          # 2-byte
    "日本",           # 3-byte
    "Ελλάδα",         # Greek
    "🙂",             # 4-byte
    "e\u0301t\u00e9",  # decomposed and precomposed é: must stay distinct bytes, no normalisation
    "Straße",
    "ascii",
    "mixed-日本-🙂",
]


def test_multibyte_words_roundtrip(tmp_path):
    rng = random.Random(5)
    corpus = tmp_path / "utf8.txt"
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(60):
            f.write(" ".join(rng.choice(WORDS) for _ in range(12)) + "\n")
    h5, txt, binf, vocab = (tmp_path / n for n in ("m.h5", "v.txt", "v.bin", "vocab.tsv"))
    run(
        train_args(
            corpus,
            embedded_shards=2,
            size=8,
            min_count=5,
            sample=0,
            output=h5,
            output_text=txt,
            output_binary=binf,
            save_vocab=vocab,
        )
    )
    expected = count_words(corpus, 5)
    assert {w for w, _ in expected} == set(WORDS)
    assert read_vocab_file(vocab) == expected
    words = [w for w, _ in expected]

    with h5py.File(h5, "r") as f:
        h5_words = list(f["words"].asstr()[()])
        raw = [bytes(b) for b in f["words"][()]]
        v = f["vectors"][()]
        assert f["counts"][()].tolist() == [c for _, c in expected]
    assert h5_words == words
    assert raw == [w.encode("utf-8") for w in words]
    assert v.shape == (len(words), 8) and np.isfinite(v).all()

    kb = KeyedVectors.load_word2vec_format(binf, binary=True)
    kt = KeyedVectors.load_word2vec_format(txt, binary=False)
    assert kb.index_to_key == words
    assert kt.index_to_key == words
    assert np.array_equal(kb.vectors.view(np.uint32), v.view(np.uint32))
    np.testing.assert_allclose(kt.vectors, v, rtol=1e-6, atol=0)
    assert np.array_equal(kb["🙂"], v[words.index("🙂")])
    assert not np.array_equal(kb["e\u0301t\u00e9"], kb["naïve"])
