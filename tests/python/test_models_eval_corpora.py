"""No silent failures (issue 10): models piling up on shards, eval files that do
not parse, `similar` printing nothing, compressed corpora we could not read,
and invalid UTF-8 deep in a corpus."""

from __future__ import annotations

import bz2
import io
import json
import lzma
import subprocess
import tarfile
import zipfile

import h5py
import pytest
import zstandard

from conftest import (
    clean_env,
    closed_port,
    colonnade,
    corpus_tokens,
    read_vocab_file,
    run,
    run_fail,
    train_args,
)


# ---------------------------------------------------------------- models


def _list(endpoints) -> dict:
    res = run([colonnade(), "models", "list", "--shards", ",".join(endpoints), "--json"])
    return json.loads(res.stdout)


def _train_on(endpoints, corpus, vocab, seed):
    run(train_args(corpus, shards=",".join(endpoints), size=16, seed=seed, save_vocab=vocab,
                   connect_timeout_secs=20))


def test_models_list_export_names_them_and_drop_frees_one(corpus_100k, shard_launcher, tmp_path):
    endpoints = shard_launcher.start(2)
    vocab = tmp_path / "vocab.tsv"
    for seed in (1, 2):
        _train_on(endpoints, corpus_100k, vocab, seed)
    words = len(read_vocab_file(vocab))

    listing = _list(endpoints)
    assert [s["endpoint"] for s in listing["shards"]] == endpoints
    for i, shard in enumerate(listing["shards"]):
        models = shard["models"]
        assert len(models) == 2, listing
        assert sorted(m["init_seed"] for m in models) == [1, 2]
        for m in models:
            assert m["vocab_size"] == words and m["dim"] == 16 and m["negative"] == 3
            assert (m["col_start"], m["col_end"]) == ((0, 8) if i == 0 else (8, 16))
            assert len(m["fingerprint"]) == 16 and len(m["vocab_fingerprint"]) == 16
            assert m["memory_bytes"] > 0 and m["adjust_calls"] > 0 and m["pairs_adjusted"] > 0
    by_seed = {m["init_seed"]: m["fingerprint"] for m in listing["shards"][0]["models"]}
    assert {m["fingerprint"] for m in listing["shards"][1]["models"]} == set(by_seed.values())

    # The table names the shards and the models too.
    table = run([colonnade(), "models", "list", "--shards", ",".join(endpoints)]).stdout
    for e in endpoints:
        assert f"shard {e}" in table, table
    for fp in by_seed.values():
        assert table.count(fp) == 2, table

    # Export cannot guess: the error lists both models and both ways out.
    ambiguous = run_fail([colonnade(), "export", "--shards", ",".join(endpoints), "--vocab", vocab,
                          "--output", tmp_path / "x.h5"])
    for fp in by_seed.values():
        assert fp in ambiguous.stderr, ambiguous.describe()
    assert f"{words} words" in ambiguous.stderr and "dim 16" in ambiguous.stderr, ambiguous.describe()
    assert "init seed 1" in ambiguous.stderr and "init seed 2" in ambiguous.stderr, ambiguous.describe()
    assert "--fingerprint" in ambiguous.stderr, ambiguous.describe()
    assert "colonnade models drop" in ambiguous.stderr, ambiguous.describe()

    # Drop seed 1's model everywhere: the command says where it was.
    dropped = run([colonnade(), "models", "drop", "--shards", ",".join(endpoints), "--fingerprint", by_seed[1]])
    assert by_seed[1] in dropped.stdout and all(e in dropped.stdout for e in endpoints), dropped.describe()
    after = _list(endpoints)
    for shard in after["shards"]:
        assert [m["fingerprint"] for m in shard["models"]] == [by_seed[2]], after

    # One model left: export needs no --fingerprint any more.
    out = tmp_path / "m.h5"
    run([colonnade(), "export", "--shards", ",".join(endpoints), "--vocab", vocab, "--output", out])
    with h5py.File(out, "r") as f:
        assert str(f.attrs["model_fingerprint"]) == by_seed[2]
        assert int(f.attrs["init_seed"]) == 2


def test_models_drop_refuses_an_unknown_fingerprint(corpus_100k, shard_launcher, tmp_path):
    endpoints = shard_launcher.start(2)
    vocab = tmp_path / "vocab.tsv"
    _train_on(endpoints, corpus_100k, vocab, 1)
    (held,) = {m["fingerprint"] for s in _list(endpoints)["shards"] for m in s["models"]}
    unknown = "0123456789abcdef" if held != "0123456789abcdef" else "fedcba9876543210"

    res = run_fail([colonnade(), "models", "drop", "--shards", ",".join(endpoints), "--fingerprint", unknown])
    assert unknown in res.stderr and "no shard holds" in res.stderr, res.describe()
    assert held in res.stderr, "the error should list what the shards do hold\n" + res.describe()
    res = run_fail([colonnade(), "models", "drop", "--shards", ",".join(endpoints), "--fingerprint", "not-hex"])
    assert "--fingerprint" in res.stderr and "not-hex" in res.stderr, res.describe()
    # Nothing was dropped.
    assert all(len(s["models"]) == 1 for s in _list(endpoints)["shards"])


