"""Shared fixtures for the end-to-end tests of the Colonnade binaries.

The tests run the real release binaries (`colonnade`, `ps-shard`,
`colonnade-export`) as subprocesses and check their output files with the real
readers people use: h5py for HDF5 and gensim for the word2vec formats.

The binaries' directory is $COLONNADE_BIN_DIR (default: <repo>/target/release).
Missing binaries make every test error out with a message saying how to build
them; nothing is skipped.
"""

from __future__ import annotations

import collections
import lzma
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("COLONNADE_BIN_DIR", str(REPO / "target" / "release")))
SAMPLE_XZ = REPO / "testdata" / "sample.txt.xz"

# Words taken from the start of testdata/sample.txt.xz for the small corpus.
SMALL_CORPUS_WORDS = 300_000

# Generous per-command limit; the small runs take a few seconds each.
COMMAND_TIMEOUT = 180

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def binary(name: str) -> Path:
    return BIN_DIR / name


def colonnade() -> Path:
    return binary("colonnade")


def row_bytes(cols: int) -> int:
    """Bytes of one shard row of `cols` f32 cells (docs/deploy.md "Sizing"): the cells and a 4-byte
    lock slot; rows of whole cache lines (a multiple of 16 columns) keep a 1-byte lock apart."""
    return cols * 4 + (1 if cols > 0 and cols % 16 == 0 else 4)


@pytest.fixture(scope="session", autouse=True)
def _binaries_present() -> None:
    missing = [
        str(binary(n))
        for n in ("colonnade", "ps-shard", "colonnade-export")
        if not (binary(n).is_file() and os.access(binary(n), os.X_OK))
    ]
    if missing:
        pytest.fail(
            "Colonnade binaries not found: "
            + ", ".join(missing)
            + ". Build them with `cargo build --release -p colonnade-client "
            "-p colonnade-ps-shard -p colonnade-exporter` or point "
            "COLONNADE_BIN_DIR at the directory holding them.",
            pytrace=False,
        )


def clean_env() -> dict[str, str]:
    """The environment for the binaries: no stray COLONNADE_* settings (every
    flag has an env twin, so a leftover variable would change what is tested),
    no colours in the logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLONNADE_")}
    env["NO_COLOR"] = "1"
    # Error reports without anyhow's backtraces (panics still show theirs).
    env["RUST_LIB_BACKTRACE"] = "0"
    return env


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (
            f"command: {' '.join(self.args)}\nexit code: {self.returncode}\n"
            f"--- stderr ---\n{_clip(self.stderr)}\n--- stdout ---\n{_clip(self.stdout)}"
        )


def _clip(text: str, head: int = 4000, tail: int = 2000) -> str:
    """The start (where anyhow puts the error) and the end of a long output."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


def run(args: list, *, expect_ok: bool = True, timeout: float = COMMAND_TIMEOUT) -> Result:
    """Runs a command; with expect_ok, fails the test (showing stderr) on a non-zero exit."""
    args = [str(a) for a in args]
    start = time.monotonic()
    proc = subprocess.run(
        args,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )
    res = Result(
        args=args,
        returncode=proc.returncode,
        stdout=ANSI.sub("", proc.stdout.decode("utf-8", "replace")),
        stderr=ANSI.sub("", proc.stderr.decode("utf-8", "replace")),
        seconds=time.monotonic() - start,
    )
    if expect_ok and res.returncode != 0:
        pytest.fail("command failed\n" + res.describe(), pytrace=False)
    return res


def run_fail(args: list, *, timeout: float = COMMAND_TIMEOUT) -> Result:
    """Runs a command that must fail: non-zero exit, no crash by signal or panic."""
    res = run(args, expect_ok=False, timeout=timeout)
    assert res.returncode > 0, "expected a failing exit code\n" + res.describe()
    assert "panicked" not in res.stderr, "the binary panicked instead of reporting an error\n" + res.describe()
    return res


def train_args(corpus, **flags) -> list[str]:
    """`colonnade train` with small defaults; flags use Python names (min_count=3)
    and True for switches; None drops a default."""
    defaults = dict(
        size=24,
        window=3,
        negative=3,
        min_count=3,
        sample=1e-3,
        alpha=0.025,
        iter=1,
        threads=2,
        seed=1,
    )
    defaults.update(flags)
    corpus = corpus if isinstance(corpus, (list, tuple)) else [corpus]
    args: list[str] = [str(colonnade()), "train", "--corpus", *map(str, corpus)]
    for k, v in defaults.items():
        if v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        if v is True:
            args.append(flag)
        else:
            args += [flag, str(v)]
    return args


