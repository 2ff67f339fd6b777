#!/usr/bin/env python3
"""Throughput and wire-efficiency benchmark: Colonnade against gensim 4.4 skip-gram.

In one run, on the same decompressed corpus and the same settings (default:
--size 100 --window 5 --negative 5 --min-count 5 --sample 1e-4 --iter 5) and
on the same two cores (every child inherits this process's CPU affinity,
--cores, default the first two CPUs it may use):

1. gensim `Word2Vec(sg=1, hs=0, workers=2, seed=1)` (bench/_common.py, the
   same baseline as bench/quality.py);
2. Colonnade, shards inside the client: `colonnade train --embedded-shards 2
   --threads 2` (training calls the two shards' cores in process: no wire);
3. Colonnade as separate processes: two `ps-shard --threads 1`, shard i pinned
   with `taskset` to core i of --cores, and `colonnade train --shards ...
   --threads 2` pinned to all of them. The shards are always stopped at the end.

Both Colonnade runs load one vocabulary file written beforehand by `colonnade
vocab` (timed on its own), so no Colonnade process counts the corpus.

Reported for each: training words/s (corpus tokens × epochs ÷ training time;
gensim: its `train()` call, Colonnade: the `seconds` of its --summary, i.e.
without vocabulary, model creation and export), training CPU seconds (gensim:
getrusage around `train()`; Colonnade: utime+stime from /proc/<pid>/stat of the
client and, for (3), of every shard process, sampled when the client logs
"model ready on every shard" and "training done"), whole-process CPU seconds
and peak RSS (os.wait4; for (3) summed over the client and the shards), Google
analogies (top-30k vocabulary, case-insensitive, 3CosAdd) and WS-353 ρ, and
the words/s ratio Colonnade/gensim.

Wire efficiency of each Colonnade run, per trained (post-subsampling) input
word T: measured bytes_sent/T, bytes_received/T (gRPC payloads as counted by
the client, see --summary), against the paper's r′ = w·(n+1)·S·4 bytes per
direction (formula (7), w = pairs/T, n negatives, S shards) and a conventional
parameter server's (2 + w·n)·d·4 (formula (2)).

What TLS costs: --tls-pairs N runs the separate-process setup N times in
plaintext and N times with mutual TLS and the bearer token (certificates from
`colonnade certs`), alternating plaintext, TLS, plaintext, TLS, ... with
--sweep-iter epochs each, and reports the words/s of every run, each pair's
ratio TLS/plaintext and the median ratio.

Sweeps (one run per value, all other settings at their defaults, --sweep-iter
epochs): --minibatch-sweep (embedded, and separate ps-shard processes, where
the minibatch also sets the number of RPCs), --in-flight-sweep (separate
processes: with shards in process a pipeline computes on its own thread and
has one minibatch in flight), --shards-sweep (embedded). --sweeps-only skips
the three main runs.

Prints a markdown report (command, date, machine at the top) and writes it
with the JSON results to bench/results/throughput-<time>-<corpus>-iter<N>.{json,md}.

Usage (from any directory):
    bench/throughput.sh                                    # build, set up, full run
    .venv/bin/python bench/throughput.py --iter 1 --corpus testdata/sample.txt.xz
    .venv/bin/python bench/throughput.py --sweeps-only --sweep-iter 1 \\
        --minibatch-sweep 64,256,1024 --in-flight-sweep 1,2,4 --shards-sweep 1,2,4
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    DEFAULT_CORPUS,
    DEFAULT_EVAL,
    REPO,
    add_training_args,
    colonnade_version,
    decompress,
    evaluate,
    fmt,
    log,
    machine_info,
    make_vocab,
    proc_cpu_seconds,
    run_child,
    run_gensim,
    set_log_name,
    tail,
    training_flags,
)

set_log_name("throughput")

START_MARK = "model ready on every shard"
END_MARK = "training done"


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM of a running process."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return None


class Shard:
    """A `ps-shard` child process, optionally pinned to CPUs with taskset."""

    def __init__(self, bin_dir: Path, index: int, port: int, cpus: list[int] | None, threads: int, log_path: Path,
                 secrets: Path | None = None):
        self.index = index
        listen = f"127.0.0.1:{port}"
        self.endpoint = f"https://localhost:{port}" if secrets else listen
        self.cmd = []
        if cpus is not None:
            self.cmd += ["taskset", "-c", ",".join(map(str, cpus))]
        self.cmd += [str(bin_dir / "ps-shard"), "--listen", listen, "--threads", str(threads)]
        if secrets:
            self.cmd += ["--tls-cert", str(secrets / "shard.crt"), "--tls-key", str(secrets / "shard.key"),
                         "--tls-ca", str(secrets / "ca.crt"), "--auth-token-file", str(secrets / "token")]
        self.log_path = log_path
        self._logf = open(log_path, "wb")
        # taskset execs ps-shard: the pid is the shard's.
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._logf,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"},
        )
        self.rusage: dict | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> dict:
        """SIGTERM (then SIGKILL after `timeout`), reaps with os.wait4; returns
        whole-process CPU seconds, peak RSS and exit code. Idempotent."""
        if self.rusage is not None:
            return self.rusage
        pid = self.proc.pid
        hwm = peak_rss_mb(pid)
        usage = status = None
        if self.proc.returncode is None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while True:
                try:
                    wpid, status, usage = os.wait4(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if wpid == pid:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    _, status, usage = os.wait4(pid, 0)
                    break
                time.sleep(0.05)
            self.proc.returncode = os.waitstatus_to_exitcode(status) if status is not None else -1
        self._logf.close()
        self.rusage = {
            "returncode": self.proc.returncode,
            "cpu_seconds": (usage.ru_utime + usage.ru_stime) if usage else None,
            "peak_rss_mb": (usage.ru_maxrss / 1024.0) if usage else hwm,
        }
        return self.rusage


# --------------------------------------------------------------------------- colonnade


def run_colonnade(
    args: argparse.Namespace,
    plain: Path,
    work: Path,
    vocab: Path,
    tag: str,
    system: str,
    *,
    embedded_shards: int | None = None,
    separate_shards: int | None = None,
    iters: int,
    flags: list[str] = (),
    bin_dir: Path | None = None,
    secrets: Path | None = None,
) -> dict:
    """One `colonnade train`, with embedded shards or with `separate_shards`
    ps-shard processes started (and always stopped) here; with `secrets` (a
    `colonnade certs` directory) the shards serve mutual TLS and want the
    token, and the client presents both."""
    bin_dir = bin_dir or args.bin_dir
    binary = work / f"{tag}.bin"
    summary = work / f"{tag}.summary.json"
    shards: list[Shard] = []
    client_prefix: list[str] = []
    try:
        if separate_shards is not None:
            for i in range(separate_shards):
                cpus = [args.cores[i % len(args.cores)]] if args.pin else None
                shards.append(Shard(bin_dir, i, free_port(), cpus, args.shard_threads, work / f"{tag}.shard{i}.log",
                                    secrets))
            if args.pin:
                client_prefix = ["taskset", "-c", ",".join(map(str, args.cores))]
            shard_flags = ["--shards", ",".join(s.endpoint for s in shards)]
            if secrets:
                shard_flags += ["--tls-ca", str(secrets / "ca.crt"), "--tls-cert", str(secrets / "client.crt"),
                                "--tls-key", str(secrets / "client.key"),
                                "--auth-token-file", str(secrets / "token")]
            for s in shards:
                log(f"{tag}: shard {s.index}: {shlex.join(s.cmd)} (pid {s.proc.pid})")
        else:
            shard_flags = ["--embedded-shards", str(embedded_shards)]
        cmd = [
            *client_prefix,
            str(bin_dir / "colonnade"), "train",
            "--corpus", str(plain),
            "--vocab", str(vocab),
            *shard_flags,
            "--threads", str(args.threads),
            *training_flags(args, iters),
            "--seed", str(args.seed),
            *flags,
            *args.colonnade_extra,
            "--output-binary", str(binary),
            "--summary", str(summary),
        ]
        marks: dict[str, list[float | None]] = {}

        def sample(pid: int) -> list[float | None]:
            return [proc_cpu_seconds(pid)] + [proc_cpu_seconds(s.proc.pid) for s in shards]

        def on_line(line: str, pid: int) -> None:
            if START_MARK in line and "start" not in marks:
                marks["start"] = sample(pid)
            elif END_MARK in line and "end" not in marks:
                marks["end"] = sample(pid)
                # Peak RSS of the shards during training (before export).
                marks["shard_hwm"] = [peak_rss_mb(s.proc.pid) for s in shards]
            if "progress" in line or line.startswith("trained "):
                log(f"{tag}: {line.strip()}")

        log(f"{tag}: {shlex.join(cmd)}")
        proc = run_child(cmd, work / f"{tag}.log", on_line)
        if proc["returncode"] != 0:
            dead = [s for s in shards if not s.alive()]
            more = "".join(f"\nshard {s.index} exited early:\n{tail(s.log_path, 10)}" for s in dead)
            raise SystemExit(f"{tag} failed (exit {proc['returncode']}):\n{tail(work / f'{tag}.log')}{more}")
        for s in shards:
            if not s.alive():
                raise SystemExit(f"{tag}: shard {s.index} exited during the run:\n{tail(s.log_path, 10)}")
    finally:
        shard_usage = [s.stop() for s in shards]

    s = json.loads(summary.read_text())
    start, end = marks.get("start"), marks.get("end")
    per_cpu = None
    if start and end and all(x is not None for x in start + end):
        per_cpu = [e - b for b, e in zip(start, end)]
    with open(binary, "rb") as f:
        vocab_size = int(f.readline().split()[0])
    res = {
        "system": system,
        "tag": tag,
        "mode": "separate" if shards else "embedded",
        "command": cmd,
        "shard_commands": [sh.cmd for sh in shards],
        "shards": separate_shards if shards else embedded_shards,
        "iter": iters,
        "flags": list(flags),
        "train_seconds": s["seconds"],
        "train_cpu_seconds": sum(per_cpu) if per_cpu else None,
        "train_cpu_client_seconds": per_cpu[0] if per_cpu else None,
        "train_cpu_shard_seconds": per_cpu[1:] if per_cpu else None,
        "corpus_tokens_all_epochs": s["tokens"],
        "vocab_size": vocab_size,
        "summary": s,
        "vectors": str(binary),
        "version": colonnade_version(bin_dir),
        "client": dict(proc),
    }
    # Whole processes: the client plus (separate mode) every shard.
    res["wall_seconds"] = proc["wall_seconds"]
    res["cpu_seconds"] = proc["cpu_seconds"] + sum(u["cpu_seconds"] or 0.0 for u in shard_usage)
    res["peak_rss_mb"] = proc["peak_rss_mb"] + sum(u["peak_rss_mb"] or 0.0 for u in shard_usage)
    res["shard_processes"] = shard_usage
    res["shard_peak_rss_training_mb"] = marks.get("shard_hwm")
    res["wire"] = wire(s, args.negative, res["shards"], args.size)
    log(f"{tag}: trained in {res['train_seconds']:.1f} s")
    return res


def wire(s: dict, n: int, shards: int, d: int) -> dict | None:
    """Bytes per trained input word, measured and by the paper's formulas."""
    t = s.get("trained_words") or 0
    if t <= 0 or not (s.get("bytes_sent") or s.get("bytes_received")):
        return None  # shards called in process: nothing crossed a wire
    w = s["pairs"] / t
    sent, recv = s["bytes_sent"] / t, s["bytes_received"] / t
    r7 = w * (n + 1) * shards * 4  # formula (7), per direction
    r2 = (2 + w * n) * d * 4  # formula (2), per direction
    # What docs/design.md predicts (API 4): both requests carry the windows,
    # ≈ 4 bytes of id + 1 byte of radius per trained word and shard (plus the
    # few context words at segment edges), and adjust's weights travel as
    # half floats: sent ≈ r′/2 + 2·5·S, received = r′ (f32 dot products).
    ids = 5 * shards
    return {
        "trained_words": t,
        "w": w,
        "n": n,
        "S": shards,
        "d": d,
        "bytes_sent_per_word": sent,
        "bytes_received_per_word": recv,
        "bytes_per_word": sent + recv,
        "r_prime_7": r7,
        "r_conventional_2": r2,
        "sent_over_r_prime": sent / r7 if r7 else None,
        "received_over_r_prime": recv / r7 if r7 else None,
        "total_over_2r_prime": (sent + recv) / (2 * r7) if r7 else None,
        "ids_per_word_per_call": ids,
        "sent_expected_with_ids": r7 / 2 + 2 * ids,
        "received_expected": r7,
        "conventional_over_measured": (2 * r2) / (sent + recv) if sent + recv else None,
        "bytes_per_minibatch": (s["bytes_sent"] + s["bytes_received"]) / s["minibatches"] if s.get("minibatches") else None,
        "pairs_per_minibatch": s["pairs"] / s["minibatches"] if s.get("minibatches") else None,
        "inputs_per_minibatch": t / s["minibatches"] if s.get("minibatches") else None,
    }