def test_models_list_names_an_unreachable_shard(shard_launcher):
    (alive,) = shard_launcher.start(1)
    dead = f"127.0.0.1:{closed_port()}"
    res = run_fail([colonnade(), "models", "list", "--shards", f"{alive},{dead}"])
    assert dead in res.stderr, res.describe()
    listing = json.loads(run([colonnade(), "models", "list", "--shards", alive, "--json"]).stdout)
    assert listing["shards"][0]["models"] == []


# ---------------------------------------------------------------- eval and similar


@pytest.fixture
def tiny_vectors(tmp_path):
    """word2vec text vectors whose neighbours are all far apart (cosine < 0.65)."""
    path = tmp_path / "tiny.txt"
    path.write_text("4 3\nalpha 1 0 0\nbeta 0.5 1 0\ngamma 0 0.2 1\ndelta -1 0.3 0.2\n", encoding="utf-8")
    return path


def test_eval_similarity_file_that_does_not_parse_is_an_error(tiny_vectors, tmp_path):
    # MEN-style: space-separated, which gensim and we would read as 0 pairs.
    spaced = tmp_path / "men.txt"
    spaced.write_text("# word1 word2 score\nalpha beta 5.0\nbeta gamma 2.0\n", encoding="utf-8")
    res = run_fail([colonnade(), "eval", "--vectors", tiny_vectors, "--similarity", spaced])
    assert f"{spaced}:2" in res.stderr, res.describe()
    assert "alpha beta 5.0" in res.stderr, res.describe()
    assert "word1<TAB>word2<TAB>score" in res.stderr, res.describe()

    # Pairs skipped because their words are unknown are fine, as before.
    oov = tmp_path / "oov.tsv"
    oov.write_text("alpha\tbeta\t5\nzzz\tyyy\t1\nbeta\tgamma\t2\ndelta\talpha\t0.5\n", encoding="utf-8")
    report = json.loads(run([colonnade(), "eval", "--vectors", tiny_vectors, "--similarity", oov, "--json"]).stdout)
    sim = report["similarity"][0]
    assert (sim["pairs"], sim["skipped"]) == (4, 1)


def test_eval_analogy_file_that_does_not_parse_is_an_error(tiny_vectors, tmp_path):
    commas = tmp_path / "questions.csv"
    commas.write_text(": capital\nalpha,beta,gamma,delta\nbeta,alpha,delta,gamma\n", encoding="utf-8")
    res = run_fail([colonnade(), "eval", "--vectors", tiny_vectors, "--analogies", commas])
    assert f"{commas}:2" in res.stderr and "alpha,beta,gamma,delta" in res.stderr, res.describe()
    assert "`: section`" in res.stderr and "a b c d" in res.stderr, res.describe()


def test_similar_prints_the_k_nearest_by_default_and_says_when_a_threshold_empties_a_list(tiny_vectors):
    res = run([colonnade(), "similar", "--vectors", tiny_vectors, "--k", 2, "alpha"])
    rows = [line.split("\t") for line in res.stdout.splitlines()[1:]]
    assert [r[:3] for r in rows] == [["alpha", "1", "beta"], ["alpha", "2", "gamma"]], res.describe()
    assert float(rows[0][3]) < 0.65

    res = run([colonnade(), "similar", "--vectors", tiny_vectors, "--min-cosine", 0.9, "alpha", "beta"])
    assert res.stdout.splitlines() == ["word\trank\tneighbour\tcosine"], res.describe()
    for w in ("alpha", "beta"):
        assert any(line.startswith(f"{w}:") and "--min-cosine" in line for line in res.stderr.splitlines()), \
            res.describe()


# ---------------------------------------------------------------- corpus formats


def test_zstd_and_bzip2_corpora_read_like_the_plain_file(corpus_100k, tmp_path):
    plain = corpus_100k.read_bytes()
    expected_vocab = tmp_path / "plain.tsv"
    run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", 3, "--output", expected_vocab])
    half = len(plain) // 2
    cut = plain.index(b"\n", half) + 1
    zst = tmp_path / "corpus.zst"
    # Two frames back to back, as `cat a.zst b.zst` makes.
    cctx = zstandard.ZstdCompressor(level=3)
    zst.write_bytes(cctx.compress(plain[:cut]) + cctx.compress(plain[cut:]))
    bz = tmp_path / "corpus.bz2"
    bz.write_bytes(bz2.compress(plain[:cut]) + bz2.compress(plain[cut:]))
    for path in (zst, bz):
        out = tmp_path / (path.name + ".tsv")
        run([colonnade(), "vocab", "--corpus", path, "--min-count", 3, "--output", out])
        assert read_vocab_file(out) == read_vocab_file(expected_vocab), path
    summary = tmp_path / "summary.json"
    run(train_args(zst, embedded_shards=2, size=8, summary=summary, output_binary=tmp_path / "v.bin"))
    assert json.loads(summary.read_text())["tokens"] == corpus_tokens(corpus_100k)


