"""First-day mistakes caught up front, and no silent failures (issue 10):
a pipe as corpus, outputs checked before training, `--workers` and
`--num-workers` with embedded shards, progress with `--vocab`, plain logs and
errors without backtraces, unreachable shards, and the memory estimate."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import socket
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (
    ANSI,
    COMMAND_TIMEOUT,
    Result,
    binary,
    clean_env,
    closed_port,
    colonnade,
    read_vocab_file,
    row_bytes,
    run,
    run_fail,
    train_args,
)


def run_env(args: list, env: dict[str, str], *, stdin_data: bytes | None = None,
            timeout: float = COMMAND_TIMEOUT) -> Result:
    """Runs a command with `env`; stdin is a pipe fed `stdin_data` (or /dev/null);
    stdout and stderr go to files, not pipes or terminals, as in a log file.
    ANSI codes are kept in the result."""
    args = [str(a) for a in args]
    start = time.monotonic()
    feed = dict(input=stdin_data) if stdin_data is not None else dict(stdin=subprocess.DEVNULL)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.run(args, env=env, stdout=out, stderr=err, timeout=timeout, **feed)
        out.seek(0)
        err.seek(0)
        return Result(args, proc.returncode, out.read().decode("utf-8", "replace"),
                      err.read().decode("utf-8", "replace"), time.monotonic() - start)


def copy_corpus(src: Path, dst_dir: Path, name: str = "c.txt") -> Path:
    dst = dst_dir / name
    shutil.copyfile(src, dst)
    return dst


# --------------------------------------------------------------------- 1. pipes


def test_pipe_corpus_needs_vocab_and_one_epoch(tmp_path, corpus_100k):
    data = corpus_100k.read_bytes()
    vocab = tmp_path / "vocab.tsv"
    # `colonnade vocab` reads a pipe fine: one pass.
    run_env([colonnade(), "vocab", "--corpus", "/dev/stdin", "--min-count", "3", "--output", vocab],
            clean_env(), stdin_data=data)
    entries = read_vocab_file(vocab)
    assert len(entries) > 100

    out = tmp_path / "m.txt"
    # Without --vocab: counting and training would each need a pass.
    res = run_env(train_args("/dev/stdin", embedded_shards=1, output_text=out, iter=1),
                  clean_env(), stdin_data=data)
    assert res.returncode == 1, res.describe()
    assert "/dev/stdin" in res.stderr and "read only once" in res.stderr, res.describe()
    assert "--vocab" in res.stderr and "--iter 1" in res.stderr, res.describe()
    assert "corpus counted" not in res.stderr and not out.exists(), res.describe()

    # With --vocab but 3 epochs: each epoch needs a pass.
    res = run_env(train_args("/dev/stdin", vocab=vocab, embedded_shards=1, output_text=out, iter=3),
                  clean_env(), stdin_data=data)
    assert res.returncode == 1, res.describe()
    assert "/dev/stdin" in res.stderr and "--iter 3" in res.stderr, res.describe()
    assert not out.exists()

    # With --vocab and --iter 1 it is read once and trained.
    summary = tmp_path / "s.json"
    res = run_env(train_args("/dev/stdin", vocab=vocab, embedded_shards=1, output_text=out, iter=1,
                             summary=summary), clean_env(), stdin_data=data)
    assert res.returncode == 0, res.describe()
    s = json.loads(summary.read_text())
    assert s["words"] == sum(c for _, c in entries), s
    assert out.exists()


# ------------------------------------------------------------------- 2. outputs


def _output_cases(tmp: Path, corpus: Path, vocab: Path):
    """(id, extra train flags, strings stderr must contain)."""
    (tmp / "adir").mkdir()
    dotted = Path(str(tmp) + "/./" + corpus.name)  # the corpus, spelled differently
    return [
        ("missing-dir", dict(output=tmp / "nope" / "m.h5"), ["--output", str(tmp / "nope"), "does not exist"]),
        ("existing-dir", dict(output_text=tmp / "adir"), ["--output-text", "is a directory"]),
        ("same-as-corpus", dict(output_binary=dotted), ["--output-binary", "same file as the input --corpus"]),
        ("save-vocab-is-vocab", dict(vocab=vocab, save_vocab=vocab, output=tmp / "m.h5"),
         ["--save-vocab", "same file as the input --vocab"]),
        ("two-outputs-one-file", dict(output_text=tmp / "v.txt", summary=tmp / "." / "v.txt"),
         ["--summary", "--output-text", "same file"]),
        ("no-output-embedded", dict(summary=tmp / "s.json"), ["--embedded-shards", "--output", "thrown away"]),
    ]


@pytest.mark.parametrize("case", ["missing-dir", "existing-dir", "same-as-corpus", "save-vocab-is-vocab",
                                  "two-outputs-one-file", "no-output-embedded"])
def test_train_outputs_checked_before_counting(tmp_path, corpus_100k, case):
    corpus = copy_corpus(corpus_100k, tmp_path)
    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus, "--min-count", "3", "--output", vocab])
    before = (corpus.read_bytes(), vocab.read_bytes())
    (name, flags, needles), = [c for c in _output_cases(tmp_path, corpus, vocab) if c[0] == case]
    res = run_fail(train_args(corpus, embedded_shards=1, **flags))
    for n in needles:
        assert n in res.stderr, f"{name}: {n!r} not in stderr\n" + res.describe()
    # Refused before the corpus was counted or any shard started.
    assert "corpus counted" not in res.stderr and "model ready" not in res.stderr, res.describe()
    assert (corpus.read_bytes(), vocab.read_bytes()) == before, "an input was overwritten"


def test_vocab_and_export_refuse_output_over_input(tmp_path, corpus_100k):
    corpus = copy_corpus(corpus_100k, tmp_path)
    before = corpus.read_bytes()
    res = run_fail([colonnade(), "vocab", "--corpus", corpus, "--output", Path(str(tmp_path) + "/./c.txt")])
    assert "--output" in res.stderr and "same file as the input --corpus" in res.stderr, res.describe()
    assert corpus.read_bytes() == before, "colonnade vocab overwrote its corpus"

    vocab = tmp_path / "vocab.tsv"
    run([colonnade(), "vocab", "--corpus", corpus, "--output", vocab])
    shards = f"127.0.0.1:{closed_port()}"
    for exe in ([colonnade(), "export"], [binary("colonnade-export")]):
        res = run_fail([*exe, "--shards", shards, "--vocab", vocab, "--output-text", vocab])
        assert "--output-text" in res.stderr and "same file as the input --vocab" in res.stderr, res.describe()
        res = run_fail([*exe, "--shards", shards, "--vocab", vocab, "--output", tmp_path / "no" / "m.h5"])
        assert "does not exist" in res.stderr and str(tmp_path / "no") in res.stderr, res.describe()


# ------------------------------------------------------------------- 3. workers


def test_num_workers_with_embedded_shards_is_refused(tmp_path, corpus_100k):
    out = tmp_path / "m.txt"
    res = run_fail(train_args(corpus_100k, embedded_shards=1, num_workers=2, worker_index=0, output_text=out))
    assert "--num-workers 2" in res.stderr and "--embedded-shards" in res.stderr, res.describe()
    assert "--threads" in res.stderr, res.describe()
    assert "corpus counted" not in res.stderr and not out.exists(), res.describe()


def test_train_without_shards_runs_one_embedded_shard_with_gensims_names(tmp_path, corpus_100k):
    """No --shards and no --embedded-shards: one embedded shard, as word2vec and
    gensim train on one machine; --epochs and --vector-size are --iter and --size."""
    out = tmp_path / "m.txt"
    res = run(train_args(corpus_100k, size=None, iter=None, epochs=1, vector_size=16, output_text=out))
    assert "(1 epoch)" in res.stderr, res.describe()
    header = out.read_text(encoding="utf-8").split("\n", 1)[0].split()
    assert int(header[1]) == 16, header
    assert int(header[0]) > 100, header


def test_workers_flag_explains_threads(tmp_path, corpus_100k):
    res = run_fail(train_args(corpus_100k, embedded_shards=1, workers=4, output_text=tmp_path / "m.txt"))
    assert "gensim" in res.stderr and "--threads" in res.stderr, res.describe()
    assert "--num-workers" in res.stderr and "processes" in res.stderr, res.describe()
    help_text = run([colonnade(), "train", "--help"]).stdout
    threads = help_text.split("--threads")[1].split("\n      --")[0]
    assert "gensim" in threads and "-threads" in threads, threads
    num_workers = help_text.split("--num-workers <NUM_WORKERS>")[1].split("\n      --")[0]
    assert "processes" in num_workers and "--threads" in num_workers, num_workers


# ------------------------------------------------------------------ 4. progress


def test_progress_compares_in_vocabulary_words(tmp_path, corpus_100k):
    vocab = tmp_path / "vocab20.tsv"
    run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", "20", "--output", vocab])
    for name, flags in [("vocab", dict(vocab=vocab)), ("counted", dict(min_count=20))]:
        summary = tmp_path / f"{name}.json"
        run(train_args(corpus_100k, embedded_shards=1, iter=2, output_text=tmp_path / f"{name}.txt",
                       summary=summary, **flags))
        s = json.loads(summary.read_text())
        # Many tokens are out of vocabulary: comparing tokens with the
        # vocabulary's total would overshoot.
        assert s["tokens"] > 1.3 * s["words"], s
        assert s.get("progress_reached") == pytest.approx(1.0, abs=1e-9), f"{name}: {s}"


# ---------------------------------------------------------------------- 5. logs


def _env_without_no_color() -> dict[str, str]:
    env = clean_env()
    env.pop("NO_COLOR", None)
    return env


def _vocab_log_on_a_terminal(tmp_path: Path, corpus: Path, env: dict[str, str]) -> str:
    """stderr of `colonnade vocab` when stderr is a terminal (a pty)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([colonnade(), "vocab", "--corpus", corpus, "--output", tmp_path / "pty.tsv"],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
                              timeout=COMMAND_TIMEOUT)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO once the pty's other end is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.returncode == 0
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_logs_have_no_colours_when_not_a_terminal(tmp_path, corpus_100k):
    env = _env_without_no_color()
    env["RUST_LOG"] = "info"
    port = closed_port()
    shard_log = tmp_path / "shard.log"
    with open(shard_log, "wb") as log:
        shard = subprocess.Popen([binary("ps-shard"), "--listen", f"127.0.0.1:{port}", "--threads", "1"],
                                 env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        endpoint = f"127.0.0.1:{port}"
        vocab = tmp_path / "v.tsv"
        res = run_env(train_args(corpus_100k, shards=endpoint, size=8, output_text=tmp_path / "t.txt",
                                 save_vocab=vocab, connect_timeout_secs=20), env)
        assert res.returncode == 0, res.describe()
        assert "training done" in res.stderr, res.describe()
        assert not ANSI.search(res.stderr), "colonnade train coloured its log file:\n" + res.stderr[:2000]
        exp = run_env([binary("colonnade-export"), "--shards", endpoint, "--vocab", vocab,
                       "--output-text", tmp_path / "e.txt"], env)
        assert "written" in exp.stderr, exp.describe()
        assert not ANSI.search(exp.stderr), "colonnade-export coloured its log file:\n" + exp.stderr[:2000]
    finally:
        shard.terminate()
        shard.wait(timeout=10)
    text = shard_log.read_text(errors="replace")
    assert "ps-shard serving" in text, text
    assert not ANSI.search(text), "ps-shard coloured its log file:\n" + text[:2000]

    # On a terminal the logs keep their colours, unless NO_COLOR is set.
    coloured = _vocab_log_on_a_terminal(tmp_path, corpus_100k, _env_without_no_color())
    assert "vocabulary written" in coloured and ANSI.search(coloured), coloured
    plain = _vocab_log_on_a_terminal(tmp_path, corpus_100k, {**_env_without_no_color(), "NO_COLOR": "1"})
    assert "vocabulary written" in plain and not ANSI.search(plain), plain


def _backtrace_env() -> dict[str, str]:
    env = clean_env()
    env.pop("RUST_LIB_BACKTRACE", None)
    env["RUST_BACKTRACE"] = "1"
    return env


def _assert_plain_error(res: Result, *needles: str) -> None:
    assert "backtrace" not in res.stderr.lower(), "a user error printed a backtrace\n" + res.describe()
    assert not re.search(r"^\s+\d+: ", res.stderr, re.M), "stack frames in stderr\n" + res.describe()
    assert res.returncode == 1, res.describe()
    lines = [l for l in res.stderr.splitlines() if l.startswith("error: ")]
    assert lines, "no `error: ` line\n" + res.describe()
    for n in needles:
        assert n in lines[-1], f"{n!r} not in the error line\n" + res.describe()


def test_user_errors_print_without_backtrace(tmp_path):
    env = _backtrace_env()
    missing = tmp_path / "missing.txt"
    res = run_env(train_args(missing, embedded_shards=1, output_text=tmp_path / "m.txt"), env)
    _assert_plain_error(res, str(missing))

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        addr = "127.0.0.1:%d" % busy.getsockname()[1]
        res = run_env([binary("ps-shard"), "--listen", addr], env, timeout=30)
    _assert_plain_error(res, addr)

    vocab = tmp_path / "nope.tsv"
    res = run_env([binary("colonnade-export"), "--shards", f"127.0.0.1:{closed_port()}", "--vocab", vocab,
                   "--output", tmp_path / "m.h5"], env)
    _assert_plain_error(res, str(vocab))


# ------------------------------------------------------------------- 6. shards


def test_unreachable_shards_named_while_waiting_before_counting(tmp_path, corpus_100k, shard_launcher):
    (live,) = shard_launcher.start(1)
    dead = f"127.0.0.1:{closed_port()}"
    res = run_fail(train_args(corpus_100k, shards=f"{live},{dead}", size=8, output_text=tmp_path / "m.txt",
                              connect_timeout_secs=6))
    waiting = [l for l in res.stderr.splitlines() if "waiting for shard" in l]
    assert len(waiting) >= 2, "no periodic line naming the shards waited for\n" + res.describe()
    assert all(dead in l and live not in l for l in waiting), res.describe()
    error = [l for l in res.stderr.splitlines() if l.startswith(("error: ", "Error: "))]
    assert error and dead in error[-1] and live not in error[-1], res.describe()
    assert "corpus counted" not in res.stderr, "the corpus was counted before the shards were reached\n" + res.describe()
    assert res.seconds < 30, res.describe()


# ------------------------------------------------------------------- 7. memory


def _human(n: int) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    v, u = float(n), 0
    while v >= 1024 and u + 1 < len(units):
        v /= 1024
        u += 1
    return f"{n} B" if u == 0 else f"{v:.1f} {units[u]}"


def test_memory_estimate_logged_and_too_large_refused(tmp_path, corpus_100k):
    summary_vocab = tmp_path / "v.tsv"
    res = run(train_args(corpus_100k, embedded_shards=2, size=10, min_count=3, save_vocab=summary_vocab,
                         output_text=tmp_path / "m.txt"))
    v = len(read_vocab_file(summary_vocab))
    # Embedded shards share each row (one lock per row and matrix); each has
    # its own sampler and counts.
    shards, dim = 2, 10
    total = 2 * v * row_bytes(dim) + shards * 16 * v
    line = [l for l in res.stderr.splitlines() if "memory estimate" in l]
    assert line, "no memory estimate before training\n" + res.describe()
    assert f"total={_human(total)}" in line[0] and f"words={v}" in line[0], line[0]

    out = tmp_path / "big.txt"
    res = run_fail(train_args(corpus_100k, embedded_shards=1, size=4_000_000, min_count=3, output_text=out),
                   timeout=60)
    assert "--size" in res.stderr and "--shards" in res.stderr and "can get only" in res.stderr, res.describe()
    assert "memory estimate" in res.stderr, res.describe()
    assert "model ready" not in res.stderr and not out.exists(), res.describe()
    assert res.seconds < 10, f"refusing took {res.seconds:.1f} s\n" + res.describe()


# ------------------------------------------------- other trainers' spellings

def test_word2vec_and_gensim_spellings_get_the_right_flag(tmp_path, corpus_100k):
    """word2vec's `-cbow 1` and names Colonnade does not have are answered
    with Colonnade's flag, never with an unrelated suggestion."""
    res = run_fail([colonnade(), "train", "--corpus", corpus_100k, "-cbow", "1", "-size", "50"])
    assert "--cbow" in res.stderr and "--size" in res.stderr and "'-c'" not in res.stderr, res.describe()
    for flag, want, not_want in [("--hs", "hierarchical softmax", "--minibatches-per-call"),
                                 ("--epoch", "--iter", "--p"),
                                 ("--sg", "--cbow", "--seed"),
                                 ("--windw", "--window", None)]:
        res = run_fail([colonnade(), "train", "--corpus", corpus_100k, flag, "1"])
        assert want in res.stderr, (flag, res.describe())
        if not_want:
            assert not_want not in res.stderr, (flag, res.describe())
    # Flags a command does not use are not taken.
    res = run_fail([colonnade(), "synth", "--tls-ca", tmp_path / "ca.crt", "--output", tmp_path / "s.txt",
                    "--words", "100", "--tokens", "1000"])
    assert "'--tls-ca'" in res.stderr, res.describe()
    # train --help groups its flags.
    help_text = run([colonnade(), "train", "--help"]).stdout
    for heading in ["Input:", "Model:", "Graphs:", "Shards and workers:", "Outputs:", "Connecting to shards:"]:
        assert heading in help_text, help_text


def test_min_alpha_is_gensims_schedule(tmp_path, corpus_100k):
    """--min-alpha changes the schedule (one thread: runs are deterministic),
    and is checked against --alpha."""
    def vectors(name, **flags):
        out = tmp_path / f"{name}.txt"
        run(train_args(corpus_100k, threads=1, output_text=out, **flags))
        return out.read_text()
    word2vec = vectors("w2v")
    assert vectors("w2v-again") == word2vec, "one thread is not deterministic"
    assert vectors("gensim", min_alpha=0.02) != word2vec
    res = run_fail(train_args(corpus_100k, min_alpha=0.5, output_text=tmp_path / "x.txt"))
    assert "--min-alpha" in res.stderr, res.describe()


def test_epoch_losses_are_logged(tmp_path, corpus_100k):
    res = run(train_args(corpus_100k, iter=2, output_text=tmp_path / "v.txt"))
    for epoch in (1, 2):
        assert re.search(rf"epoch {epoch}/2 done: loss \d+\.\d+", res.stderr), res.describe()


def test_ctrl_c_in_embedded_mode_writes_what_was_trained(tmp_path, corpus_100k):
    """SIGINT while embedded shards train: training stops, the outputs are
    written with status `interrupted` and the progress, exit status 130."""
    import h5py
    from gensim.models import KeyedVectors
    h5, text, log = tmp_path / "m.h5", tmp_path / "v.txt", tmp_path / "train.log"
    args = [str(a) for a in train_args(corpus_100k, iter=200, output=h5, output_text=text)]
    with open(log, "wb") as f:
        proc = subprocess.Popen(args, env=clean_env(), stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "model ready on every shard" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text(errors="replace")
    assert rc == 130, out
    assert "interrupted" in out and str(h5) in out, out
    with h5py.File(h5, "r") as f:
        assert f.attrs["status"] == "interrupted", dict(f.attrs)
        assert 0.0 < f.attrs["progress"] < 1.0, dict(f.attrs)
        rows = f["vectors"].shape[0]
    kv = KeyedVectors.load_word2vec_format(str(text), binary=False)
    assert len(kv.index_to_key) == rows
