#!/usr/bin/env python3
"""Helpers shared by the benchmarks in bench/ (quality.py, throughput.py).

- corpus decompression, child processes with their own rusage, /proc CPU times;
- the gensim 4.4 skip-gram baseline, run in a child process (this file is the
  child's script: `_common.py --gensim-worker-corpus ...`);
- one evaluation for every system: Google analogies (top-30k vocabulary,
  case-insensitive, 3CosAdd) and WS-353 Spearman ρ, both through gensim;
- a description of the machine for report headers.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import re
import resource
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = (REPO / ".." / "shared" / "data").resolve()
DEFAULT_CORPUS = DATA / "corpus" / "enwiki_text8style_part01.txt.xz"
DEFAULT_EVAL = DATA / "eval"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CLK_TCK = os.sysconf("SC_CLK_TCK")

_LOG_NAME = "quality"


# --------------------------------------------------------------------------- helpers


def set_log_name(name: str) -> None:
    """The tag `log` prints before each message (the benchmark's name)."""
    global _LOG_NAME
    _LOG_NAME = name


def log(msg: str) -> None:
    print(f"[{_LOG_NAME} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def decompress(src: Path, dst: Path) -> int:
    """Writes the plain text of `src` (xz, gzip or plain) to `dst`; returns its token count."""
    with open(src, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\xfd7zXZ\x00"):
        opener = lzma.open
    elif magic.startswith(b"\x1f\x8b"):
        import gzip

        opener = gzip.open
    else:
        opener = open
    tokens = 0
    with opener(src, "rb") as fin, open(dst, "wb") as fout:
        for line in fin:
            fout.write(line)
            tokens += len(line.split())
    return tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid: int, field: str) -> int:
    """A `VmRSS:`-style field of /proc/PID/status, in KiB (0 if absent)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def start_shards(bin_dir: Path, n: int, work: Path, tag: str) -> list[tuple[subprocess.Popen, str]]:
    """`n` `ps-shard --threads 1` processes of `bin_dir` on free loopback ports
    (logs under `work`), as (process, endpoint); stop them with stop_shards."""
    shards = []
    for i in range(n):
        port = free_port()
        logf = open(work / f"{tag}-shard{i}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen([str(bin_dir / "ps-shard"), "--listen", f"127.0.0.1:{port}", "--threads", "1"],
                             stdout=logf, stderr=subprocess.STDOUT)
        logf.close()
        shards.append((p, f"127.0.0.1:{port}"))
    time.sleep(1)
    return shards


def stop_shards(shards: list[tuple[subprocess.Popen, str]]) -> None:
    for p, _ in shards:
        p.send_signal(signal.SIGTERM)
    for p, _ in shards:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a running process (all its threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def watch_status(pid: int, fields: tuple[str, ...], done) -> tuple[dict, threading.Thread]:
    """Polls /proc/PID/status every 50 ms, until `done()` or the process is
    gone, keeping the largest value (KiB) of each of `fields` (e.g. VmHWM,
    RssAnon, RssFile). Returns the peaks (filled in as it runs) and the
    polling thread, to join once the process has exited."""
    peaks = dict.fromkeys(fields, 0)

    def poll() -> None:
        while not done():
            try:
                with open(f"/proc/{pid}/status", encoding="ascii") as f:
                    for line in f:
                        k = line.split(":", 1)[0]
                        if k in peaks:
                            peaks[k] = max(peaks[k], int(line.split()[1]))
            except (OSError, ValueError):
                return
            time.sleep(0.05)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    return peaks, t


def run_child(args: list[str], log_path: Path, on_line=None) -> dict:
    """Runs a child to completion, streaming its stderr to `log_path` (and to
    `on_line(line, pid)`); returns exit code, wall seconds and the child's own
    rusage (os.wait4): CPU seconds and peak RSS."""
    start = time.monotonic()
    proc = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1", "RUST_LIB_BACKTRACE": "0"},
    )

    def pump() -> None:
        with open(log_path, "w", encoding="utf-8") as logf:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = ANSI.sub("", raw.decode("utf-8", "replace"))
                logf.write(line)
                logf.flush()
                if on_line is not None:
                    on_line(line, proc.pid)

    # ru_maxrss of a child forked from this Python carries Python's own RSS
    # across the exec (Linux keeps the larger of the two), so small children
    # would all report this process's size: the child's own VmHWM (reset by
    # exec) is polled instead, the last reading before it exits.
    exited = threading.Event()
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    hwm, poller = watch_status(proc.pid, ("VmHWM",), exited.is_set)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    exited.set()
    poller.join()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    reader.join()
    return {
        "returncode": proc.returncode,
        "wall_seconds": wall,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "user_seconds": usage.ru_utime,
        "sys_seconds": usage.ru_stime,
        "peak_rss_mb": (hwm["VmHWM"] or usage.ru_maxrss) / 1024.0,  # KiB
        "ru_maxrss_mb": usage.ru_maxrss / 1024.0,
    }


def tail(path: Path, n: int = 30) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(True)[-n:])
    except OSError:
        return ""


def machine_info() -> dict:
    """nproc, the CPUs this process may use, CPU model, memory, kernel: for report headers."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
                break
    except (OSError, ValueError):
        pass
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        nproc = str(os.cpu_count())
    return {
        "node": platform.node(),
        "nproc": nproc,
        "cpus": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "cpu_model": model or platform.processor() or "unknown",
        "mem_total_gib": round(mem_kib / 1024 / 1024, 1) if mem_kib else None,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


# --------------------------------------------------------------------------- gensim


def gensim_worker(args: argparse.Namespace) -> None:
    """Runs in a child process: trains gensim and saves word2vec binary vectors."""
    import logging

    from gensim.models import Word2Vec
    from gensim.models.word2vec import LineSentence

    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
    import gensim

    model = Word2Vec(
        vector_size=args.size,
        window=args.window,
        negative=args.negative,
        min_count=args.min_count,
        sample=args.sample,
        alpha=args.alpha,
        min_alpha=0.0001,
        epochs=args.iter,
        sg=0 if getattr(args, "cbow", False) else 1,
        cbow_mean=1,
        hs=0,
        workers=args.threads,
        seed=args.seed,
    )
    corpus = LineSentence(args.gensim_worker_corpus, max_sentence_length=10_000)
    t0 = time.monotonic()
    model.build_vocab(corpus_iterable=corpus)
    vocab_seconds = time.monotonic() - t0
    init_scale = getattr(args, "init_scale", 1.0)
    if init_scale != 1.0:
        # e.g. 0.5: word2vec C's U[-0.5/d, 0.5/d) instead of gensim 4's U[-1/d, 1/d)
        model.wv.vectors *= init_scale
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    # gensim's `corpus_file=` mode: each worker reads 1/workers of the file,
    # with its own rate schedule (docs/benchmarks.md, "CBOW in few epochs:
    # gensim's two schedules"); else the iterable, as users of its API feed it.
    source = ({"corpus_file": args.gensim_worker_corpus} if getattr(args, "gensim_corpus_file", False)
              else {"corpus_iterable": corpus})
    trained_words, raw_words = model.train(
        **source,
        total_examples=model.corpus_count,
        total_words=model.corpus_total_words,
        epochs=model.epochs,
    )
    train_seconds = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    model.wv.save_word2vec_format(args.gensim_worker_out, binary=True)
    result = {
        "gensim_version": gensim.__version__,
        "vocab_seconds": vocab_seconds,
        "train_seconds": train_seconds,
        "train_cpu_seconds": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
        "corpus_tokens": int(model.corpus_total_words),
        "sentences": int(model.corpus_count),
        "vocab_size": len(model.wv),
        "trained_words": int(trained_words),
        "raw_words": int(raw_words),
    }
    Path(args.gensim_worker_result).write_text(json.dumps(result, indent=2))


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """A bench script's `NAME=FLAGS` variant (an argparse `type`): its name and
    its extra `colonnade train` flags, split as a shell would."""
    name, sep, flags = spec.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{spec!r}: expected NAME=FLAGS")
    return name.strip(), shlex.split(flags)


def add_training_args(p: argparse.ArgumentParser, iter_help: str | None = None) -> None:
    """The word2vec hyper-parameters of a benchmark (what `training_flags`
    passes on), with the defaults every benchmark here shares."""
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-4)
    p.add_argument("--alpha", type=float, default=0.025)
    p.add_argument("--iter", type=int, default=5, help=iter_help)


def training_flags(args: argparse.Namespace, iters: int) -> list[str]:
    """The word2vec hyper-parameters every trainer of a benchmark gets, as flags
    (`colonnade train` and the gensim worker take the same names)."""
    flags = [
        "--size", str(args.size),
        "--window", str(args.window),
        "--negative", str(args.negative),
        "--min-count", str(args.min_count),
        "--sample", repr(args.sample),
        "--alpha", repr(args.alpha),
        "--iter", str(iters),
    ]
    if getattr(args, "cbow", False):
        flags.append("--cbow")  # gensim: sg=0, cbow_mean=1
    return flags


def make_vocab(args: argparse.Namespace, plain: Path, work: Path) -> dict:
    """`colonnade vocab` of the corpus into work/vocab.tsv (min-count from `args`)."""
    vocab = work / "vocab.tsv"
    cmd = [str(args.bin_dir / "colonnade"), "vocab", "--corpus", str(plain),
           "--min-count", str(args.min_count), "--output", str(vocab)]
    log(f"vocabulary: {shlex.join(cmd)}")
    proc = run_child(cmd, work / "vocab.log")
    if proc["returncode"] != 0:
        raise SystemExit(f"colonnade vocab failed (exit {proc['returncode']}):\n{tail(work / 'vocab.log')}")
    with open(vocab, encoding="utf-8") as f:
        words = sum(1 for line in f if line.strip() and not line.startswith("#"))
    proc.update({"path": str(vocab), "words": words, "command": cmd})
    log(f"vocabulary: {words:,} words in {proc['wall_seconds']:.1f} s")
    return proc


def run_gensim(args: argparse.Namespace, plain: Path, work: Path, seed: int = 1, tag: str = "gensim",
               init_scale: float = 1.0, corpus_file: bool = False) -> dict:
    """One gensim training run in a child process (gensim's own `seed`; its
    initial input vectors times `init_scale`; with `corpus_file`, trained in
    gensim's `corpus_file=` mode instead of from an iterable)."""
    out = work / f"{tag}.bin"
    result_path = work / f"{tag}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--gensim-worker-corpus", str(plain),
        "--gensim-worker-out", str(out),
        "--gensim-worker-result", str(result_path),
        *training_flags(args, args.iter),
        "--threads", str(args.threads),
        "--seed", str(seed),
        "--gensim-worker-init-scale", repr(init_scale),
        *(["--gensim-worker-corpus-file"] if corpus_file else []),
    ]
    log("gensim: training (log: %s)" % (work / f"{tag}.log"))
    proc = run_child(cmd, work / f"{tag}.log")
    if proc["returncode"] != 0:
        raise SystemExit(f"gensim run failed (exit {proc['returncode']}, after {proc['wall_seconds']:.0f} s, "
                         f"peak RSS {proc['peak_rss_mb']:.0f} MB):\n{tail(work / f'{tag}.log')}")
    res = json.loads(result_path.read_text())
    res.update(proc)
    res["vectors"] = str(out)
    res["system"] = f"gensim {res['gensim_version']}"
    log(f"gensim: trained in {res['train_seconds']:.1f} s (vocabulary {res['vocab_seconds']:.1f} s)")
    return res


def add_gensim_worker_args(p: argparse.ArgumentParser) -> None:
    """The hidden options of the gensim child process."""
    p.add_argument("--gensim-worker-corpus", help=argparse.SUPPRESS)
    p.add_argument("--gensim-worker-out", help=argparse.SUPPRESS)
    p.add_argument("--gensim-worker-result", help=argparse.SUPPRESS)
    p.add_argument("--gensim-worker-init-scale", dest="init_scale", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--gensim-worker-corpus-file", dest="gensim_corpus_file", action="store_true", help=argparse.SUPPRESS)


# --------------------------------------------------------------------------- colonnade


def colonnade_version(bin_dir: Path) -> str:
    try:
        out = subprocess.run([str(bin_dir / "colonnade"), "--version"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "colonnade ?"


# --------------------------------------------------------------------------- evaluation


# The similarity sets scored beside WS-353 (bench/grid.py, bench/shared_negatives.py).
PAIR_SETS = {"simlex": "simlex999.txt", "men": "EN-MEN-TR-3k.txt"}


def pair_rhos(kv, eval_dir: Path) -> dict:
    """Spearman ρ of gensim KeyedVectors `kv` on each of PAIR_SETS, as
    `<set>_spearman` (gensim's `evaluate_word_pairs`, case-insensitive)."""
    out = {}
    for key, name in PAIR_SETS.items():
        _, spearman, _ = kv.evaluate_word_pairs(str(eval_dir / name), case_insensitive=True)
        out[f"{key}_spearman"] = float(getattr(spearman, "statistic", spearman[0]))
    return out


def evaluate(vectors: Path, eval_dir: Path) -> dict:
    """The same evaluation for every system, of a word2vec binary file."""
    from gensim.models import KeyedVectors

    return evaluate_kv(KeyedVectors.load_word2vec_format(str(vectors), binary=True), eval_dir)


def evaluate_kv(kv, eval_dir: Path) -> dict:
    """[`evaluate`] of vectors already loaded (gensim KeyedVectors `kv`)."""
    score, sections = kv.evaluate_word_analogies(
        str(eval_dir / "questions-words.txt"), restrict_vocab=30000, case_insensitive=True
    )
    per = {}
    sem = [0, 0]
    syn = [0, 0]
    for sec in sections:
        name = sec["section"]
        c, i = len(sec["correct"]), len(sec["incorrect"])
        per[name] = {"correct": c, "total": c + i}
        if name == "Total accuracy":
            continue
        bucket = syn if name.startswith("gram") else sem
        bucket[0] += c
        bucket[1] += c + i
    total = per.get("Total accuracy", {"correct": 0, "total": 0})
    pearson, spearman, oov = kv.evaluate_word_pairs(str(eval_dir / "wordsim353.tsv"), case_insensitive=True)
    rho = float(getattr(spearman, "statistic", spearman[0]))
    return {
        "analogy_accuracy": float(score),
        "analogy_correct": total["correct"],
        "analogy_questions": total["total"],
        "analogy_semantic": sem[0] / sem[1] if sem[1] else None,
        "analogy_syntactic": syn[0] / syn[1] if syn[1] else None,
        "analogy_sections": per,
        "ws353_spearman": rho,
        "ws353_pearson": float(pearson[0]),
        "ws353_oov_percent": float(oov),
        "vocab_size": len(kv),
    }


# --------------------------------------------------------------------------- report


def fmt(x, spec: str, none: str = "n/a") -> str:
    return none if x is None else format(x, spec)


# --------------------------------------------------------------------------- gensim child entry point


def _worker_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description="gensim child process of the bench/ scripts")
    add_gensim_worker_args(p)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--window", type=int, required=True)
    p.add_argument("--negative", type=int, required=True)
    p.add_argument("--min-count", type=int, required=True)
    p.add_argument("--sample", type=float, required=True)
    p.add_argument("--alpha", type=float, required=True)
    p.add_argument("--iter", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--cbow", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if not (args.gensim_worker_corpus and args.gensim_worker_out and args.gensim_worker_result):
        p.error("--gensim-worker-corpus, --gensim-worker-out and --gensim-worker-result are required")
    gensim_worker(args)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
