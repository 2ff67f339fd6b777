"""Runs not lost at their last step (issue 45, items 7 and 8, client side).

Each test reproduces one way a finished run used to lose its result or say
the wrong cause, with the real binaries: a final checkpoint a shard cannot
take, a control byte in a corpus word, an output that cannot be written
whole (a file size limit stands in for a full disk: `ulimit -f`, no root
needed), a hung shard, an export refused for the shard's stream limit.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

import h5py
import pytest

from protowire import varint
from conftest import ANSI, binary, clean_env, colonnade, free_port, run, run_fail, train_args
from test_fault_tolerance import PersistentShard, Proc, checkpoints_taken, wait_for


def leftovers(directory: Path) -> list[str]:
    """Temporary files a write left behind."""
    return [p.name for p in directory.iterdir() if "colonnade-tmp" in p.name or p.name.endswith(".tmp")]


# --- 7b: control characters in words ------------------------------------------------------------


def test_a_nul_byte_in_a_corpus_word_is_refused_when_the_vocabulary_is_built(tmp_path):
    corpus = tmp_path / "nul.txt"
    lines = ["the cat sat on the mat"] * 20 + ["the d\x00g sat"] * 5 + ["a cat and the mat"] * 20
    corpus.write_bytes(("\n".join(lines) + "\n").encode())
    vocab = tmp_path / "vocab.tsv"
    res = run_fail([colonnade(), "vocab", "--corpus", corpus, "--min-count", 1, "--output", vocab])
    assert f"{corpus}:21" in res.stderr, res.describe()
    assert "U+0000" in res.stderr and "NUL" in res.stderr, res.describe()
    assert not vocab.exists() and leftovers(tmp_path) == [], os.listdir(tmp_path)
    # Training counts the corpus itself: refused before training, no output.
    out = tmp_path / "m.h5"
    start = time.monotonic()
    res = run_fail(train_args(corpus, min_count=1, output=out))
    assert f"{corpus}:21" in res.stderr and "U+0000" in res.stderr, res.describe()
    assert "training done" not in res.stderr and "trained " not in res.stderr, res.describe()
    assert time.monotonic() - start < 30
    assert not out.exists() and leftovers(tmp_path) == [], os.listdir(tmp_path)


def test_a_vocabulary_file_with_a_control_character_is_refused_naming_its_line(tmp_path, corpus_100k):
    vocab = tmp_path / "vocab.tsv"
    vocab.write_bytes(b"the\t10\nof\t5\nbad\x01word\t3\nand\t2\n")
    res = run_fail(train_args(corpus_100k, vocab=vocab, output=tmp_path / "m.h5"))
    assert f"{vocab}:3" in res.stderr and "U+0001" in res.stderr, res.describe()
    assert not (tmp_path / "m.h5").exists()


# --- 7c: outputs written whole or not at all -----------------------------------------------------


def run_limited(args: list, file_limit: int, timeout: float = 180) -> subprocess.CompletedProcess:
    """Runs `args` with a file size limit (RLIMIT_FSIZE), as a full disk would stop a write;
    SIGXFSZ ignored so that the write fails with EFBIG instead of killing the process."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    proc = subprocess.run([str(a) for a in args], env=clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout, preexec_fn=limit)
    proc.stderr = ANSI.sub("", proc.stderr.decode("utf-8", "replace"))
    return proc


def test_an_output_that_fills_up_mid_write_leaves_no_partial_file(tmp_path, corpus_100k):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    text = out_dir / "vectors.txt"
    # The text file takes ~10 bytes a value: more than 1 MB, though the least it could take
    # (2 bytes a value) fits, so it fails while it is written, after training.
    args = train_args(corpus_100k, size=50, output_text=text)
    proc = run_limited(args, file_limit=1_000_000)
    assert proc.returncode != 0, proc.stderr
    assert "vectors.txt" in proc.stderr, proc.stderr
    assert not text.exists(), f"a partial {text.name} of {text.stat().st_size} bytes was left"
    assert leftovers(out_dir) == [], os.listdir(out_dir)


def test_an_output_larger_than_the_file_size_limit_is_refused_before_training(tmp_path, corpus_100k):
    h5 = tmp_path / "model.h5"
    proc = run_limited(train_args(corpus_100k, size=50, output=h5), file_limit=200_000)
    assert proc.returncode != 0, proc.stderr
    assert "--output" in proc.stderr and "file size limit" in proc.stderr, proc.stderr
    assert "trained " not in proc.stderr, "refused only after training:\n" + proc.stderr
    assert not h5.exists() and leftovers(tmp_path) == [], os.listdir(tmp_path)


def test_an_unwritable_output_directory_is_refused_before_training(tmp_path, corpus_100k):
    # A path whose parent is a file: nothing can be created under it.
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    res = run_fail(train_args(corpus_100k, output=blocker / "m.h5"))
    assert "--output" in res.stderr and "blocker" in res.stderr, res.describe()
    assert "trained " not in res.stderr


# --- 7a: the final checkpoint's failure costs no output ------------------------------------------