# --------------------------------------------------------------------------- report


def main_table(rows: list[dict], gensim: dict | None) -> str:
    lines = [
        "| system | train s | words/s | ×gensim | train CPU s | words/CPU-s | proc CPU s | peak RSS MB | vocab "
        "| analogy % (sem / syn) | WS-353 ρ |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        e = r["eval"]
        ratio = r["words_per_second"] / gensim["words_per_second"] if gensim else None
        sem = None if e["analogy_semantic"] is None else 100 * e["analogy_semantic"]
        syn = None if e["analogy_syntactic"] is None else 100 * e["analogy_syntactic"]
        cpu = fmt(r.get("train_cpu_seconds"), ".1f")
        if r.get("train_cpu_shard_seconds"):
            cpu += " (client " + fmt(r["train_cpu_client_seconds"], ".1f") + ", shards " + \
                " + ".join(fmt(x, ".1f") for x in r["train_cpu_shard_seconds"]) + ")"
        rss = f"{r['peak_rss_mb']:.0f}"
        if r.get("shard_processes"):
            rss += f" (client {r['client']['peak_rss_mb']:.0f}, shards " + \
                " + ".join(fmt(u['peak_rss_mb'], '.0f') for u in r["shard_processes"]) + ")"
        lines.append(
            f"| {r['system']} | {r['train_seconds']:.1f} | {r['words_per_second']:,.0f} "
            f"| {fmt(ratio, '.2f')}{'×' if ratio is not None else ''} | {cpu} | {fmt(r.get('words_per_cpu_second'), ',.0f')} "
            f"| {r['cpu_seconds']:.1f} | {rss} "
            f"| {r['vocab_size']:,} | {100 * e['analogy_accuracy']:.1f} ({fmt(sem, '.1f')} / {fmt(syn, '.1f')}) "
            f"| {e['ws353_spearman']:.3f} |"
        )
    return "\n".join(lines)


def wire_table(rows: list[dict]) -> str:
    lines = [
        "| run | S | T/minibatch | w = pairs/T | sent B/word | recv B/word | total B/word | r′ (7) | sent/r′ | recv/r′ "
        "| total/2r′ | r′/2 + ids (sent) | conv. PS (2) | conv. 2·(2) / total |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        x = r.get("wire")
        if not x:
            continue
        lines.append(
            f"| {r['system']} | {x['S']} | {fmt(x['inputs_per_minibatch'], '.1f')} | {x['w']:.3f} | {x['bytes_sent_per_word']:.1f} "
            f"| {x['bytes_received_per_word']:.1f} | {x['bytes_per_word']:.1f} | {x['r_prime_7']:.1f} "
            f"| {x['sent_over_r_prime']:.3f} | {x['received_over_r_prime']:.3f} | {x['total_over_2r_prime']:.3f} "
            f"| {x['sent_expected_with_ids']:.1f} | {x['r_conventional_2']:,.0f} | {x['conventional_over_measured']:.1f}× |"
        )
    return "\n".join(lines)


def sweep_table(rows: list[dict]) -> str:
    lines = [
        "| sweep | shards | value | epochs | train s | words/s | train CPU s | words/CPU-s | T/minibatch | B/word (sent + recv) "
        "| total/2r′ | analogy % | WS-353 ρ |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        x = r.get("wire") or {}
        mode = {"embedded": "in process", "separate": "processes"}.get(r.get("sweep_mode"), "")
        if r.get("sweep_detail"):
            mode += f" ({r['sweep_detail']})"
        lines.append(
            f"| {r['sweep']} | {mode} | {r['sweep_value']} | {r['iter']} | {r['train_seconds']:.1f} | {r['words_per_second']:,.0f} "
            f"| {fmt(r.get('train_cpu_seconds'), '.1f')} | {fmt(r.get('words_per_cpu_second'), ',.0f')} "
            f"| {fmt(x.get('inputs_per_minibatch'), '.1f')} | {fmt(x.get('bytes_per_word'), '.1f')} "
            f"| {fmt(x.get('total_over_2r_prime'), '.3f')} | {100 * r['eval']['analogy_accuracy']:.1f} "
            f"| {r['eval']['ws353_spearman']:.3f} |"
        )
    return "\n".join(lines)


def git_state() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command_line(argv: list[str]) -> str:
    via = os.environ.get("COLONNADE_BENCH_ENTRY")  # set by bench/throughput.sh
    prog = via or f"{Path(sys.executable).name} bench/throughput.py"
    return " ".join([prog, shlex.join(argv)]).strip()


# --------------------------------------------------------------------------- main


def int_list(s: str | None) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()] if s else []


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Colonnade (embedded and separate-process shards) vs gensim: words/s, CPU, memory, "
        "quality and bytes on the wire per word, on the same corpus and cores.",
    )
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="corpus file (plain, .xz or .gz); default: %(default)s")
    p.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL, help="folder with questions-words.txt and wordsim353.tsv")
    p.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("COLONNADE_BIN_DIR", REPO / "target" / "release")))
    add_training_args(p, iter_help="epochs of the main runs (default: %(default)s)")
    p.add_argument("--cbow", action="store_true", help="CBOW instead of skip-gram, in every system (gensim sg=0, cbow_mean=1)")
    p.add_argument("--seed", type=int, default=1, help="Colonnade run seed (gensim always uses seed=1)")
    p.add_argument("--threads", type=int, default=2, help="gensim workers and Colonnade client threads (default: %(default)s)")
    p.add_argument("--shards", type=int, default=2, help="shards of the main Colonnade runs, embedded and separate (default: %(default)s)")
    p.add_argument("--embedded-shards", type=int, default=None,
                   help="shards of the main embedded runs (default: --shards)")
    p.add_argument("--shard-threads", type=int, default=1, help="--threads of each separate ps-shard (default: %(default)s)")
    p.add_argument("--cores", default=None,
                   help="comma-separated CPU ids every run is confined to; separate shard i is pinned to the "
                        "i-th (mod count), the client to all (default: the first 2 CPUs this process may use)")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="do not confine or pin anything")
    p.add_argument("--baseline-bin-dir", type=Path, default=None,
                   help="binaries of an older build: its embedded and separate runs go right before the current "
                        "build's, in the same run (old vs new)")
    p.add_argument("--skip", default="", help="comma-separated main runs to skip: gensim, embedded, separate")
    p.add_argument("--sweeps-only", action="store_true", help="skip the three main runs, run the sweeps only")
    p.add_argument("--minibatch-sweep", default=None, help="comma-separated --minibatch values (embedded and separate)")
    p.add_argument("--in-flight-sweep", default=None, help="comma-separated --in-flight values (separate processes)")
    p.add_argument("--shards-sweep", default=None, help="comma-separated --embedded-shards values")
    p.add_argument("--parallelism-sweep", default=None,
                   help="comma-separated numbers P of minibatches in flight at once (separate processes): "
                        "P = 1 is --threads 1 --in-flight 1 --minibatches-per-call 1, P ≥ 2 is --threads 2 "
                        "--in-flight 1 --minibatches-per-call P/2 (quality against parallelism)")
    p.add_argument("--sweep-iter", type=int, default=None, help="epochs of each sweep run (default: --iter)")
    p.add_argument("--tls-pairs", type=int, default=0,
                   help="pairs of separate-process runs, plaintext then mutual TLS + token, --sweep-iter epochs each")
    p.add_argument("--colonnade-args", default="", help="extra flags for every `colonnade train`, one string")
    p.add_argument("--json-out", type=Path, default=None,
                   help="result file (default: <repo>/bench/results/throughput-<time>-<corpus>-iter<N>.json; the markdown goes next to it)")
    p.add_argument("--workdir", type=Path, default=None, help="keep the corpus, vectors and logs here (default: a temp dir, removed)")
    args = p.parse_args(argv)
    args.skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    unknown = args.skip - {"gensim", "embedded", "separate"}
    if unknown:
        p.error(f"--skip: unknown run(s) {sorted(unknown)}")
    args.minibatch_sweep = int_list(args.minibatch_sweep)
    args.in_flight_sweep = int_list(args.in_flight_sweep)
    args.shards_sweep = int_list(args.shards_sweep)
    args.parallelism_sweep = int_list(args.parallelism_sweep)
    bad = [p for p in args.parallelism_sweep if p < 1 or (p > 1 and p % 2)]
    if bad:
        p.error(f"--parallelism-sweep: {bad}: each value must be 1 or even")
    args.colonnade_extra = shlex.split(args.colonnade_args)
    if args.sweep_iter is None:
        args.sweep_iter = args.iter
    if args.embedded_shards is None:
        args.embedded_shards = args.shards
    return args


