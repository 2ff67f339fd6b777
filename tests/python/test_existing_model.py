"""One rule for a model the shards already hold (issue 46): a checkpoint's
run resumes only with its own corpus and --iter; a finished model is left as
it is (another corpus or --iter is refused, the same run has nothing to
train and says so); a model trained on shards without checkpoints is not
trained again from the start of its schedule; a resumed run reports its own
words. Real ps-shard processes with data dirs."""

from __future__ import annotations

import json
import re
import time

from conftest import colonnade, run, run_fail, train_args
from test_fault_tolerance import Proc, checkpoints_taken, cluster, wait_for  # noqa: F401 (fixture)


def vocab_of(corpus, tmp_path):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus, "--min-count", 3, "--output", vocab])
    return vocab


def other_corpus(corpus, tmp_path):
    """The same words in another order: another corpus for the same vocabulary."""
    lines = corpus.read_text().splitlines()
    other = tmp_path / "other.txt"
    other.write_text("\n".join(reversed(lines)) + "\n")
    return other


def test_finished_model_is_not_continued_on_another_corpus_or_iter(corpus_100k, cluster, tmp_path):
    a, b = cluster(2)
    shards = f"{a.endpoint},{b.endpoint}"
    vocab = vocab_of(corpus_100k, tmp_path)
    res = run(train_args(corpus_100k, shards=shards, vocab=vocab, iter=1))
    # No output asked: the model stays on the shards, and how to export it is said.
    assert f"colonnade export --shards {shards} --vocab {vocab}" in res.stderr, res.describe()
    other = other_corpus(corpus_100k, tmp_path)

    res = run_fail(train_args(other, shards=shards, vocab=vocab, iter=1))
    assert "trained to the end" in res.stderr and "other.txt" in res.stderr, res.describe()
    assert "--restart" in res.stderr and "words/s" not in res.stderr, res.describe()

    res = run_fail(train_args(corpus_100k, shards=shards, vocab=vocab, iter=2))
    assert "--iter 1" in res.stderr and "--iter 2" in res.stderr, res.describe()

    # The same run again: nothing to train, said so, and the model exported.
    out = tmp_path / "again.h5"
    res = run(train_args(corpus_100k, shards=shards, vocab=vocab, iter=1, output=out))
    assert "already trained to the end" in res.stderr, res.describe()
    assert "words/s" not in res.stderr and "trained 0 words" not in res.stderr, res.describe()
    assert out.stat().st_size > 0

    # --restart trains the other corpus afresh.
    res = run(train_args(other, shards=shards, vocab=vocab, iter=1, restart=True))
    assert re.search(r"trained [1-9]\d* words \(1 epoch\)", res.stderr), res.describe()


def test_resume_checks_the_corpus_and_reports_this_runs_words(small_corpus, cluster, tmp_path):
    a, b = cluster(2)
    shards = f"{a.endpoint},{b.endpoint}"
    vocab = vocab_of(small_corpus, tmp_path)
    flags = dict(shards=shards, vocab=vocab, iter=8, threads=1, in_flight=1, checkpoint_interval=1)
    client = Proc(train_args(small_corpus, **flags), tmp_path / "client.log")
    wait_for(lambda: checkpoints_taken(b) >= 1, 120, "a checkpoint", client.text)
    assert client.proc.poll() is None, "training ended before the kill\n" + client.text()
    client.proc.kill()
    client.proc.wait(timeout=10)

    res = run_fail(train_args(other_corpus(small_corpus, tmp_path), **flags))
    assert "partly trained" in res.stderr and "--restart" in res.stderr, res.describe()
    res = run_fail(train_args(small_corpus, **{**flags, "iter": 3}))
    assert "--iter 8" in res.stderr and "--iter 3" in res.stderr, res.describe()

    summary = tmp_path / "summary.json"
    res = run(train_args(small_corpus, summary=summary, **flags), timeout=300)
    s = json.loads(summary.read_text())
    assert 0 < s["resumed_tokens"] < s["tokens"], s
    m = re.search(r"trained (\d+) words \(8 epochs\) in ([\d.]+) s: (\d+) words/s; resumed from checkpoint "
                  r"version (\d+), (\d+) words in all", res.stderr)
    assert m, res.describe()
    words, seconds, rate = int(m[1]), float(m[2]), int(m[3])
    assert words == s["tokens"] - s["resumed_tokens"] and int(m[5]) == s["tokens"], (m.groups(), s)
    # The rate is this run's words over this run's time.
    assert abs(rate - words / max(s["seconds"], 1e-9)) <= 0.02 * rate + 1, (m.groups(), s)
    assert abs(seconds - s["seconds"]) < 0.1, (m.groups(), s)


def test_trained_model_without_checkpoints_is_not_retrained_from_the_start(corpus_100k, cluster, tmp_path):
    a, b = cluster(2, persistent=False)
    shards = f"{a.endpoint},{b.endpoint}"
    vocab = vocab_of(corpus_100k, tmp_path)
    run(train_args(corpus_100k, shards=shards, vocab=vocab, iter=1))
    res = run_fail(train_args(corpus_100k, shards=shards, vocab=vocab, iter=1))
    assert "already been trained" in res.stderr and "no ps-shard --data-dir" in res.stderr, res.describe()
    assert "words/s" not in res.stderr, res.describe()
    t0 = time.monotonic()
    res = run(train_args(corpus_100k, shards=shards, vocab=vocab, iter=1, restart=True))
    assert re.search(r"trained [1-9]\d* words", res.stderr), (res.describe(), time.monotonic() - t0)