def _zip(text: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("corpus.txt", text)
    return buf.getvalue()


def _tar_gz(text: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo("corpus.txt")
        info.size = len(text)
        t.addfile(info, io.BytesIO(text))
    return buf.getvalue()


@pytest.mark.parametrize(
    "name,make,format",
    [
        ("corpus.zip", _zip, "zip archive"),
        ("corpus.tar.gz", _tar_gz, "tar archive"),
        ("corpus.7z", lambda t: b"7z\xbc\xaf\x27\x1c\x00\x04" + lzma.compress(t), "7z archive"),
        ("corpus.lz4", lambda t: b"\x04\x22\x4d\x18\x64\x40\xa7" + t, "lz4"),
    ],
)
def test_unreadable_corpus_formats_are_named(tmp_path, name, make, format):
    corpus = tmp_path / name
    corpus.write_bytes(make(b"the words of a corpus\n" * 200))
    out = tmp_path / "v.tsv"
    res = run_fail([colonnade(), "vocab", "--corpus", corpus, "--min-count", 1, "--output", out])
    assert str(corpus) in res.stderr and format in res.stderr and "not supported" in res.stderr, res.describe()
    assert "invalid UTF-8" not in res.stderr, res.describe()
    assert not out.exists()


# ---------------------------------------------------------------- invalid UTF-8


GOOD = b"alpha beta gamma delta\n"


def _corpus_with_bad_lines(tmp_path):
    """30 good lines; lines 11 and 22 hold invalid UTF-8 and words found nowhere else."""
    lines = [GOOD] * 30
    lines[10] = b"alpha onlybad1 \xff beta\n"
    lines[21] = b"gamma \xc3\x28 onlybad2 delta\n"
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(b"".join(lines))
    return corpus


def test_vocab_skips_sentences_with_invalid_utf8_by_default(tmp_path):
    corpus = _corpus_with_bad_lines(tmp_path)
    out = tmp_path / "v.tsv"
    res = run([colonnade(), "vocab", "--corpus", corpus, "--min-count", 1, "--output", out])
    assert dict(read_vocab_file(out)) == {"alpha": 28, "beta": 28, "gamma": 28, "delta": 28}, res.describe()
    # The first ones are named (file, line, byte offset); the count is reported.
    offset = 10 * len(GOOD) + len(b"alpha onlybad1 ")
    assert f"{corpus}: invalid UTF-8 at line 11, byte offset {offset}" in res.stderr, res.describe()
    assert "line 22" in res.stderr, res.describe()
    assert "skipped 2 sentence" in res.stderr, res.describe()


def test_train_skips_the_same_sentences_it_did_not_count(tmp_path):
    corpus = _corpus_with_bad_lines(tmp_path)
    vocab, summary = tmp_path / "vocab.tsv", tmp_path / "summary.json"
    res = run(train_args(corpus, embedded_shards=2, size=4, min_count=1, iter=2, sample=0,
                         save_vocab=vocab, summary=summary, output=tmp_path / "m.h5"))
    assert {w for w, _ in read_vocab_file(vocab)} == {"alpha", "beta", "gamma", "delta"}
    s = json.loads(summary.read_text())
    assert s["invalid_utf8_sentences_skipped"] == 2, s
    # Neither bad sentence is trained: 28 good lines of 4 words, in each of 2 epochs.
    assert s["tokens"] == 2 * 28 * 4, s
    assert "skipped 2 sentence" in res.stderr, res.describe()

    # With a given vocabulary the training reader applies the policy alone.
    summary2 = tmp_path / "summary2.json"
    run(train_args(corpus, vocab=vocab, embedded_shards=1, size=4, min_count=1, sample=0, summary=summary2,
                   output_binary=tmp_path / "v.bin"))
    s2 = json.loads(summary2.read_text())
    assert (s2["invalid_utf8_sentences_skipped"], s2["tokens"]) == (2, 28 * 4), s2


def test_invalid_utf8_abort_keeps_the_error_by_flag_and_by_env(tmp_path):
    corpus = _corpus_with_bad_lines(tmp_path)
    out = tmp_path / "v.tsv"
    res = run_fail([colonnade(), "vocab", "--corpus", corpus, "--min-count", 1, "--output", out,
                    "--invalid-utf8", "abort"])
    assert f"{corpus}: invalid UTF-8 at line 11" in res.stderr, res.describe()
    assert not out.exists()
    env = clean_env()
    env["COLONNADE_INVALID_UTF8"] = "abort"
    proc = subprocess.run(
        [str(colonnade()), "vocab", "--corpus", str(corpus), "--min-count", "1", "--output", str(out)],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
    )
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0 and "invalid UTF-8 at line 11" in stderr, stderr
    assert not out.exists()