def _terminate(signum, _frame):
    # Turn SIGTERM/SIGHUP into an exception so the `finally` blocks stop the shards.
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    args.corpus = args.corpus.resolve()
    args.eval_dir = args.eval_dir.resolve()
    args.bin_dir = args.bin_dir.resolve()
    if args.baseline_bin_dir:
        args.baseline_bin_dir = args.baseline_bin_dir.resolve()
    for f in (args.corpus, args.eval_dir / "questions-words.txt", args.eval_dir / "wordsim353.tsv"):
        if not f.is_file():
            raise SystemExit(f"missing input file: {f}")
    needed = ["colonnade", "ps-shard"]
    for b in needed:
        if not os.access(args.bin_dir / b, os.X_OK):
            raise SystemExit(f"{args.bin_dir / b} not found: run `cargo build --release` (or bench/throughput.sh)")
    if args.pin and not shutil.which("taskset"):
        raise SystemExit("taskset not found (util-linux); install it or pass --no-pin")

    allowed = sorted(os.sched_getaffinity(0))
    if args.cores:
        args.cores = int_list(args.cores)
        bad = [c for c in args.cores if c not in allowed]
        if bad:
            raise SystemExit(f"--cores {bad} not available (this process may use {allowed})")
    else:
        args.cores = allowed[:2]
    if args.pin:
        # Every child (gensim, colonnade, the shards) inherits this affinity.
        os.sched_setaffinity(0, args.cores)
    machine = machine_info()
    now = _dt.datetime.now().astimezone()
    stamp = now.strftime("%Y%m%d-%H%M%S")
    m = re.search(r"part\d+", args.corpus.name)
    corpus_tag = m.group(0) if m else args.corpus.name.split(".")[0]
    # e.g. throughput-20261122-153000-part01-iter5.json (.gitignore keeps *-part01-*.json)
    default_json = REPO / "bench" / "results" / f"throughput-{stamp}-{corpus_tag}-iter{args.iter}.json"
    json_out = (args.json_out or default_json).resolve()
    md_out = json_out.with_suffix(".md")
    command = command_line(argv)
    load_before = os.getloadavg()

    keep = args.workdir is not None
    work = args.workdir.resolve() if keep else Path(tempfile.mkdtemp(prefix="colonnade-throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        plain = work / "corpus.txt"
        log(f"decompressing {args.corpus} -> {plain}")
        t0 = time.monotonic()
        tokens = decompress(args.corpus, plain)
        log(f"corpus: {tokens:,} tokens ({time.monotonic() - t0:.1f} s)")
        vocab = make_vocab(args, plain, work)
        vocab_path = Path(vocab["path"])

        rows: list[dict] = []
        gensim_row = None
        if not args.sweeps_only:
            if "gensim" not in args.skip:
                gensim_row = run_gensim(args, plain, work)
                gensim_row["iter"] = args.iter
                rows.append(gensim_row)
            if "embedded" not in args.skip and args.baseline_bin_dir:
                rows.append(run_colonnade(
                    args, plain, work, vocab_path, "baseline-embedded",
                    f"baseline: {args.embedded_shards} embedded shard(s)",
                    embedded_shards=args.embedded_shards, iters=args.iter, bin_dir=args.baseline_bin_dir))
            if "embedded" not in args.skip:
                rows.append(run_colonnade(
                    args, plain, work, vocab_path, "embedded",
                    f"Colonnade, {args.embedded_shards} embedded shard(s)",
                    embedded_shards=args.embedded_shards, iters=args.iter))
            if "separate" not in args.skip and args.baseline_bin_dir:
                rows.append(run_colonnade(
                    args, plain, work, vocab_path, "baseline-separate",
                    f"baseline: {args.shards} ps-shard processes",
                    separate_shards=args.shards, iters=args.iter, bin_dir=args.baseline_bin_dir))
            if "separate" not in args.skip:
                rows.append(run_colonnade(
                    args, plain, work, vocab_path, "separate",
                    f"Colonnade, {args.shards} ps-shard processes",
                    separate_shards=args.shards, iters=args.iter))

        sweeps: list[dict] = []
        for name, flag, values, modes in (
            ("minibatch", "--minibatch", args.minibatch_sweep, ("embedded", "separate")),
            ("in-flight", "--in-flight", args.in_flight_sweep, ("separate",)),
            ("shards", None, args.shards_sweep, ("embedded",)),
        ):
            for mode in modes:
                for v in values:
                    tag = f"sweep-{name}-{mode}-{v}"
                    if flag is None:
                        r = run_colonnade(args, plain, work, vocab_path, tag, f"Colonnade, {v} embedded shards",
                                          embedded_shards=v, iters=args.sweep_iter)
                    elif mode == "embedded":
                        r = run_colonnade(args, plain, work, vocab_path, tag, f"Colonnade {flag} {v}",
                                          embedded_shards=args.shards, iters=args.sweep_iter, flags=[flag, str(v)])
                    else:
                        r = run_colonnade(args, plain, work, vocab_path, tag, f"Colonnade {flag} {v}",
                                          separate_shards=args.shards, iters=args.sweep_iter, flags=[flag, str(v)])
                    r["sweep"], r["sweep_value"], r["sweep_mode"] = name, v, mode
                    sweeps.append(r)
        for v in args.parallelism_sweep:
            threads, per_call = (1, 1) if v == 1 else (2, v // 2)
            saved = args.threads
            args.threads = threads
            try:
                r = run_colonnade(args, plain, work, vocab_path, f"sweep-parallelism-{v}",
                                  f"Colonnade, {v} minibatch(es) in flight", separate_shards=args.shards,
                                  iters=args.sweep_iter,
                                  flags=["--in-flight", "1", "--minibatches-per-call", str(per_call)])
            finally:
                args.threads = saved
            r["sweep"], r["sweep_value"], r["sweep_mode"] = "parallelism", v, "separate"
            r["sweep_detail"] = f"--threads {threads} --in-flight 1 --minibatches-per-call {per_call}"
            sweeps.append(r)

        if args.tls_pairs:
            secrets = work / "secrets"
            subprocess.run([str(args.bin_dir / "colonnade"), "certs", "--out", str(secrets)], check=True,
                           capture_output=True)
            for k in range(args.tls_pairs):
                for tls in (False, True):
                    name = "TLS" if tls else "plaintext"
                    r = run_colonnade(args, plain, work, vocab_path, f"sweep-tls-{k}-{name}",
                                      f"Colonnade, {args.shards} ps-shard processes, {name}",
                                      separate_shards=args.shards, iters=args.sweep_iter,
                                      secrets=secrets if tls else None)
                    r["sweep"], r["sweep_value"], r["sweep_mode"] = "tls", name, "separate"
                    r["sweep_detail"] = f"pair {k + 1}"
                    sweeps.append(r)

        for r in rows + sweeps:
            log(f"evaluating {r['system']}" + (f" ({r['sweep']} {r['sweep_value']})" if "sweep" in r else ""))
            r["eval"] = evaluate(Path(r["vectors"]), args.eval_dir)
            r["words_per_second"] = tokens * r["iter"] / r["train_seconds"]
            cpu = r.get("train_cpu_seconds")
            r["words_per_cpu_second"] = tokens * r["iter"] / cpu if cpu else None
            if "corpus_tokens_all_epochs" in r and r["corpus_tokens_all_epochs"] != tokens * r["iter"]:
                r["warning"] = f"read {r['corpus_tokens_all_epochs']:,} tokens, expected {tokens * r['iter']:,}"
        load_after = os.getloadavg()

        pin = (
            f"all runs confined to CPUs {','.join(map(str, args.cores))}; separate shard i on CPU "
            f"cores[i mod {len(args.cores)}], its client on all of them"
            if args.pin else "no CPU pinning"
        )
        out = [
            f"## Throughput benchmark: {args.corpus.name} ({tokens:,} tokens)",
            "",
            f"- Command: `{command}` (in `{os.getcwd()}`)",
            f"- Date: {now.strftime('%Y-%m-%d %H:%M %Z')}; repo at {git_state()}; {colonnade_version(args.bin_dir)}"
            + (f"; baseline binaries {args.baseline_bin_dir}" if args.baseline_bin_dir else ""),
            f"- Machine: {machine['node']}, nproc {machine['nproc']}, {machine['cpu_model']}, "
            f"{fmt(machine['mem_total_gib'], '.1f')} GiB RAM, Linux {machine['kernel']}; {pin}; "
            f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after",
            f"- Settings: {'CBOW (gensim sg=0, cbow_mean=1)' if args.cbow else 'skip-gram'}, "
            f"size {args.size}, window {args.window}, negative {args.negative}, min-count {args.min_count}, "
            f"sample {args.sample:g}, alpha {args.alpha:g}, iter {args.iter}, threads {args.threads}, "
            f"shards {args.shards} separate (ps-shard --threads {args.shard_threads}), {args.embedded_shards} embedded"
            + (f", Colonnade {shlex.join(args.colonnade_extra)}" if args.colonnade_extra else "")
            + f"; vocabulary {vocab['words']:,} words (`colonnade vocab`, {vocab['wall_seconds']:.1f} s, not counted)",
            "- words/s = corpus tokens × epochs ÷ training time (no vocabulary, model creation or export). "
            "train CPU s = CPU over the training span (separate: client + shards); words/CPU-s = corpus tokens × "
            "epochs ÷ train CPU s, less sensitive to other load on the machine. proc CPU s and peak RSS: "
            "whole processes (separate: sums). Analogies: top-30k vocabulary, case-insensitive, 3CosAdd.",
        ]
        if rows:
            out += ["", main_table(rows, gensim_row)]
            vs = {r["vocab_size"] for r in rows}
            if len(vs) > 1:
                out += ["", f"**Warning:** vocabulary sizes differ: {sorted(vs)}"]
        wired = [r for r in rows if r.get("wire")]
        if wired:
            out += [
                "",
                "Bytes on the wire per trained input word T (after subsampling), gRPC payloads counted by the "
                "client; w = pairs/T, r′ = w·(n+1)·S·4 per direction (paper formula (7)), "
                "conv. PS = (2+w·n)·d·4 per direction (formula (2)); r′/2 + ids: the half-float weights of adjust "
                "plus the windows both requests carry, ≈ 2·5·S (4-byte id and 1-byte radius per word). T/minibatch: mean inputs per minibatch (minibatches span sentences, windows do not). Runs whose shards were called in process send nothing and are not listed.",
                "",
                wire_table(wired),
            ]
        if sweeps:
            out += [
                "",
                f"Sweeps: Colonnade, {args.sweep_iter} epoch(s), other settings as above ({args.shards} shards, "
                "--minibatch and --in-flight at their defaults); 'in process' = --embedded-shards, "
                "'processes' = separate ps-shard processes pinned as above.",
                "",
                sweep_table(sweeps),
            ]
        tls_runs = [r for r in sweeps if r.get("sweep") == "tls"]
        if tls_runs:
            ratios = []
            for k in range(args.tls_pairs):
                pair = {r["sweep_value"]: r for r in tls_runs if r["sweep_detail"] == f"pair {k + 1}"}
                if "TLS" in pair and "plaintext" in pair:
                    ratios.append(pair["TLS"]["words_per_second"] / pair["plaintext"]["words_per_second"])
            ratios_sorted = sorted(ratios)
            median = ratios_sorted[len(ratios_sorted) // 2] if len(ratios_sorted) % 2 else (
                sum(ratios_sorted[len(ratios_sorted) // 2 - 1: len(ratios_sorted) // 2 + 1]) / 2)
            out += [
                "",
                f"TLS: words/s of mutual TLS + token ÷ plaintext, pair by pair (run in that order): "
                + ", ".join(f"{x:.3f}" for x in ratios) + f"; median {median:.3f}.",
            ]
        warnings = [f"{r['system']}: {r['warning']}" for r in rows + sweeps if r.get("warning")]
        if warnings:
            out += [""] + [f"**Warning:** {w}" for w in warnings]
        report = "\n".join(out)
        print(report)

        result = {
            "time": now.isoformat(),
            "command": command,
            "cwd": os.getcwd(),
            "argv": argv,
            "git": git_state(),
            "machine": machine,
            "load_average": {"before": load_before, "after": load_after},
            "corpus": str(args.corpus),
            "corpus_tokens": tokens,
            "settings": {
                k: getattr(args, k)
                for k in ("size", "window", "negative", "min_count", "sample", "alpha", "iter", "seed", "threads",
                          "shards", "shard_threads", "cores", "pin", "sweep_iter", "colonnade_extra")
            },
            "vocab": vocab,
            "rows": rows,
            "sweeps": sweeps,
            "markdown": report,
        }
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2, default=str))
        md_out.write_text(report + "\n")
        log(f"results written to {json_out} and {md_out}")
        if keep:
            log(f"vectors and logs kept in {work}")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
