#!/usr/bin/env python3
"""Soak: W workers train one model on S `ps-shard` processes on loopback for a
fixed time, with everything a production cluster turns on: mutual TLS and the
bearer token (certificates from `colonnade certs`), Prometheus endpoints,
checkpoints into data dirs. Every 10 s it samples each shard's resident
memory (/proc/PID/status VmRSS) and scrapes the shards' metrics.

It reports (JSON under bench/results/ and a summary on stdout): the words
trained, every gRPC status code the shards answered (all must be Ok), each
worker's exit, and each shard's RSS curve with its first, last, minimum and
maximum after warm-up, and the slope of a least-squares line through it.

At the end of the time the workers are still training (their --iter is set
so that they cannot finish): the shards' counters are read first, then the
workers are stopped (SIGKILL), so that the stop itself is not counted.

    bench/soak.sh                         # 8 workers x 2 shards, 10 minutes
    bench/soak.sh --minutes 1 --workers 2 # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_CORPUS, REPO, decompress, log, machine_info, set_log_name  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_rss(pid: int) -> int | None:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def scrape(addr: str) -> dict[str, float]:
    """The metrics page as {sample line key: value} (name{labels} -> value)."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


def slope_per_minute(samples: list[tuple[float, int]]) -> float:
    n = len(samples)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    sxx = sum((t - mx) ** 2 for t, _ in samples)
    sxy = sum((t - mx) * (v - my) for t, v in samples)
    return (sxy / sxx) * 60 if sxx else 0.0


