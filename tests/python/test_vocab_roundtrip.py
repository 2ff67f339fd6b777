"""The vocabulary file that `--save-vocab` writes must define the same
vocabulary when given back (`train --vocab`, `export --vocab`), whatever words
the corpus tokenizer produced."""

from __future__ import annotations

import random

import h5py
import pytest

from conftest import colonnade, read_vocab_file, run, train_args

PLAIN = ["alpha", "beta", "gamma", "delta"]

# Tokens the corpus reader keeps as words (it splits on ASCII whitespace only)
# that the vocabulary file format could trip over.
SPECIAL = {
    "hash": "#tag",  # the vocab format treats lines starting with '#' as comments
    "sentence_marker": "</s>",  # word2vec's sentence marker, skipped when loading
    "nbsp": "no\u00a0break",  # Unicode whitespace inside a token (not ASCII whitespace)
    "colon": "a:b",
    "tab_lookalike": "x\u3000y",  # ideographic space
}


def write_corpus(path, special: str) -> None:
    rng = random.Random(3)
    words = PLAIN + [special]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(40):
            f.write(" ".join(rng.choice(words) for _ in range(10)) + "\n")


def h5_vocab(path):
    with h5py.File(path, "r") as f:
        return list(f["words"].asstr()[()]), f["counts"][()].tolist(), str(f.attrs["vocab_fingerprint"])


@pytest.mark.parametrize("special", list(SPECIAL.values()), ids=list(SPECIAL))
def test_saved_vocab_loads_back_identically(tmp_path, special):
    corpus = tmp_path / "c.txt"
    write_corpus(corpus, special)
    vocab = tmp_path / "vocab.tsv"
    first, second = tmp_path / "first.h5", tmp_path / "second.h5"
    common = dict(embedded_shards=1, size=4, min_count=1, sample=0)
    run(train_args(corpus, save_vocab=vocab, output=first, **common))
    words, counts, fp = h5_vocab(first)
    assert special in words, f"{special!r} was not counted as a word: {words}"
    assert [w for w, _ in read_vocab_file(vocab)] == words

    res = run(train_args(corpus, vocab=vocab, output=second, **common), expect_ok=False)
    ok = res.returncode == 0
    assert ok, f"train --vocab rejects the file --save-vocab wrote\n{res.describe()}"
    words2, counts2, fp2 = h5_vocab(second)
    assert words2 == words, f"--vocab {vocab} loaded a different vocabulary than was saved"
    assert counts2 == counts
    assert fp2 == fp


def test_export_accepts_saved_vocab_with_hash_word(tmp_path, shard_launcher):
    corpus = tmp_path / "c.txt"
    write_corpus(corpus, "#tag")
    endpoints = shard_launcher.start(2)
    vocab = tmp_path / "vocab.tsv"
    trained = tmp_path / "train.h5"
    run(train_args(corpus, shards=",".join(endpoints), size=4, min_count=1, save_vocab=vocab,
                   output=trained, connect_timeout_secs=20))
    exported = tmp_path / "export.h5"
    res = run([colonnade(), "export", "--shards", ",".join(endpoints), "--vocab", vocab, "--output", exported],
              expect_ok=False)
    ok = res.returncode == 0
    assert ok, f"export refuses the vocabulary train --save-vocab wrote\n{res.describe()}"
    assert h5_vocab(exported) == h5_vocab(trained)
