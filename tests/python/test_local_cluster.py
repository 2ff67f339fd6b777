"""`colonnade cluster up|down|status`: shards on this machine in one command.

The README's "A cluster on one machine" runs as written (vocab, cluster up,
train, export, cluster down); `up` refuses a second cluster on one data dir,
`down` with nothing running is no error and never signals a process that is
not the shard it started, a port taken before the shard binds it is retried,
and `export` picks the model matching `--vocab` among several on the shards.
Every test stops the shards it started, even when it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import BIN_DIR, REPO, binary, clean_env, colonnade, read_vocab_file, run, run_fail, train_args

README = REPO / "README.md"
SECTION = "## A cluster on one machine"


def readme_block() -> str:
    """The fenced sh block of the README's "A cluster on one machine" section."""
    text = README.read_text()
    assert SECTION in text, f"{README}: no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    assert m, f"{README}: the section {SECTION!r} has no ```sh block"
    return m.group(1)


def shell_commands(script: str) -> list[str]:
    """The script's commands, a backslash-continued line joined to the next."""
    return [c.strip() for c in re.sub(r"\\\n", " ", script).splitlines() if c.strip()]


def running(pid: int) -> bool:
    """Whether `pid` exists and has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def is_shard(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return running(pid) and b"ps-shard" in cmdline


def state(data_dir: Path) -> dict:
    return json.loads((data_dir / "cluster.json").read_text())


class Clusters:
    """Data dirs of local clusters a test starts; stop_all() takes each down,
    and kills any shard `down` left (so a failing test leaves no process)."""

    def __init__(self) -> None:
        self.dirs: list[Path] = []
        self.pids: set[int] = set()

    def up(self, data_dir: Path, shards: int, *extra) -> list[str]:
        self.dirs.append(data_dir)
        res = run([colonnade(), "cluster", "up", "--shards", shards, "--data-dir", data_dir, *extra])
        self.remember(data_dir)
        endpoints = res.stdout.strip().split(",")
        assert res.stdout.count("\n") == 1 and len(endpoints) == shards, res.describe()
        return endpoints

    def remember(self, data_dir: Path) -> None:
        if data_dir not in self.dirs:
            self.dirs.append(data_dir)
        if (data_dir / "cluster.json").exists():
            self.pids |= {s["pid"] for s in state(data_dir)["shards"]}

    def stop_all(self) -> None:
        for d in self.dirs:
            if (d / "cluster.json").exists():
                self.remember(d)
                run([colonnade(), "cluster", "down", "--data-dir", d], expect_ok=False)
        for pid in self.pids:
            if is_shard(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def clusters():
    c = Clusters()
    try:
        yield c
    finally:
        c.stop_all()


def test_readme_section_runs_as_written(tmp_path, clusters):
    """From a directory laid out like the repo after quickstart.sh (target/release
    and testdata), the README's commands train and export through two local shards;
    `cluster down` stops them and keeps their checkpoints."""
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "release").symlink_to(BIN_DIR.resolve())
    (tmp_path / "testdata").symlink_to(REPO / "testdata")
    commands = shell_commands(readme_block())
    down = commands[-1]
    assert down.startswith("./target/release/colonnade cluster down"), commands
    data_dir = tmp_path / "out" / "local" / "shards"
    clusters.dirs.append(data_dir)

    def bash(script: str):
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=clean_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{script}\nexit {proc.returncode}\n{proc.stderr[-6000:]}"
        return proc

    # Everything but `cluster down`, then the state it left, then `cluster down`.
    before = bash("\n".join(commands[:-1]))
    clusters.remember(data_dir)
    st = state(data_dir)
    pids = [s["pid"] for s in st["shards"]]
    assert len(pids) == 2 and all(is_shard(p) for p in pids), st
    assert all(e.startswith("127.0.0.1:") for e in st["shards_flag"].split(",")), st
    assert "cluster down" in before.stderr, before.stderr[-3000:]  # up's hint

    vocab = read_vocab_file(tmp_path / "out" / "local" / "vocab.tsv")
    with h5py.File(tmp_path / "out" / "local" / "model.h5", "r") as f:
        vectors = f["vectors"][()]
        words = list(f["words"].asstr()[()])
    assert vectors.shape == (len(vocab), 100), vectors.shape
    assert np.isfinite(vectors).all() and np.abs(vectors).sum() > 0
    assert words == [w for w, _ in vocab]

    stopped = bash(down)
    assert "kept" in stopped.stdout, stopped.stdout
    assert not any(running(p) for p in pids), [p for p in pids if running(p)]
    assert not (data_dir / "cluster.json").exists()
    # The checkpoints stay, and are the model: export reads them with no shard running.
    for s in ("s0", "s1"):
        assert list((data_dir / s).glob("*/model.bin")) and list((data_dir / s).glob("*/v*.ckpt")), s
    from_ckpt = tmp_path / "from_checkpoints.h5"
    run([colonnade(), "export", "--checkpoint", f"{data_dir / 's0'},{data_dir / 's1'}",
         "--vocab", tmp_path / "out" / "local" / "vocab.tsv", "--output", from_ckpt])
    with h5py.File(from_ckpt, "r") as f:
        assert np.array_equal(f["vectors"][()], vectors)


def test_up_refuses_a_second_cluster_and_status_reports(tmp_path, clusters):
    data_dir = tmp_path / "c"
    endpoints = clusters.up(data_dir, 1, "--threads", "1")
    status = run([colonnade(), "cluster", "status", "--data-dir", data_dir])
    assert "SERVING" in status.stdout and endpoints[0] in status.stdout, status.describe()

    again = run_fail([colonnade(), "cluster", "up", "--shards", "1", "--data-dir", data_dir])
    assert again.stdout == "", again.describe()
    assert "already runs" in again.stderr and "cluster down" in again.stderr, again.describe()
    assert endpoints[0] in again.stderr, again.describe()
    assert state(data_dir)["shards_flag"] == endpoints[0]  # untouched

    # A shard that died is reported, and down still stops the rest.
    pid = state(data_dir)["shards"][0]["pid"]
    os.kill(pid, signal.SIGKILL)
    dead = run_fail([colonnade(), "cluster", "status", "--data-dir", data_dir])
    assert "not running" in dead.stdout, dead.describe()
    down = run([colonnade(), "cluster", "down", "--data-dir", data_dir])
    assert "not running" in down.stdout, down.describe()
    assert not (data_dir / "cluster.json").exists()


def test_down_with_nothing_running_and_never_a_foreign_pid(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run([colonnade(), "cluster", "down", "--data-dir", empty])
    assert "nothing to stop" in res.stdout, res.describe()
    assert "no cluster" in run_fail([colonnade(), "cluster", "status", "--data-dir", empty]).stderr

    # A state file naming a live process that is no shard of it (a recycled
    # pid: this test's own process): down leaves it alone.
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "cluster.json").write_text(json.dumps({
        "started_at": "2020-01-01T00:00:00Z", "started_unix_secs": 0, "ps_shard": "/x/ps-shard",
        "shards_flag": "127.0.0.1:1",
        "shards": [{"pid": os.getpid(), "endpoint": "127.0.0.1:1", "data_dir": str(stale / "s0"),
                    "log": str(stale / "s0.log")}],
    }))
    res = run([colonnade(), "cluster", "down", "--data-dir", stale])
    assert "not running" in res.stdout, res.describe()
    assert not (stale / "cluster.json").exists()

    # A state file that is not one is named, not trusted.
    (stale / "cluster.json").write_text('{"shards": [{"pid": 0}]}')
    res = run_fail([colonnade(), "cluster", "down", "--data-dir", stale])
    assert "cluster.json" in res.stderr, res.describe()


def test_a_taken_port_is_retried_and_a_missing_binary_named(tmp_path, clusters):
    """The port of each shard is taken once before it binds it (a ps-shard
    wrapper fails its first start as a bound port does): up starts it again
    on another port. Without ps-shard beside colonnade or on PATH, up names both."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy2(colonnade(), bin_dir / "colonnade")
    wrapper = bin_dir / "ps-shard"
    wrapper.write_text(
        "#!/bin/bash\n"
        "# args: --listen ADDR --data-dir DIR --threads T\n"
        'if [ ! -e "$4/port-taken-once" ]; then\n'
        '  touch "$4/port-taken-once"\n'
        '  echo "error: cannot listen on $2: Address already in use (os error 98)" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec {binary("ps-shard")} "$@"\n'
    )
    wrapper.chmod(0o755)
    data_dir = tmp_path / "c"
    clusters.dirs.append(data_dir)
    res = run([bin_dir / "colonnade", "cluster", "up", "--shards", "2", "--data-dir", data_dir, "--threads", "1"])
    clusters.remember(data_dir)
    assert "port was taken" in res.stderr, res.describe()
    st = state(data_dir)
    assert res.stdout.strip() == st["shards_flag"] and len(st["shards"]) == 2, res.describe()
    assert all(is_shard(s["pid"]) for s in st["shards"]), st
    run([colonnade(), "health", "--shards", st["shards_flag"]])
    run([colonnade(), "cluster", "down", "--data-dir", data_dir])

    wrapper.unlink()
    env = clean_env()
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run([bin_dir / "colonnade", "cluster", "up", "--shards", "1", "--data-dir", tmp_path / "d"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert str(bin_dir / "ps-shard") in proc.stderr and "PATH" in proc.stderr, proc.stderr


def test_export_picks_the_model_of_its_vocab(corpus_100k, tmp_path, clusters):
    """Two vocabularies (min-count 3 and 5) trained on one local cluster:
    export without --fingerprint takes the model of --vocab's vocabulary; a
    second model of one vocabulary (another seed) makes it refuse, listing both."""
    shards = ",".join(clusters.up(tmp_path / "c", 2, "--threads", "1"))
    vocabs = {}
    for min_count in (3, 5):
        vocabs[min_count] = tmp_path / f"vocab{min_count}.tsv"
        run([colonnade(), "vocab", "--corpus", corpus_100k, "--min-count", min_count,
             "--output", vocabs[min_count]])
        run(train_args(corpus_100k, shards=shards, vocab=vocabs[min_count], min_count=min_count, size=16))
    sizes = {mc: len(read_vocab_file(v)) for mc, v in vocabs.items()}
    assert sizes[3] > sizes[5]

    fingerprints = {}
    for mc, vocab in vocabs.items():
        out = tmp_path / f"export{mc}.h5"
        run([colonnade(), "export", "--shards", shards, "--vocab", vocab, "--output", out])
        with h5py.File(out, "r") as f:
            assert f["vectors"].shape == (sizes[mc], 16)
            assert list(f["words"].asstr()[()]) == [w for w, _ in read_vocab_file(vocab)]
            fingerprints[mc] = str(f.attrs["model_fingerprint"])
    assert fingerprints[3] != fingerprints[5]

    # A second model of vocabulary 3: export cannot choose, and says between what.
    run(train_args(corpus_100k, shards=shards, vocab=vocabs[3], min_count=3, size=16, seed=2))
    ambiguous = run_fail([colonnade(), "export", "--shards", shards, "--vocab", vocabs[3],
                          "--output", tmp_path / "x.h5"])
    assert "2 models trained with --vocab's vocabulary" in ambiguous.stderr, ambiguous.describe()
    assert fingerprints[3] in ambiguous.stderr and "--fingerprint" in ambiguous.stderr, ambiguous.describe()
    assert fingerprints[5] not in ambiguous.stderr, ambiguous.describe()
    assert not (tmp_path / "x.h5").exists()
    run([colonnade(), "export", "--shards", shards, "--vocab", vocabs[3], "--fingerprint", fingerprints[3],
         "--output", tmp_path / "x.h5"])
    # Vocabulary 5 still has one model.
    run([colonnade(), "export", "--shards", shards, "--vocab", vocabs[5], "--output", tmp_path / "y.h5"])
