"""Large-vocabulary preprocessing: `colonnade vocab` with a memory budget
(spilled, merged counts) and `colonnade encode` (word-id parts that
`train --encoded` reads instead of text).

Counts are checked against an independent Python count; the encoded corpus
must train bit for bit as the text it came from (one pipeline); workers of an
encoded corpus each read only their own parts; damage and mismatches are named.
"""

from __future__ import annotations

import json
import subprocess

import h5py
import numpy as np
import pytest

from conftest import clean_env, closed_port, colonnade, count_words, read_vocab_file, run, run_fail, train_args, vocab_header_fingerprint

# One pipeline, one compute thread: training is then a pure function of its input.
ONE_PIPELINE = dict(threads=1, size=16, iter=2, seed=3, output_vectors=True)


def make_vocab(corpus, out, *extra):
    return run([colonnade(), "vocab", "--corpus", corpus, "--min-count", 2, "--output", out, *extra])


def encode(corpus, vocab, out, parts):
    return run([colonnade(), "encode", "--corpus", corpus, "--vocab", vocab, "--output", out, "--parts", parts])


def matrices(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in ("vectors", "output_vectors")}, list(f["words"].asstr()[()])


def test_spilled_counting_is_exact_and_keeps_order_and_fingerprint(small_corpus, tmp_path):
    plain, spilled = tmp_path / "plain.tsv", tmp_path / "spilled.tsv"
    make_vocab(small_corpus, plain)
    res = make_vocab(small_corpus, spilled, "--memory-budget", "256K", "--spill-dir", tmp_path, "--threads", 2)
    spills = [int(t.split("=")[1]) for t in res.stderr.split() if t.startswith("spills=")]
    assert spills and spills[-1] > 10, f"a 256 KiB budget should have spilled runs\n{res.describe()}"
    assert read_vocab_file(spilled) == count_words(small_corpus, 2)
    assert spilled.read_bytes() == plain.read_bytes()
    assert vocab_header_fingerprint(spilled) == vocab_header_fingerprint(plain)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()], "spill directory left behind"


def test_encoded_corpus_trains_exactly_as_its_text(small_corpus, tmp_path):
    vocab, enc = tmp_path / "vocab.tsv", tmp_path / "enc"
    make_vocab(small_corpus, vocab)
    encode(small_corpus, vocab, enc, 4)
    manifest = json.loads((enc / "manifest.json").read_text())
    assert len(manifest["parts"]) == 4, manifest
    counted = sum(c for _, c in read_vocab_file(vocab))
    assert manifest["words"] == counted == sum(p["words"] for p in manifest["parts"])
    raw = sum(p.stat().st_size for p in enc.glob("part-*.ids"))
    assert raw < small_corpus.stat().st_size / 2, "ids should take far less than the text"

    text_h5, enc_h5 = tmp_path / "text.h5", tmp_path / "enc.h5"
    common = dict(vocab=vocab, embedded_shards=2, **ONE_PIPELINE)
    run(train_args(small_corpus, output=text_h5, **common))
    args = train_args(small_corpus, output=enc_h5, **common)
    i = args.index("--corpus")
    args[i : i + 2] = ["--encoded", str(enc)]
    run(args)
    (a, wa), (b, wb) = matrices(text_h5), matrices(enc_h5)
    assert wa == wb
    for k in a:
        assert np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)), f"{k} differs"


def encoded_args(enc, vocab, **flags):
    args = train_args("-", vocab=vocab, **flags)
    i = args.index("--corpus")
    args[i : i + 2] = ["--encoded", str(enc)]
    return args


def test_workers_read_only_their_own_parts(small_corpus, shard_launcher, tmp_path):
    vocab, enc = tmp_path / "vocab.tsv", tmp_path / "enc"
    make_vocab(small_corpus, vocab)
    encode(small_corpus, vocab, enc, 5)
    parts = json.loads((enc / "manifest.json").read_text())["parts"]
    endpoints = ",".join(shard_launcher.start(2))
    procs = []
    for i in range(2):
        args = encoded_args(enc, vocab, shards=endpoints, num_workers=2, worker_index=i, iter=1, size=16,
                            summary=tmp_path / f"w{i}.json")
        log = open(tmp_path / f"w{i}.log", "wb")  # noqa: SIM115
        procs.append((subprocess.Popen(args, env=clean_env(), stdout=log, stderr=subprocess.STDOUT), log))
    for i, (p, log) in enumerate(procs):
        code = p.wait(180)
        log.close()
        assert code == 0, (tmp_path / f"w{i}.log").read_text()
    for i in range(2):
        s = json.loads((tmp_path / f"w{i}.json").read_text())
        mine = parts[i::2]
        assert s["words"] == sum(p["words"] for p in mine), (i, s, mine)
        assert s["tokens"] == sum(p["tokens"] for p in mine)
        assert s["progress_reached"] == pytest.approx(1.0)


def test_encoded_mismatch_and_damage_are_named(small_corpus, tmp_path):
    vocab, other, enc = tmp_path / "vocab.tsv", tmp_path / "other.tsv", tmp_path / "enc"
    make_vocab(small_corpus, vocab)
    run([colonnade(), "vocab", "--corpus", small_corpus, "--min-count", 3, "--output", other])
    encode(small_corpus, vocab, enc, 3)
    out = dict(embedded_shards=1, output=tmp_path / "o.h5", size=8)

    res = run_fail(encoded_args(enc, other, **out))
    assert "manifest.json" in res.stderr and "encoded with vocabulary" in res.stderr, res.describe()

    unused = f"127.0.0.1:{closed_port()}"
    res = run_fail(encoded_args(enc, vocab, num_workers=4, worker_index=0, shards=unused))
    assert "3 part(s) for --num-workers 4" in res.stderr, res.describe()

    res = run_fail([colonnade(), "encode", "--corpus", small_corpus, "--vocab", vocab, "--output", enc])
    assert "already holds an encoded corpus" in res.stderr, res.describe()

    part = enc / "part-00001.ids"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x55
    part.write_bytes(bytes(data))
    res = run_fail(encoded_args(enc, vocab, **out))
    assert "part-00001.ids" in res.stderr, res.describe()
    assert not (tmp_path / "o.h5").exists(), "a damaged corpus must not leave an output behind"
