#!/usr/bin/env python3
"""Fault-tolerance benchmark (issue 12), on this machine, in one run:

1. Part 01, two `ps-shard --data-dir` processes, one `colonnade train` with
   the default threads, --iter 3, --checkpoint-interval 30: once
   uninterrupted, once with shard 1 killed with SIGKILL at half the
   uninterrupted run's training time and restarted 3 s later on the same
   data dir. Reports both runs' analogy accuracy and WS-353 (bench/_common.py
   `evaluate`), the words trained again, the recoveries, and the wall times.
2. The checkpoint cost the shards log for each version (the pause, i.e. the
   copy of both matrices while workers wait; the background write; the bytes),
   for part 01 (V = 68,774, d = 100) and for a larger synthetic model
   (--large-words words, --large-dim dimensions, 2 shards), with MB/s.

Writes a JSON report and prints a Markdown summary for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    ANSI,
    DEFAULT_CORPUS,
    DEFAULT_EVAL,
    REPO,
    decompress,
    evaluate,
    log,
    machine_info,
    set_log_name,
)

set_log_name("fault")
TAKEN = re.compile(r"checkpoint taken .*?version=(\d+) pause_ms=([\d.e-]+) total_ms=([\d.e-]+) bytes=(\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Shard:
    def __init__(self, bins: Path, work: Path, name: str, threads: int):
        self.bins, self.work, self.name, self.threads = bins, work, name, threads
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.data = work / f"{name}-data"
        self.log = work / f"{name}.log"
        self.proc = None

    def start(self) -> None:
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [str(self.bins / "ps-shard"), "--listen", self.endpoint, "--threads", str(self.threads), "--data-dir", str(self.data)],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"},
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not start")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=600)

    def checkpoints(self) -> list[dict]:
        text = ANSI.sub("", self.log.read_text(errors="replace"))
        return [
            {"version": int(v), "pause_ms": float(p), "total_ms": float(t), "bytes": int(b)}
            for v, p, t, b in TAKEN.findall(text)
        ]


def train(bins: Path, shards: list[Shard], corpus: Path, vocab: Path, out: Path, summary: Path, args, log_path: Path,
          kill_after: float | None = None, extra: list[str] | None = None) -> dict:
    cmd = [str(bins / "colonnade"), "train", "--corpus", str(corpus), "--vocab", str(vocab),
           "--shards", ",".join(s.endpoint for s in shards), "--size", str(args.size), "--iter", str(args.iter),
           "--checkpoint-interval", str(args.interval), "--output-binary", str(out), "--summary", str(summary),
           *(extra or [])]
    start = time.monotonic()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "NO_COLOR": "1"})
        killed_at = None
        if kill_after is not None:
            while proc.poll() is None and time.monotonic() - start < kill_after:
                time.sleep(0.2)
            if proc.poll() is None:
                killed_at = time.monotonic() - start
                log(f"SIGKILL {shards[1].name} at {killed_at:.1f} s")
                shards[1].kill9()
                time.sleep(3)
                shards[1].start()
                log(f"{shards[1].name} restarted")
        rc = proc.wait()
    wall = time.monotonic() - start
    if rc != 0:
        raise SystemExit(f"training failed ({rc}); see {log_path}")
    s = json.loads(summary.read_text())
    return {"wall_seconds": wall, "killed_at_seconds": killed_at, "summary": {k: s[k] for k in (
        "tokens", "words", "seconds", "recoveries", "words_retrained", "checkpoints", "checkpoint_pause_max_seconds")}}


def cost(records: list[dict]) -> dict:
    if not records:
        return {}
    pause = [r["pause_ms"] for r in records]
    total = [r["total_ms"] for r in records]
    b = records[0]["bytes"]
    gb = b / 1e9
    write_ms = [t - p for t, p in zip(total, pause)]
    return {
        "versions": len(records), "bytes_per_shard": b,
        "pause_ms_median": statistics.median(pause), "pause_ms_max": max(pause),
        "write_ms_median": statistics.median(write_ms), "write_ms_max": max(write_ms),
        "pause_ms_per_gb": statistics.median(pause) / gb, "write_s_per_gb": statistics.median(write_ms) / 1e3 / gb,
        "file_bytes_on_disk": None,
    }


def large_model(bins: Path, work: Path, args) -> dict:
    """A synthetic vocabulary of --large-words words (Zipf counts), a short corpus over it, d = --large-dim."""
    words = args.large_words
    corpus = work / "large-corpus.txt"
    rng = random.Random(1)
    log(f"large model: {words:,} words x d={args.large_dim} on 2 shards")
    with open(corpus, "w") as f:
        # Every word at least once, then 2M Zipf-ish tokens, 1000 per line.
        line = []
        for i in range(words):
            line.append(f"w{i}")
            if len(line) == 1000:
                f.write(" ".join(line) + "\n")
                line = []
        for _ in range(2_000_000):
            line.append(f"w{min(int(rng.paretovariate(1.0)) - 1, words - 1)}")
            if len(line) == 1000:
                f.write(" ".join(line) + "\n")
                line = []
        if line:
            f.write(" ".join(line) + "\n")
    vocab = work / "large-vocab.tsv"
    subprocess.run([str(bins / "colonnade"), "vocab", "--corpus", str(corpus), "--min-count", "1", "--output", str(vocab)],
                   check=True, stderr=subprocess.DEVNULL)
    shards = [Shard(bins, work, f"large-{i}", args.threads) for i in range(2)]
    for s in shards:
        s.start()
    try:
        train_args = argparse.Namespace(**{**vars(args), "size": args.large_dim, "iter": 1, "interval": 5})
        r = train(bins, shards, corpus, vocab, work / "large.bin", work / "large.json", train_args, work / "large-train.log")
        size = sum(p.stat().st_size for p in shards[0].data.rglob("v*.ckpt"))
        files = len(list(shards[0].data.rglob("v*.ckpt")))
        start = time.monotonic()
        shards[0].stop()
        shards[0].start()
        load = None
        text = ""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            text = ANSI.sub("", shards[0].log.read_text(errors="replace"))
            m = re.findall(r"model loaded from the data dir .*seconds=([\d.e-]+)", text)
            if m:
                load = float(m[-1])
                break
            time.sleep(0.2)
        return {"words": words, "dim": args.large_dim, "train": r, "cost": cost(shards[0].checkpoints()),
                "disk_bytes_per_shard_last_two": size, "files": files, "load_seconds": load,
                "restart_to_loaded_seconds": time.monotonic() - start}
    finally:
        for s in shards:
            s.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    p.add_argument("--bin-dir", type=Path, default=REPO / "target" / "release")
    p.add_argument("--work", type=Path, default=Path("/tmp/colonnade-fault-bench"))
    p.add_argument("--iter", type=int, default=3)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--interval", type=int, default=30)
    p.add_argument("--threads", type=int, default=1, help="threads per shard")
    p.add_argument("--large-words", type=int, default=2_000_000)
    p.add_argument("--large-dim", type=int, default=200)
    p.add_argument("--skip-large", action="store_true")
    p.add_argument("--report", type=Path, default=REPO / "bench" / "results" / f"fault-{time.strftime('%Y%m%d-%H%M%S')}.json")
    args = p.parse_args()
    bins = args.bin_dir.resolve()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    plain = args.work / "corpus.txt"
    tokens = decompress(args.corpus, plain)
    vocab = args.work / "vocab.tsv"
    subprocess.run([str(bins / "colonnade"), "vocab", "--corpus", str(plain), "--output", str(vocab)], check=True,
                   stderr=subprocess.DEVNULL)
    report = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": " ".join(["bench/fault.sh", *sys.argv[1:]]), "corpus": str(args.corpus), "tokens": tokens,
              "iter": args.iter, "size": args.size, "interval": args.interval}
    runs = {}
    for name in ("uninterrupted", "killed"):
        shards = [Shard(bins, args.work, f"{name}-{i}", args.threads) for i in range(2)]
        for s in shards:
            s.start()
        try:
            kill_after = None
            if name == "killed":
                kill_after = runs["uninterrupted"]["summary"]["seconds"] / 2
            out = args.work / f"{name}.bin"
            log(f"{name}: training {args.iter} epochs")
            r = train(bins, shards, plain, vocab, out, args.work / f"{name}.json", args, args.work / f"{name}-train.log",
                      kill_after=kill_after)
            r["eval"] = evaluate(out, args.eval_dir)
            r["checkpoint_cost"] = cost(shards[0].checkpoints())
            runs[name] = r
            log(f"{name}: {json.dumps(r['summary'])} analogy {r['eval']['analogy_accuracy']:.4f}")
        finally:
            for s in shards:
                s.stop()
    report["runs"] = runs
    if not args.skip_large:
        report["large"] = large_model(bins, args.work, args)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2))
    u, k = runs["uninterrupted"], runs["killed"]
    print(f"\n### Fault tolerance ({report['date']}, {report['command']})\n")
    print("| run | wall s | analogy | WS-353 ρ | recoveries | words trained again | checkpoints | max pause ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in runs.items():
        s, e = r["summary"], r["eval"]
        print(f"| {name} | {r['wall_seconds']:.0f} | {100 * e['analogy_accuracy']:.2f} % | {e['ws353_spearman']:.3f} | "
              f"{s['recoveries']} | {s['words_retrained']:,} | {s['checkpoints']} | {1e3 * s['checkpoint_pause_max_seconds']:.1f} |")
    diff = 100 * (k["eval"]["analogy_accuracy"] - u["eval"]["analogy_accuracy"])
    print(f"\nanalogy difference killed − uninterrupted: {diff:+.2f} points; killed at {k['killed_at_seconds']:.0f} s")
    print("\n| model | bytes per shard | pause (copy) median ms | write median ms | pause ms/GB | write s/GB |")
    print("| --- | --- | --- | --- | --- | --- |")
    words = sum(1 for line in vocab.read_text(encoding="utf-8").splitlines() if line and not line.startswith("# colonnade"))
    rows = [(f"{args.corpus.name}, V={words:,}, d={args.size}, 2 shards", u["checkpoint_cost"])]
    if "large" in report:
        L = report["large"]
        rows.append((f"synthetic V={L['words']:,}, d={L['dim']}, 2 shards", L["cost"]))
    for label, c in rows:
        if c:
            print(f"| {label} | {c['bytes_per_shard']:,} | {c['pause_ms_median']:.1f} | {c['write_ms_median']:.0f} | "
                  f"{c['pause_ms_per_gb']:.0f} | {c['write_s_per_gb']:.2f} |")
    if "large" in report:
        L = report["large"]
        print(f"\nlarge model: last two versions on disk {L['disk_bytes_per_shard_last_two']:,} bytes per shard; "
              f"a restarted shard loaded its newest version in {L['load_seconds']} s")


if __name__ == "__main__":
    main()
