"""Bad input: a non-zero exit, no panic, no output file, and stderr that names
the thing that is wrong."""

from __future__ import annotations

import lzma
import subprocess
import time

import pytest

from conftest import ANSI, clean_env, closed_port, colonnade, read_vocab_file, run, run_fail, train_args


def test_missing_corpus_file_is_named(tmp_path):
    missing = tmp_path / "no-such-dir" / "corpus.txt"
    out = tmp_path / "m.h5"
    res = run_fail(train_args(missing, embedded_shards=2, output=out))
    assert str(missing) in res.stderr, res.describe()
    assert not out.exists()


def test_missing_second_corpus_file_is_named(tmp_path, small_corpus):
    missing = tmp_path / "part2.txt"
    res = run_fail(train_args([small_corpus, missing], embedded_shards=2, output=tmp_path / "m.h5"))
    assert str(missing) in res.stderr, res.describe()


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "xz"])
def test_invalid_utf8_names_file_and_line(tmp_path, compress):
    data = b"good words here and more good words\n" * 10 + b"this line has a bad \xff byte\n" + b"good words\n" * 10
    corpus = tmp_path / ("bad.txt.xz" if compress else "bad.txt")
    corpus.write_bytes(lzma.compress(data) if compress else data)
    out = tmp_path / "m.h5"
    res = run_fail(train_args(corpus, embedded_shards=2, min_count=1, output=out, invalid_utf8="abort"))
    assert str(corpus) in res.stderr, res.describe()
    assert "invalid UTF-8" in res.stderr, res.describe()
    assert "line 11" in res.stderr, res.describe()
    assert not out.exists()


def test_invalid_utf8_found_while_training_with_a_given_vocab(tmp_path):
    # With --vocab the corpus is first read by the training pass, not the counter.
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(b"alpha beta\nbeta alpha\nalpha \xff beta\n")
    vocab = tmp_path / "vocab.tsv"
    vocab.write_text("alpha\t3\nbeta\t3\n")
    out = tmp_path / "m.h5"
    res = run_fail(train_args(corpus, vocab=vocab, embedded_shards=1, size=4, output=out, invalid_utf8="abort"))
    assert str(corpus) in res.stderr and "invalid UTF-8" in res.stderr and "line 3" in res.stderr, res.describe()
    assert not out.exists()


def test_invalid_utf8_in_vocab_subcommand(tmp_path):
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(b"ok ok ok\n\xc3\x28 ok\n")
    res = run_fail([colonnade(), "vocab", "--corpus", corpus, "--min-count", 1, "--output", tmp_path / "v.tsv",
                    "--invalid-utf8", "abort"])
    assert str(corpus) in res.stderr and "invalid UTF-8" in res.stderr, res.describe()


def test_empty_corpus_reports_empty_vocabulary(tmp_path):
    corpus = tmp_path / "empty.txt"
    corpus.write_bytes(b"")
    out = tmp_path / "m.h5"
    res = run_fail(train_args(corpus, embedded_shards=2, output=out))
    err = res.stderr.lower()
    assert "vocabulary" in err and "empty" in err, res.describe()
    assert not out.exists()


def test_corpus_below_min_count_reports_empty_vocabulary(tmp_path):
    corpus = tmp_path / "rare.txt"
    corpus.write_text("each word here is seen once only\n")
    res = run_fail(train_args(corpus, embedded_shards=2, min_count=5, output=tmp_path / "m.h5"))
    err = res.stderr.lower()
    assert "vocabulary" in err and "empty" in err and "min-count 5" in err, res.describe()