def test_a_final_checkpoint_the_shard_cannot_take_still_writes_the_outputs(tmp_path, small_corpus):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", small_corpus, "--min-count", 3, "--output", vocab])
    shard = PersistentShard(tmp_path, "shard", tmp_path / "data")
    shard.start()
    out = tmp_path / "m.h5"
    retry = 40
    client = Proc(
        train_args(small_corpus, shards=shard.endpoint, vocab=vocab, output=out, iter=16, threads=1, in_flight=1,
                   checkpoint_interval=1, retry_timeout=retry),
        tmp_path / "client.log",
    )
    try:
        wait_for(lambda: checkpoints_taken(shard) >= 1, 120, "a checkpoint", client.text)
        assert client.proc.poll() is None, "training ended before the restart\n" + client.text()
        # Restarted without --data-dir: it keeps no checkpoints any more; training recovers on it.
        shard.kill9()
        shard.data_dir = None
        shard.start()
        restarted = time.monotonic()
        code = client.wait(300)
        after = time.monotonic() - restarted
    finally:
        client.stop()
        if shard.proc:
            shard.proc.stop()
    log = client.text()
    # The outputs asked for are written and asking again cannot mend it: a warning, exit 0.
    assert code == 0, log
    assert "warning: the final checkpoint could not be taken" in log, log[-4000:]
    assert "final checkpoint" in log and "--data-dir" in log and "outputs were written" in log, log[-4000:]
    assert after < retry, f"the final checkpoint was retried for {after:.0f}s:\n{log[-3000:]}"
    with h5py.File(out, "r") as f:
        assert f["vectors"].shape[0] == len(vocab.read_text().splitlines()) - 1


# --- 8: export retries a shard's stream limit; messages name the real cause --------------------


def pull_rows_request(fingerprint: int, rows: int) -> bytes:
    """A PullRowsRequest (proto/colonnade/v1/shard.proto), encoded by hand."""
    return b"\x08" + varint(fingerprint) + b"\x10" + varint(1) + b"\x18" + varint(0) + b"\x20" + varint(rows)


def test_export_retries_while_the_shard_has_too_many_streams_open(tmp_path, corpus_100k, shard_launcher):
    grpc = pytest.importorskip("grpc")
    (endpoint,) = shard_launcher.start(1)
    vocab = tmp_path / "vocab.tsv"
    # ~40 MB of vectors: 10 row blocks, more than an unread stream buffers, so each holds
    # its permit.
    run(train_args(corpus_100k, shards=endpoint, save_vocab=vocab, size=1000, min_count=1))
    listing = json.loads(run([colonnade(), "models", "list", "--shards", endpoint, "--json"]).stdout)
    fingerprint = int(listing["shards"][0]["models"][0]["fingerprint"], 16)
    rows = len(vocab.read_text().splitlines()) - 1
    channel = grpc.insecure_channel(endpoint)
    pull = channel.unary_stream("/colonnade.v1.Shard/PullRows", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    # Streams opened and never read hold the shard's stream permits.
    streams = [pull(pull_rows_request(fingerprint, rows)) for _ in range(16)]
    for s in streams:
        next(s)  # the first block: the stream is open and holds its permit
    release = threading.Timer(3.0, lambda: [s.cancel() for s in streams])
    release.start()
    try:
        res = run([colonnade(), "export", "--shards", endpoint, "--vocab", vocab, "--output", tmp_path / "m.h5"],
                  expect_ok=False)
    finally:
        release.cancel()
        for s in streams:
            s.cancel()
        channel.close()
    assert res.returncode == 0, res.describe()
    assert (tmp_path / "m.h5").exists()


def test_a_hung_shard_is_not_called_a_tls_mismatch(tmp_path, shard_launcher):
    (endpoint,) = shard_launcher.start(1)
    shard = shard_launcher.shards[0]
    shard.proc.send_signal(signal.SIGSTOP)
    try:
        res = run_fail([colonnade(), "models", "list", "--shards", endpoint], timeout=90)
    finally:
        shard.proc.send_signal(signal.SIGCONT)
    assert endpoint in res.stderr, res.describe()
    assert "TLS" not in res.stderr, res.describe()
    assert "did not answer" in res.stderr, res.describe()


# --- 8: workers started with different --num-workers are told at start --------------------------


def test_a_worker_started_with_another_num_workers_is_refused_at_start(tmp_path, corpus_100k, shard_launcher):
    endpoints = shard_launcher.start(2)
    shards = ",".join(endpoints)
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", 3, "--output", vocab])
    common = dict(shards=shards, vocab=vocab, min_count=None)
    # Worker 0 of 2 trains its part: the shards record the model's count.
    run(train_args(corpus_100k, num_workers=2, worker_index=0, **common))
    # A second worker started with --num-workers 3 used to train its whole part and fail
    # only at a checkpoint barrier or at the end; now it is refused before training.
    start = time.monotonic()
    res = run_fail(train_args(corpus_100k, num_workers=3, worker_index=1, iter=20,
                              output=tmp_path / "m3.h5", **common))
    assert time.monotonic() - start < 60, res.describe()
    assert "--num-workers 2" in res.stderr and "--num-workers 3" in res.stderr, res.describe()
    assert any(e in res.stderr for e in endpoints), res.describe()
    assert "training done" not in res.stderr and "words/s" not in res.stderr, res.describe()
    assert not (tmp_path / "m3.h5").exists()
    # The right count is accepted and trains.
    run(train_args(corpus_100k, num_workers=2, worker_index=1, output=tmp_path / "m2.h5", **common))
    assert (tmp_path / "m2.h5").exists()
    # --restart starts the state afresh for the restarting worker's count.
    run(train_args(corpus_100k, num_workers=3, worker_index=0, restart=True, **common))
    res = run_fail(train_args(corpus_100k, num_workers=2, worker_index=1, **common))
    assert "--num-workers 3" in res.stderr and "--num-workers 2" in res.stderr, res.describe()
