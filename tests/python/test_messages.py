"""Messages a first day meets (issue 46): a missing or wrong `--vocab` named
once with its flag, a corpus given as `--vocab` quoted cut instead of whole,
and log lines with plain values (no `Some(..)`, seconds not to the
nanosecond)."""

from __future__ import annotations

import re
import time

import pytest

from conftest import colonnade, free_port, run, run_fail, train_args

# A float printed with more decimals than anyone reads (timestamps have 6).
LONG_FLOAT = re.compile(r"\d\.\d{7,}")


def _error_line(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert lines, "no `error: ` line\n" + res.describe()
    return lines[-1]


@pytest.mark.parametrize("command", ["train", "export", "encode"])
def test_a_missing_vocab_names_the_flag_and_the_path_once(tmp_path, corpus_100k, command):
    missing = tmp_path / "missing.tsv"
    args = {
        "train": train_args(corpus_100k, vocab=missing, output_text=tmp_path / "m.txt"),
        "export": [colonnade(), "export", "--shards", f"127.0.0.1:{free_port()}", "--vocab", missing,
                   "--output", tmp_path / "m.h5"],
        "encode": [colonnade(), "encode", "--corpus", corpus_100k, "--vocab", missing,
                   "--output", tmp_path / "encoded"],
    }[command]
    res = run_fail(args)
    line = _error_line(res)
    assert f"--vocab {missing}" in line, res.describe()
    assert line.count(str(missing)) == 1, res.describe()
    assert line.count("No such file or directory") == 1, res.describe()
    # Nothing was made for a run that could not start.
    assert not (tmp_path / "encoded").exists() and not (tmp_path / "m.txt").exists()


def test_a_corpus_given_as_vocab_is_quoted_cut(tmp_path, corpus_100k):
    # One long line, as text8 is: the "word" before its last space is the
    # whole line.
    corpus = tmp_path / "one-line.txt"
    text = " ".join(corpus_100k.read_text(encoding="utf-8").split())
    corpus.write_text(text + "\n", encoding="utf-8")
    assert len(text) > 200_000
    res = run_fail(train_args(corpus_100k, vocab=corpus, output_text=tmp_path / "m.txt"))
    line = _error_line(res)
    assert len(res.stderr) < 2_000, "the error echoes the offending line\n" + res.describe()
    assert f"--vocab {corpus}:1" in line, res.describe()
    assert re.search(r"… \(\d+ bytes\)", line), res.describe()
    assert "is this a corpus?" in line, res.describe()


def test_logs_print_values_plainly(tmp_path, corpus_100k, shard_launcher):
    res = run(train_args(corpus_100k, size=8, output_text=tmp_path / "m.txt"))
    assert "training done" in res.stderr and "written" in res.stderr, res.describe()
    assert "Some(" not in res.stderr, res.describe()
    assert not LONG_FLOAT.search(res.stderr), res.describe()
    written = re.search(r"written .*seconds=(\S+)", res.stderr)
    assert written and re.fullmatch(r"\d+(\.\d{1,3})?", written.group(1)), res.describe()

    # A shard's start-up line: its data dir and health port as they were given.
    data_dir = tmp_path / "s0"
    health = f"127.0.0.1:{free_port()}"
    shard_launcher.start(1, args=("--data-dir", data_dir, "--health-listen", health))
    deadline = time.monotonic() + 20
    while "ps-shard serving" not in shard_launcher.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = shard_launcher.logs()
    assert f"data_dir={data_dir}" in log and f"health_listen={health}" in log, log
    assert "Some(" not in log and "None" not in log, log