def test_unreachable_shard_names_endpoint(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha beta gamma delta\n" * 20)
    endpoint = f"127.0.0.1:{closed_port()}"
    out = tmp_path / "m.h5"
    res = run_fail(
        train_args(corpus, shards=endpoint, min_count=1, size=8, connect_timeout_secs=1, output=out),
        timeout=60,
    )
    assert endpoint in res.stderr, res.describe()
    assert "not reachable" in res.stderr, res.describe()
    assert res.seconds < 30, f"gave up only after {res.seconds:.1f} s with --connect-timeout-secs 1"
    assert not out.exists()


def test_export_with_a_different_vocabulary_is_refused(corpus_100k, shard_launcher, tmp_path):
    endpoints = shard_launcher.start(2)
    vocab = tmp_path / "vocab.tsv"
    run(
        train_args(
            corpus_100k,
            shards=",".join(endpoints),
            size=8,
            save_vocab=vocab,
            connect_timeout_secs=20,
        )
    )
    # Same words, one count changed: same size, different fingerprint.
    entries = read_vocab_file(vocab)
    entries[-1] = (entries[-1][0], entries[-1][1] + 1)
    other = tmp_path / "other-vocab.tsv"
    other.write_text("".join(f"{w}\t{c}\n" for w, c in entries), encoding="utf-8")
    out = tmp_path / "x.h5"
    res = run_fail([colonnade(), "export", "--shards", ",".join(endpoints), "--vocab", other, "--output", out])
    assert str(other) in res.stderr, res.describe()
    assert "fingerprint" in res.stderr, res.describe()
    assert not out.exists(), "a refused export must not leave an output file"

    # Fewer words: also refused, naming the file.
    short = tmp_path / "short-vocab.tsv"
    short.write_text("".join(f"{w}\t{c}\n" for w, c in read_vocab_file(vocab)[:-5]), encoding="utf-8")
    res = run_fail([colonnade(), "export", "--shards", ",".join(endpoints), "--vocab", short, "--output", out])
    assert str(short) in res.stderr, res.describe()
    assert shard_launcher.alive() == endpoints


def test_export_from_empty_shards_says_no_model(shard_launcher, tmp_path):
    endpoints = shard_launcher.start(1)
    vocab = tmp_path / "vocab.tsv"
    vocab.write_text("a\t5\nb\t3\n")
    res = run_fail([colonnade(), "export", "--shards", endpoints[0], "--vocab", vocab, "--output", tmp_path / "x.h5"])
    assert endpoints[0] in res.stderr and "no model" in res.stderr, res.describe()


def test_size_smaller_than_shard_count_is_refused(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha beta gamma delta\n" * 20)
    res = run_fail(train_args(corpus, embedded_shards=4, size=3, min_count=1, output=tmp_path / "m.h5"))
    assert "--size" in res.stderr, res.describe()


def test_a_shard_listed_twice_is_refused_before_anything_is_created(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha beta gamma delta\n" * 20)
    # Nothing listens there: the refusal comes before any connection.
    endpoint = f"127.0.0.1:{closed_port()}"
    res = run_fail(train_args(corpus, shards=f"{endpoint},http://{endpoint}/", min_count=1, size=8,
                              connect_timeout_secs=1, output=tmp_path / "m.h5"), timeout=60)
    assert f"lists http://{endpoint}/ twice (shards 0 and 1)" in res.stderr, res.describe()
    assert "not reachable" not in res.stderr, res.describe()


def test_settings_asking_too_much_of_a_shard_per_call_are_refused_before_training(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha beta gamma delta\n" * 20)
    endpoint = f"127.0.0.1:{closed_port()}"
    res = run_fail(train_args(corpus, shards=endpoint, min_count=1, size=8, window=10, negative=25,
                              minibatch=4096, minibatches_per_call=64, connect_timeout_secs=1,
                              output=tmp_path / "m.h5"), timeout=60)
    assert "dot products per call" in res.stderr and "--minibatches-per-call" in res.stderr, res.describe()
    res = run_fail(train_args(corpus, embedded_shards=1, min_count=1, size=8, alpha=500,
                              output=tmp_path / "m.h5"), timeout=60)
    assert "--alpha must be a positive number up to 100" in res.stderr, res.describe()


def test_shard_dying_during_training_fails_the_run_naming_it(corpus_100k, shard_launcher, tmp_path):
    endpoints = shard_launcher.start(2)
    out = tmp_path / "m.h5"
    # 300 epochs of 100K words: far longer than the 1.5 s before the shard is killed.
    # The client retries a lost shard (it may come back) for --retry-timeout,
    # then fails naming it.
    args = [str(a) for a in train_args(corpus_100k, shards=",".join(endpoints), size=8, iter=300,
                                        output=out, connect_timeout_secs=5, retry_timeout=3)]
    proc = subprocess.Popen(args, env=clean_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, "training ended before the shard was killed"
        victim = shard_launcher.shards[1]
        victim.proc.kill()
        victim.proc.wait(timeout=10)
        killed_at = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        waited = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = ANSI.sub("", stderr.decode("utf-8", "replace"))
    assert proc.returncode not in (0, None), stderr[:4000]
    assert "panicked" not in stderr, stderr[:4000]
    assert endpoints[1] in stderr, stderr[:4000]
    assert waited < 30, f"the client noticed the dead shard only after {waited:.1f} s"
    assert not out.exists()


def test_log_format_json_writes_one_json_object_per_line(tmp_path):
    import json
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha beta gamma delta\n" * 20)
    res = run([str(colonnade()), "vocab", "--corpus", str(corpus), "--min-count", "1",
               "--output", str(tmp_path / "v.tsv"), "--log-format", "json"], timeout=60)
    assert res.returncode == 0, res.describe()
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert lines, res.describe()
    events = [json.loads(l) for l in lines]
    assert all({"timestamp", "level", "fields"} <= e.keys() for e in events), events
    assert any(e["level"] == "INFO" for e in events), events
