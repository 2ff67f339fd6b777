"""Surviving the loss of a process (issue 12): `ps-shard --data-dir` keeps
checkpoints, `colonnade train` reconciles and resumes. Real processes,
killed with SIGKILL (or stopped with SIGSTOP) mid-run.

With one training pipeline (--threads 1 --in-flight 1) training is
deterministic, so a run that lost a process and resumed from a checkpoint
must end with exactly the vectors of an uninterrupted run: that proves it
neither started over nor trained a minibatch twice past the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import ANSI, binary, clean_env, colonnade, free_port, run, run_fail, train_args

INTERVAL = 1  # --checkpoint-interval, seconds
DETERMINISTIC = dict(threads=1, in_flight=1)


class Proc:
    """A background process with its log file."""

    def __init__(self, args: list, log: Path):
        self.args = [str(a) for a in args]
        self.log = log
        with open(log, "ab") as f:
            self.proc = subprocess.Popen(self.args, env=clean_env(), stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return ANSI.sub("", self.log.read_text(errors="replace"))

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"{' '.join(self.args)} did not finish in {timeout}s\n{self.text()[-6000:]}", pytrace=False)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class PersistentShard:
    """A ps-shard on a fixed port with a data dir, restartable."""

    def __init__(self, workdir: Path, name: str, data_dir: Path | None):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.data_dir = data_dir
        self.log = workdir / f"{name}.log"
        self.proc: Proc | None = None

    def start(self) -> None:
        args = [binary("ps-shard"), "--listen", self.endpoint, "--threads", "1"]
        if self.data_dir is not None:
            args += ["--data-dir", self.data_dir]
        self.proc = Proc(args, self.log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.proc.poll() is None, f"ps-shard exited:\n{self.proc.text()}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"ps-shard {self.endpoint} did not start:\n{self.proc.text()}", pytrace=False)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.proc.wait(timeout=10)

    def text(self) -> str:
        return self.proc.text() if self.proc else ""


@pytest.fixture
def cluster(tmp_path):
    made: list[PersistentShard] = []

    def make(n: int, persistent: bool = True, prefix: str = "shard") -> list[PersistentShard]:
        shards = []
        for i in range(n):
            s = PersistentShard(tmp_path, f"{prefix}-{i}", tmp_path / f"{prefix}-{i}-data" if persistent else None)
            s.start()
            made.append(s)
            shards.append(s)
        return shards

    yield make
    for s in made:
        if s.proc:
            s.proc.stop()


def wait_for(pred, timeout: float, what: str, logs=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}\n{logs()}", pytrace=False)


def checkpoints_taken(shard: PersistentShard) -> int:
    return len(re.findall(r"checkpoint taken", shard.text()))


def vectors(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["vectors"][()]


def models(shards) -> list[dict]:
    out = run([colonnade(), "models", "list", "--shards", ",".join(s.endpoint for s in shards), "--json"]).stdout
    return [s["models"][0] for s in json.loads(out)["shards"]]


def reference_run(corpus, vocab, tmp_path, cluster, **flags) -> Path:
    """The same training, uninterrupted, on fresh shards without data dirs."""
    shards = cluster(2, persistent=False, prefix="ref")
    out = tmp_path / "reference.h5"
    run(train_args(corpus, shards=",".join(s.endpoint for s in shards), vocab=vocab, output=out, **flags), timeout=300)
    return out


def test_shard_killed_mid_run_resumes_to_the_uninterrupted_model(small_corpus, cluster, tmp_path):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", small_corpus, "--min-count", 3, "--output", vocab])
    # ~7M words: the kill lands well before the end on a machine several
    # times faster than this one (1.8M words ran out before 3 checkpoints).
    flags = dict(iter=24, size=24, **DETERMINISTIC)
    a, b = cluster(2)
    out, summary = tmp_path / "killed.h5", tmp_path / "summary.json"
    client = Proc(
        train_args(small_corpus, shards=f"{a.endpoint},{b.endpoint}", vocab=vocab, output=out, summary=summary,
                   checkpoint_interval=INTERVAL, **flags),
        tmp_path / "client.log",
    )
    # About half-way: a few checkpoints in.
    wait_for(lambda: checkpoints_taken(b) >= 3, 120, "3 checkpoints", client.text)
    assert client.proc.poll() is None, "training ended before the kill\n" + client.text()
    b.kill9()
    time.sleep(2)
    b.start()
    assert client.wait(300) == 0, client.text()
    assert "model loaded from the data dir" in b.text(), b.text()
    s = json.loads(summary.read_text())
    assert s["recoveries"] == 1, s
    # Retrained: at most what one checkpoint interval (plus the time to
    # notice, a job's worth of words) holds at this run's speed.
    rate = s["words"] / max(s["seconds"] - 4, 1.0)
    assert 0 < s["words_retrained"] <= rate * (INTERVAL + 1) + 20_000, s
    # The uninterrupted run with the same seed: bit for bit the same vectors.
    ref = reference_run(small_corpus, vocab, tmp_path, cluster, **flags)
    got, want = vectors(out), vectors(ref)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (
        f"resumed model differs from the uninterrupted one: max |diff| {np.abs(got - want).max()}\n{client.text()[-4000:]}"
    )
    # With no shard running, the final checkpoint exports the same model.
    for shard in (a, b):
        shard.proc.stop()
    from_ckpt = tmp_path / "from-checkpoint.h5"
    res = run([colonnade(), "export", "--checkpoint", f"{b.data_dir},{a.data_dir}", "--vocab", vocab,
               "--output", from_ckpt, "--output-text", tmp_path / "from-checkpoint.txt"])
    assert np.array_equal(vectors(from_ckpt).view(np.uint32), got.view(np.uint32)), res.stderr
    from gensim.models import KeyedVectors
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / "from-checkpoint.txt"))
    assert kv.vectors.shape == got.shape
    # One shard's directory alone does not make the model.
    res = run([colonnade(), "export", "--checkpoint", a.data_dir, "--vocab", vocab, "--output", tmp_path / "half.h5"],
              expect_ok=False)
    assert res.returncode != 0 and "missing" in res.stderr, res.stderr


def test_stopped_shard_is_treated_as_failed_and_training_recovers(small_corpus, cluster, tmp_path):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", small_corpus, "--min-count", 3, "--output", vocab])
    # ~5M words: several seconds of training after the first checkpoint.
    flags = dict(iter=16, size=16, **DETERMINISTIC)
    a, b = cluster(2)
    out, summary = tmp_path / "stopped.h5", tmp_path / "summary.json"
    client = Proc(
        train_args(small_corpus, shards=f"{a.endpoint},{b.endpoint}", vocab=vocab, output=out, summary=summary,
                   checkpoint_interval=INTERVAL, call_timeout=2, **flags),
        tmp_path / "client.log",
    )
    wait_for(lambda: checkpoints_taken(a) >= 1, 120, "a checkpoint", client.text)
    b.proc.proc.send_signal(signal.SIGSTOP)
    assert "training done" not in client.text(), "training ended before the shard was stopped\n" + client.text()
    wait_for(lambda: "training interrupted" in client.text(), 30, "the client to notice the stopped shard", client.text)
    b.proc.proc.send_signal(signal.SIGCONT)
    assert client.wait(300) == 0, client.text()
    s = json.loads(summary.read_text())
    assert s["recoveries"] >= 1, s
    ref = reference_run(small_corpus, vocab, tmp_path, cluster, **flags)
    assert np.array_equal(vectors(out).view(np.uint32), vectors(ref).view(np.uint32)), client.text()[-4000:]


def test_worker_killed_and_restarted_trains_each_part_once(small_corpus, cluster, tmp_path):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", small_corpus, "--min-count", 3, "--output", vocab])
    flags = dict(iter=24, size=16, num_workers=2, **DETERMINISTIC)

    def worker(shards, i: int, name: str, **extra) -> Proc:
        return Proc(
            train_args(small_corpus, shards=",".join(s.endpoint for s in shards), vocab=vocab, worker_index=i,
                       summary=tmp_path / f"{name}.json", **flags, **extra),
            tmp_path / f"{name}.log",
        )

    # Reference: both workers uninterrupted, without checkpoints.
    ref = cluster(2, persistent=False, prefix="ref")
    r0, r1 = worker(ref, 0, "ref0"), worker(ref, 1, "ref1")
    assert r0.wait(300) == 0 and r1.wait(300) == 0, r0.text() + r1.text()
    ref_pairs = models(ref)[0]["pairs_adjusted"]
    ref1 = json.loads((tmp_path / "ref1.json").read_text())

    shards = cluster(2)
    w0 = worker(shards, 0, "w0", checkpoint_interval=INTERVAL)
    w1 = worker(shards, 1, "w1", checkpoint_interval=INTERVAL)
    wait_for(lambda: checkpoints_taken(shards[0]) >= 3, 120, "3 checkpoints", lambda: w0.text() + w1.text())
    assert w1.proc.poll() is None, "worker 1 ended before the kill\n" + w1.text()
    w1.proc.send_signal(signal.SIGKILL)
    w1.proc.wait(timeout=10)
    time.sleep(1)
    w1b = worker(shards, 1, "w1b", checkpoint_interval=INTERVAL)
    assert w1b.wait(300) == 0, w1b.text()
    assert w0.wait(300) == 0, w0.text()
    assert "resuming from checkpoint version" in w1b.text(), w1b.text()
    s1 = json.loads((tmp_path / "w1b.json").read_text())
    assert s1["resumed_from_version"] > 0, s1
    # Each worker's part was read to its end exactly: same final position.
    assert s1["position"] == ref1["position"], (s1["position"], ref1["position"])
    s0 = json.loads((tmp_path / "w0.json").read_text())
    ref0 = json.loads((tmp_path / "ref0.json").read_text())
    assert s0["position"] == ref0["position"]
    # Trained again: only worker 1's minibatches between its last checkpoint
    # and the kill (bounded by one interval plus a job at its speed).
    extra = models(shards)[0]["pairs_adjusted"] - ref_pairs
    pair_rate = ref1["pairs"] / max(ref1["seconds"], 0.5)
    assert 0 <= extra <= pair_rate * (INTERVAL + 2) + 60_000, (extra, pair_rate)


def test_corrupt_and_truncated_checkpoints_fall_back_to_the_previous_version(corpus_100k, cluster, tmp_path):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", 3, "--output", vocab])
    # Long enough for two periodic checkpoints before the final one.
    flags = dict(iter=32, size=16, **DETERMINISTIC)
    a, b = cluster(2)
    args = train_args(corpus_100k, shards=f"{a.endpoint},{b.endpoint}", vocab=vocab, checkpoint_interval=INTERVAL, **flags)
    run(args + ["--output", tmp_path / "first.h5"], timeout=300)
    # SIGTERM: calls finish, writes finish, nothing half-written is left.
    for s in (a, b):
        s.proc.proc.send_signal(signal.SIGTERM)
        assert s.proc.proc.wait(timeout=30) == 0, s.text()
        assert "ps-shard stopped" in s.text()
        assert not list(s.data_dir.rglob("*.tmp"))
    [model_a] = [d for d in a.data_dir.iterdir() if d.is_dir()]
    [model_b] = [d for d in b.data_dir.iterdir() if d.is_dir()]
    va, vb = sorted(model_a.glob("v*.ckpt")), sorted(model_b.glob("v*.ckpt"))
    assert len(va) == 2 and [p.name for p in va] == [p.name for p in vb], (va, vb)
    newest_a, newest_b = va[-1], vb[-1]
    data = bytearray(newest_a.read_bytes())
    data[len(data) - 1000] ^= 0x04  # one bit of a vector
    newest_a.write_bytes(bytes(data))
    with open(newest_b, "r+b") as f:
        f.truncate(newest_b.stat().st_size - 4096)
    a.start()
    b.start()
    wait_for(lambda: "model loaded" in a.text() and "model loaded" in b.text(), 30, "the shards to load", lambda: a.text() + b.text())
    assert str(newest_a) in a.text() and "checksum mismatch" in a.text(), a.text()
    assert str(newest_b) in b.text() and "truncated" in b.text(), b.text()
    assert Path(str(newest_a) + ".corrupt").exists() and Path(str(newest_b) + ".corrupt").exists()
    previous = int(va[-2].name[1:-5])
    for m in models([a, b]):
        assert m["checkpoints"] == [previous], m
    # Training again resumes from the previous version (its manifest has the
    # position before the end) and ends with the uninterrupted model.
    res = run(args + ["--output", tmp_path / "second.h5"], timeout=300)
    assert f"resuming from checkpoint version {previous}" in res.stderr, res.stderr
    ref = reference_run(corpus_100k, vocab, tmp_path, cluster, **flags)
    assert np.array_equal(vectors(tmp_path / "second.h5").view(np.uint32), vectors(ref).view(np.uint32))


def test_a_clean_restart_of_every_shard_is_one_state_not_a_disagreement(corpus_100k, cluster, tmp_path):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", 3, "--output", vocab])
    a, b = cluster(2)
    args = train_args(corpus_100k, shards=f"{a.endpoint},{b.endpoint}", vocab=vocab, checkpoint_interval=INTERVAL,
                      size=16, **DETERMINISTIC)
    run(args + ["--output", tmp_path / "first.h5"], timeout=300)
    # Every shard stopped and started again on its data dir: each loads the
    # newest version under a lineage of its own.
    for s in (a, b):
        s.proc.proc.send_signal(signal.SIGTERM)
        assert s.proc.proc.wait(timeout=30) == 0, s.text()
        s.start()
    wait_for(lambda: "model loaded" in a.text() and "model loaded" in b.text(), 30, "the shards to load",
             lambda: a.text() + b.text())
    [version] = {m["base_version"] for m in models([a, b])}
    assert version > 0 and len({m["lineage"] for m in models([a, b])}) == 2
    res = run(args + ["--output", tmp_path / "second.h5"], timeout=300)
    assert "hold different states" not in res.stderr and "WARN" not in res.stderr, res.stderr
    assert f"every shard restarted from checkpoint version {version}: agreeing on it" in res.stderr, res.stderr
    # The worker's part was finished at that version: nothing to train, the same model.
    assert f"already trained to the end (checkpoint version {version}" in res.stderr, res.stderr
    assert np.array_equal(vectors(tmp_path / "second.h5").view(np.uint32),
                          vectors(tmp_path / "first.h5").view(np.uint32))


def test_models_drop_keeps_the_checkpoints_unless_asked_and_training_again_resumes(corpus_100k, cluster, tmp_path):
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", 3, "--output", vocab])
    a, b = cluster(2)
    shards = f"{a.endpoint},{b.endpoint}"
    args = train_args(corpus_100k, shards=shards, vocab=vocab, checkpoint_interval=INTERVAL, size=16, **DETERMINISTIC)
    run(args + ["--output", tmp_path / "first.h5"], timeout=300)
    fp, versions = models([a, b])[0]["fingerprint"], models([a, b])[0]["checkpoints"]
    assert versions, "checkpoints were taken"
    dirs = [s.data_dir / fp for s in (a, b)]

    def held() -> list[list[str]]:
        out = run([colonnade(), "models", "list", "--shards", shards, "--json"]).stdout
        return [[m["fingerprint"] for m in s["models"]] for s in json.loads(out)["shards"]]

    def drop(*flags) -> str:
        return run([colonnade(), "models", "drop", "--shards", shards, "--fingerprint", fp, *flags]).stdout

    def logged_drop(s: PersistentShard, deleted: bool) -> bool:
        line = rf'model dropped.* fingerprint="{fp}" .*checkpoints_deleted={str(deleted).lower()} .*dir='
        return re.search(line + re.escape(str(s.data_dir / fp)), s.text()) is not None

    # A drop frees the memory and keeps the files, saying so (and how to delete them).
    out = drop()
    assert f"dropped model {fp}" in out and "checkpoints stay on disk" in out and "--delete-checkpoints" in out, out
    assert held() == [[], []]
    for s, d in zip((a, b), dirs):
        assert sorted(p.name for p in d.glob("v*.ckpt")) == [f"v{v:010}.ckpt" for v in versions], d
        assert (d / "model.bin").is_file() and (d / "dropped").is_file()
        assert logged_drop(s, deleted=False), s.text()

    # A restart leaves the dropped model on disk, not in memory.
    for s in (a, b):
        s.proc.proc.send_signal(signal.SIGTERM)
        assert s.proc.proc.wait(timeout=30) == 0, s.text()
        s.start()
        wait_for(lambda: "not loaded" in s.text(), 30, "the shard to start", s.text)
    assert held() == [[], []]

    # Training the same model again resumes from its newest checkpoint: the
    # part was finished there, so the same vectors.
    res = run(args + ["--output", tmp_path / "second.h5"], timeout=300)
    assert f"already trained to the end (checkpoint version {versions[-1]}" in res.stderr, res.stderr
    assert np.array_equal(vectors(tmp_path / "second.h5").view(np.uint32),
                          vectors(tmp_path / "first.h5").view(np.uint32))
    assert held() == [[fp], [fp]] and not any((d / "dropped").exists() for d in dirs)

    # --delete-checkpoints deletes the files, of a held model or, as here,
    # of one dropped earlier with its files kept.
    drop()
    out = drop("--delete-checkpoints")
    assert f"deleted the files of model {fp}" in out, out
    for s, d in zip((a, b), dirs):
        assert not d.exists(), d
        assert logged_drop(s, deleted=True), s.text()
    res = run_fail([colonnade(), "models", "drop", "--shards", shards, "--fingerprint", fp, "--delete-checkpoints"])
    assert "in memory or in its data dir" in res.stderr, res.describe()


def test_full_disk_keeps_the_last_good_version_and_training_goes_on(corpus_100k, cluster, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", 3, "--output", vocab])
    words = sum(1 for line in vocab.read_text().splitlines() if line and not line.startswith("# colonnade"))
    version_bytes = words * 8 * 2 * 4  # 2 matrices × 8 columns (size 16, 2 shards) × f32
    small = tmp_path / "small-disk"
    small.mkdir()
    # Room for model.bin and one version, not for two.
    size_kib = (version_bytes + words * 8 + 64 * 1024) // 1024 + 16
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(small)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount tmpfs")
    try:
        a = cluster(1)[0]
        b = PersistentShard(tmp_path, "full", small / "data")
        b.start()
        try:
            summary = tmp_path / "summary.json"
            res = run(
                train_args(corpus_100k, shards=f"{a.endpoint},{b.endpoint}", vocab=vocab, iter=30, size=16,
                           checkpoint_interval=INTERVAL, summary=summary, output=tmp_path / "out.h5", **DETERMINISTIC),
                timeout=300,
            )
            assert "No space left on device" in b.text(), b.text()
            [mdir] = [d for d in (small / "data").iterdir() if d.is_dir()]
            kept = sorted(p.name for p in mdir.glob("v*.ckpt"))
            assert kept == ["v0000000001.ckpt"], kept
            assert not list(mdir.glob("*.tmp"))
            m = models([a, b])
            assert m[1]["checkpoints"] == [1] and "No space left" in m[1]["checkpoint_error"], m
            assert json.loads(summary.read_text())["words"] > 0, res.stderr
        finally:
            b.proc.stop()
    finally:
        subprocess.run(["umount", str(small)])


def test_interval_without_data_dir_is_refused(corpus_100k, cluster, tmp_path):
    a, b = cluster(2, persistent=False)
    res = subprocess.run(
        [str(x) for x in train_args(corpus_100k, shards=f"{a.endpoint},{b.endpoint}", checkpoint_interval=5,
                                    output=tmp_path / "x.h5")],
        env=clean_env(), capture_output=True, text=True, timeout=120,
    )
    assert res.returncode != 0 and "--data-dir" in res.stderr, res.stderr
