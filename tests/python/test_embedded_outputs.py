"""`colonnade train --embedded-shards 2`: the HDF5, word2vec text and binary
outputs, the vocabulary file and the run summary, read with h5py and gensim."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
from gensim.models import KeyedVectors

from conftest import (
    colonnade,
    corpus_tokens,
    count_words,
    read_vocab_file,
    run,
    run_fail,
    train_args,
    vocab_header_fingerprint,
)

DIM = 24
WINDOW = 3
NEGATIVE = 3
MIN_COUNT = 3
SEED = 7
NUMBER_WORDS = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}


@dataclass
class TrainRun:
    corpus: Path
    dir: Path
    h5: Path
    text: Path
    binary: Path
    vocab: Path
    summary: Path
    stderr: str


@pytest.fixture(scope="module")
def trained(small_corpus, tmp_path_factory) -> TrainRun:
    d = tmp_path_factory.mktemp("embedded")
    r = TrainRun(
        corpus=small_corpus,
        dir=d,
        h5=d / "model.h5",
        text=d / "vectors.txt",
        binary=d / "vectors.bin",
        vocab=d / "vocab.tsv",
        summary=d / "summary.json",
        stderr="",
    )
    res = run(
        train_args(
            small_corpus,
            embedded_shards=2,
            size=DIM,
            window=WINDOW,
            negative=NEGATIVE,
            min_count=MIN_COUNT,
            seed=SEED,
            output=r.h5,
            output_text=r.text,
            output_binary=r.binary,
            output_vectors=True,
            save_vocab=r.vocab,
            summary=r.summary,
        )
    )
    r.stderr = res.stderr
    for p in (r.h5, r.text, r.binary, r.vocab, r.summary):
        assert p.is_file() and p.stat().st_size > 0, f"{p} was not written\n{res.describe()}"
    return r


def test_vocabulary_file_matches_an_independent_count(trained):
    vocab = read_vocab_file(trained.vocab)
    expected = count_words(trained.corpus, MIN_COUNT)
    assert len(vocab) == len(expected)
    assert vocab == expected


def test_vocab_subcommand_writes_the_same_vocabulary(trained, tmp_path):
    out = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", trained.corpus, "--min-count", MIN_COUNT, "--output", out])
    assert read_vocab_file(out) == read_vocab_file(trained.vocab)
    assert vocab_header_fingerprint(out) == vocab_header_fingerprint(trained.vocab)


def test_hdf5_datasets(trained):
    vocab = read_vocab_file(trained.vocab)
    with h5py.File(trained.h5, "r") as f:
        assert {"vectors", "words", "counts", "output_vectors"} <= set(f.keys())

        vectors = f["vectors"]
        assert vectors.shape == (len(vocab), DIM)
        assert vectors.dtype == np.float32
        v = vectors[()]
        assert np.isfinite(v).all()

        words_ds = f["words"]
        info = h5py.check_string_dtype(words_ds.dtype)
        assert info is not None and info.encoding == "utf-8" and info.length is None, (
            f"words must be variable-length UTF-8 strings, got {words_ds.dtype} {info}"
        )
        words = list(words_ds.asstr()[()])
        assert words == [w for w, _ in vocab]

        counts = f["counts"]
        assert counts.dtype == np.uint64
        assert counts[()].tolist() == [c for _, c in vocab]

        out = f["output_vectors"]
        assert out.shape == (len(vocab), DIM) and out.dtype == np.float32
        o = out[()]
        assert np.isfinite(o).all()
        assert not np.array_equal(o, v)
        # Output vectors start at zero in word2vec; every word that was trained
        # as a context or drawn as a negative has moved.
        assert (np.abs(o).sum(axis=1) > 0).mean() > 0.99


def test_hdf5_attributes(trained):
    summary = json.loads(trained.summary.read_text())
    with h5py.File(trained.h5, "r") as f:
        a = f.attrs
        assert int(a["dim"]) == DIM
        assert int(a["window"]) == WINDOW
        assert int(a["negative"]) == NEGATIVE
        assert int(a["seed"]) == SEED
        assert int(a["min_count"]) == MIN_COUNT
        assert int(a["iter"]) == 1
        assert int(a["shards"]) == 2
        assert math.isclose(float(a["sample"]), 1e-3)
        assert math.isclose(float(a["alpha"]), 0.025, rel_tol=1e-6)
        fp = a["model_fingerprint"]
        fp = fp.decode() if isinstance(fp, bytes) else str(fp)
        assert re.fullmatch(r"[0-9a-f]{16}", fp), fp
        vfp = a["vocab_fingerprint"]
        vfp = vfp.decode() if isinstance(vfp, bytes) else str(vfp)
        assert vfp == vocab_header_fingerprint(trained.vocab)
        assert isinstance(a["colonnade_version"], str) and a["colonnade_version"]
        assert int(a["train_words"]) == summary["tokens"]
        config = json.loads(a["config_json"])
        assert config["params"]["window"] == WINDOW
        assert config["params"]["negative"] == NEGATIVE
        assert config["params"]["seed"] == SEED
        assert config["params"]["iter"] == 1
        # Skip-gram shares each position's negatives among its context words
        # unless told otherwise.
        assert config["params"]["shared_negatives"] is True, config["params"]
    # The run log names the same model.
    assert fp in trained.stderr


@pytest.mark.parametrize(
    "name, flags, minibatch", [("cbow", dict(cbow=True), 256), ("pairs", dict(shared_negatives="false"), 32)]
)
def test_negatives_are_shared_only_by_default_skip_gram(small_corpus, tmp_path, name, flags, minibatch):
    """CBOW (one set of negatives per position already) and `--shared-negatives
    false` train with fresh negatives per pair; the file says which ran. In
    process skip-gram's minibatches default to 32 input words and CBOW's to
    256 (docs/benchmarks.md, "CBOW keeps 256 input words in process")."""
    h5 = tmp_path / f"{name}.h5"
    run(train_args(small_corpus, embedded_shards=1, size=DIM, output=h5, **flags))
    with h5py.File(h5, "r") as f:
        config = json.loads(f.attrs["config_json"])
    assert config["params"]["shared_negatives"] is False, config["params"]
    assert config["params"]["minibatch"] == minibatch, config["params"]


def test_shared_negatives_are_refused_for_cbow(small_corpus, tmp_path):
    res = run_fail(train_args(small_corpus, embedded_shards=1, cbow=True, shared_negatives=True,
                              output=tmp_path / "never.h5"))
    assert "--shared-negatives is for skip-gram" in res.stderr, res.describe()
    assert not (tmp_path / "never.h5").exists()


def test_summary_counts_every_corpus_token(trained):
    summary = json.loads(trained.summary.read_text())
    vocab = read_vocab_file(trained.vocab)
    assert summary["tokens"] == corpus_tokens(trained.corpus)
    assert summary["words"] == sum(c for _, c in vocab)
    # Subsampling with sample=1e-3 drops part of the frequent words, not all.
    assert 0 < summary["trained_words"] < summary["words"]
    assert summary["pairs"] > summary["trained_words"]
    assert summary["seconds"] > 0


def test_training_learned_something(trained):
    summary = json.loads(trained.summary.read_text())
    # Initial loss per (input, context) pair with zero output vectors:
    # -log σ(0) for the positive plus NEGATIVE × -log σ(0) = (1 + K) ln 2.
    assert summary["final_loss"] is not None
    assert summary["final_loss"] < (1 + NEGATIVE) * math.log(2)
    kv = KeyedVectors.load_word2vec_format(trained.binary, binary=True)
    # Initial vectors are uniform in ±1/D: norm at most 1/sqrt(D).
    norms = np.linalg.norm(kv.vectors[:100], axis=1)
    assert np.median(norms) > 3 / math.sqrt(DIM)
    # Number words are the clearest cluster in text8-style text.
    neighbours = [w for w, _ in kv.most_similar("three", topn=10)]
    assert len(NUMBER_WORDS & set(neighbours)) >= 5, neighbours


def test_binary_format_equals_hdf5_bit_for_bit(trained):
    kv = KeyedVectors.load_word2vec_format(trained.binary, binary=True)
    with h5py.File(trained.h5, "r") as f:
        words = list(f["words"].asstr()[()])
        v = f["vectors"][()]
    assert kv.index_to_key == words
    assert kv.vectors.shape == v.shape
    assert kv.vectors.dtype == np.float32
    assert np.array_equal(kv.vectors.view(np.uint32), v.view(np.uint32))


def test_text_format_matches_hdf5(trained):
    kv = KeyedVectors.load_word2vec_format(trained.text, binary=False)
    with h5py.File(trained.h5, "r") as f:
        words = list(f["words"].asstr()[()])
        v = f["vectors"][()]
    assert kv.index_to_key == words
    assert kv.vectors.shape == v.shape
    np.testing.assert_allclose(kv.vectors, v, rtol=1e-6, atol=0)
    with open(trained.text, encoding="utf-8") as f:
        header = f.readline().split()
    assert header == [str(len(words)), str(DIM)]