def read_vocab_file(path: Path) -> list[tuple[str, int]]:
    """Parses a vocabulary file: an optional first line `# colonnade vocabulary ...`,
    then `word<TAB>count` lines, the word taken literally (it may start with '#')."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or (lineno == 1 and line.startswith("# colonnade vocabulary")):
                continue
            word, count = line.split("\t")
            out.append((word, int(count)))
    return out


def vocab_header_fingerprint(path: Path) -> str:
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    m = re.search(r"fingerprint ([0-9a-f]{16})", first)
    assert m, f"{path}: no fingerprint in header line {first!r}"
    return m.group(1)


def count_words(path: Path, min_count: int) -> list[tuple[str, int]]:
    """Independent vocabulary: ASCII-whitespace tokens with count >= min_count,
    ordered by count descending, then UTF-8 bytes ascending."""
    counts: collections.Counter[str] = collections.Counter()
    with open(path, "rb") as f:
        for line in f:
            counts.update(t.decode("utf-8") for t in line.split())
    kept = [(w, c) for w, c in counts.items() if c >= min_count]
    kept.sort(key=lambda wc: (-wc[1], wc[0].encode("utf-8")))
    return kept


def corpus_tokens(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(len(line.split()) for line in f)


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """The first ~300K words of testdata/sample.txt.xz, cut between lines (read-only)."""
    assert SAMPLE_XZ.is_file(), f"sample corpus missing: {SAMPLE_XZ}"
    out = tmp_path_factory.mktemp("corpus") / "small.txt"
    words = 0
    with lzma.open(SAMPLE_XZ, "rb") as src, open(out, "wb") as dst:
        for line in src:
            dst.write(line)
            words += len(line.split())
            if words >= SMALL_CORPUS_WORDS:
                break
    assert words >= SMALL_CORPUS_WORDS // 2, f"sample corpus too small: {words} words"
    return out


@pytest.fixture(scope="session")
def corpus_100k(small_corpus, tmp_path_factory) -> Path:
    """The first ~100K words of the small corpus, for tests that train several times."""
    out = tmp_path_factory.mktemp("corpus100k") / "100k.txt"
    words = 0
    with open(small_corpus, "rb") as src, open(out, "wb") as dst:
        for line in src:
            dst.write(line)
            words += len(line.split())
            if words >= 100_000:
                break
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released; nothing else of
    ours binds it)."""
    return free_port()


@dataclass
class Shard:
    endpoint: str
    proc: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        try:
            return ANSI.sub("", self.log.read_text(errors="replace"))
        except OSError:
            return ""


@dataclass
class ShardLauncher:
    """Starts `ps-shard` processes on free loopback ports; stop_all() ends them."""

    workdir: Path
    shards: list[Shard] = field(default_factory=list)

    def start(self, n: int, threads: int = 1, args: tuple = ()) -> list[str]:
        """`n` shards, each also given `args` (e.g. `--auth-token-file`)."""
        started = [self._start_one(threads, args) for _ in range(n)]
        return [s.endpoint for s in started]

    def _start_one(self, threads: int, args: tuple = ()) -> Shard:
        last = ""
        for attempt in range(5):
            port = free_port()
            endpoint = f"127.0.0.1:{port}"
            log = self.workdir / f"ps-shard-{port}.log"
            with open(log, "wb") as logf:
                proc = subprocess.Popen(
                    [str(binary("ps-shard")), "--listen", endpoint, "--threads", str(threads),
                     *map(str, args)],
                    env=clean_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                )
            shard = Shard(endpoint, proc, log)
            self.shards.append(shard)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break  # e.g. the port was taken meanwhile: try another one
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        return shard
                except OSError:
                    time.sleep(0.05)
            last = f"ps-shard on {endpoint} (exit {proc.poll()}):\n{shard.log_text()}"
            self._stop(shard)
        pytest.fail(f"could not start a ps-shard; last attempt: {last}", pytrace=False)

    @staticmethod
    def _stop(shard: Shard) -> None:
        if shard.proc.poll() is None:
            shard.proc.terminate()
            try:
                shard.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                shard.proc.kill()
                shard.proc.wait(timeout=10)

    def alive(self) -> list[str]:
        return [s.endpoint for s in self.shards if s.proc.poll() is None]

    def logs(self) -> str:
        return "\n".join(f"--- {s.endpoint} ---\n{s.log_text()}" for s in self.shards)

    def stop_all(self) -> None:
        for s in self.shards:
            self._stop(s)


@pytest.fixture
def shard_launcher(tmp_path):
    launcher = ShardLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.stop_all()