def main() -> int:
    set_log_name("soak")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", type=Path, default=REPO / "target" / "release")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS samples")
    p.add_argument("--warmup", type=float, default=60.0,
                   help="seconds after which RSS counts as steady (model created, first checkpoint taken)")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--checkpoint-interval", type=int, default=60)
    p.add_argument("--work", type=Path, default=None, help="working directory (default: a temporary one)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()

    import tempfile

    work = args.work or Path(tempfile.mkdtemp(prefix="colonnade-soak."))
    work.mkdir(parents=True, exist_ok=True)
    bins = args.bin_dir
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLONNADE_")}
    env["NO_COLOR"] = "1"

    plain = work / "corpus.txt"
    if not plain.exists():
        log(f"decompressing {args.corpus}")
        decompress(args.corpus, plain)
    secrets = work / "secrets"
    if not secrets.exists():
        subprocess.run([bins / "colonnade", "certs", "--out", secrets], check=True, env=env)
    vocab = work / "vocab.tsv"
    subprocess.run([bins / "colonnade", "vocab", "--corpus", plain, "--min-count", "5", "--output", vocab],
                   check=True, env=env, capture_output=True)

    procs: list[subprocess.Popen] = []
    shards = []
    try:
        for s in range(args.shards):
            port, metrics = free_port(), f"127.0.0.1:{free_port()}"
            data = work / f"shard{s}"
            data.mkdir(exist_ok=True)
            logf = open(work / f"shard{s}.log", "wb")
            proc = subprocess.Popen(
                [bins / "ps-shard", "--listen", f"127.0.0.1:{port}", "--threads", "1", "--data-dir", data,
                 "--tls-cert", secrets / "shard.crt", "--tls-key", secrets / "shard.key",
                 "--tls-ca", secrets / "ca.crt", "--auth-token-file", secrets / "token",
                 "--metrics-listen", metrics],
                env=env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            procs.append(proc)
            shards.append({"endpoint": f"https://localhost:{port}", "metrics": metrics, "pid": proc.pid,
                           "rss": []})
        endpoints = ",".join(s["endpoint"] for s in shards)
        for s in shards:
            for _ in range(100):
                try:
                    scrape(s["metrics"])
                    break
                except OSError:
                    time.sleep(0.1)
        client_env = {**env, "COLONNADE_TLS_CA": str(secrets / "ca.crt"),
                      "COLONNADE_TLS_CERT": str(secrets / "client.crt"),
                      "COLONNADE_TLS_KEY": str(secrets / "client.key"),
                      "COLONNADE_AUTH_TOKEN_FILE": str(secrets / "token")}
        workers = []
        for w in range(args.workers):
            logf = open(work / f"worker{w}.log", "wb")
            proc = subprocess.Popen(
                [bins / "colonnade", "train", "--corpus", plain, "--vocab", vocab, "--shards", endpoints,
                 "--worker-index", str(w), "--num-workers", str(args.workers), "--threads", "1",
                 "--size", str(args.size), "--window", "5", "--negative", "5", "--sample", "1e-4",
                 "--iter", "1000", "--checkpoint-interval", str(args.checkpoint_interval),
                 "--metrics-listen", f"127.0.0.1:{free_port()}"],
                env=client_env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            procs.append(proc)
            workers.append(proc)
        log(f"{args.shards} shards, {args.workers} workers (TLS, token, checkpoints every "
            f"{args.checkpoint_interval} s) for {args.minutes} min; {work}")
        start = time.monotonic()
        end = start + args.minutes * 60
        next_sample = start
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                t = round(now - start, 1)
                for s in shards:
                    s["rss"].append((t, vm_rss(s["pid"])))
                alive = sum(1 for w in workers if w.poll() is None)
                log(f"t={t:.0f}s  RSS " + "  ".join(f"{(s['rss'][-1][1] or 0) / 2**20:.1f} MiB" for s in shards)
                    + f"  workers alive {alive}/{args.workers}")
                next_sample += args.sample_every
            if any(w.poll() is not None for w in workers):
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - start
        # The counters first, then stop the workers.
        final = [scrape(s["metrics"]) for s in shards]
        exits = [w.poll() for w in workers]
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGKILL)
        for w in workers:
            w.wait()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    codes: dict[str, float] = {}
    pairs = 0.0  # summed over shards: every shard adjusts every pair (its columns)
    checkpoints = 0.0
    for page in final:
        for key, v in page.items():
            if key.startswith("colonnade_shard_calls_total{"):
                code = key.split('code="', 1)[1].split('"', 1)[0]
                codes[code] = codes.get(code, 0) + v
            elif key == "colonnade_shard_pairs_adjusted_total":
                pairs += v
            elif key.startswith('colonnade_shard_checkpoints_total{outcome="written"'):
                checkpoints += v
    errors = sum(v for c, v in codes.items() if c != "Ok")
    rss = []
    for i, s in enumerate(shards):
        steady = [(t, v) for t, v in s["rss"] if v is not None and t >= args.warmup]
        vals = [v for _, v in steady]
        rss.append({
            "shard": i,
            "samples": s["rss"],
            "steady_first": vals[0] if vals else None,
            "steady_last": vals[-1] if vals else None,
            "steady_min": min(vals) if vals else None,
            "steady_max": max(vals) if vals else None,
            "slope_bytes_per_minute": slope_per_minute(steady),
        })
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine_info(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "seconds": elapsed,
        "worker_exits_before_stop": exits,
        "codes": codes,
        "errors": errors,
        "pairs_trained": pairs / args.shards,
        "checkpoints_written": checkpoints,
        "rss": rss,
        "work": str(work),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"soak: {elapsed / 60:.1f} min, {args.workers} workers x {args.shards} shards; "
          f"calls by code {codes}; errors {errors:.0f}; pairs trained {pairs / args.shards:.3g} "
          f"({pairs / args.shards / elapsed:.3g}/s); checkpoints written {checkpoints:.0f} (over all shards)")
    for r in rss:
        mib = lambda b: f"{b / 2**20:.1f}" if b is not None else "n/a"  # noqa: E731
        print(f"soak: shard {r['shard']} RSS after {args.warmup:.0f} s: first {mib(r['steady_first'])} MiB, "
              f"last {mib(r['steady_last'])} MiB, min {mib(r['steady_min'])}, max {mib(r['steady_max'])}, "
              f"slope {r['slope_bytes_per_minute'] / 2**20:+.3f} MiB/min")
    print(f"soak: workers still training at the end: {sum(1 for e in exits if e is None)}/{args.workers}; "
          f"JSON {out}")
    ok = errors == 0 and all(e is None for e in exits)
    print("soak: PASS" if ok else "soak: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
