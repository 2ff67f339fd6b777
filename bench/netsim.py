#!/usr/bin/env python3
"""Multi-host simulation on one machine: ps-shard and `colonnade train`
processes each in their own network namespace, joined through a bridge by
virtual links (veth) whose bandwidth is set with `tc` (tbf, both directions of
every link) and, when the kernel has the netem qdisc, whose one-way latency is
set too.

For every link setting (--links, e.g. 10gbit:0.1ms,1gbit:0.5ms), every shard
count S (--shards, e.g. 1,2,4) and every worker count W (--workers, 1..4): S
shard hosts (`ps-shard --threads 1`), W worker hosts (`colonnade train
--num-workers W --worker-index i --threads 1`, all on one model), one epoch
over the corpus (default: the first 2M tokens of part 01). Reported per run:

- words/s (corpus tokens ÷ the slowest worker's training time);
- bytes on the wire per trained input word T, both directions, summed over the
  workers (gRPC payloads counted by the clients), against the paper's formula
  (7), r′ = w·(n+1)·S·4 per direction (w = pairs/T);
- the link's limit on words/s for these bytes (busiest link direction), and
  what a conventional parameter server (formula (2): (2 + w·n)·d·4 bytes per
  word per direction, through the workers' links) would move over the same
  links for the same words, and how long that would take at link speed.

All addresses are 10.77.0.0/24 inside namespaces this script creates
(named cnsim<pid>-*); they are deleted at the end, also on error or Ctrl-C.
Needs root (CAP_NET_ADMIN) and iproute2's `ip` and `tc`.

Usage: bench/netsim.sh [--links 10gbit:0.1ms,1gbit:0.5ms] [--shards 1,2,4]
       [--workers 1,2,4] [--tokens 2000000] [--corpus FILE]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import lzma
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DEFAULT_CORPUS, REPO, colonnade_version, fmt, log, machine_info, set_log_name, tail

set_log_name("netsim")

SUBNET = "10.77.0"
PORT = 5000


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"`{shlex.join(cmd)}` failed ({p.returncode}): {p.stderr.strip()}")
    return p


def rate_bits(rate: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        raise SystemExit(f"--links: cannot read rate {rate!r} (e.g. 10gbit, 1gbit, 100mbit)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


class Net:
    """A bridge namespace and host namespaces linked to it by shaped veths."""

    def __init__(self, rate: str, delay_ms: float):
        self.prefix = f"cnsim{os.getpid()}"
        self.sw = f"{self.prefix}-sw"
        self.rate, self.delay_ms = rate, delay_ms
        self.hosts: list[str] = []
        self.delay_applied = False  # by netem
        self.netem_missing = False
        sh("ip", "netns", "add", self.sw)
        sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.sw, "link", "set", "br0", "up")

    def _shape(self, ns: str, dev: str) -> None:
        bits = rate_bits(self.rate)
        # Burst: a timer tick's worth at the rate (≥ 64 KiB for GSO packets).
        burst = max(int(bits / 8 / 250), 65536)
        limit = max(4 * burst, 4 << 20)
        if self.delay_ms > 0:
            p = sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem",
                   "delay", f"{self.delay_ms}ms", "rate", self.rate, "limit", "100000", check=False)
            if p.returncode == 0:
                self.delay_applied = True
                return
            self.netem_missing = True
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
           "rate", self.rate, "burst", str(burst), "limit", str(limit))

    def add_host(self, name: str) -> str:
        """A host namespace with one shaped link to the bridge; returns its address."""
        i = len(self.hosts)
        ns = f"{self.prefix}-{name}"
        sh("ip", "netns", "add", ns)
        self.hosts.append(ns)
        sh("ip", "-n", self.sw, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", self.sw, "link", "set", f"v{i}", "master", "br0", "up")
        addr = f"{SUBNET}.{10 + i}"
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        self._shape(ns, "eth0")  # host → bridge
        self._shape(self.sw, f"v{i}")  # bridge → host
        return addr

    def netns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def close(self) -> None:
        for ns in self.hosts + [self.sw]:
            sh("ip", "netns", "del", ns, check=False)
        self.hosts = []


def relay_main(listen: str, upstream: str, delay_ms: float) -> int:
    """A TCP relay that holds every chunk `delay_ms` before passing it on, in
    both directions: one-way latency where the kernel has no netem. One
    thread per direction and connection, sleeping with clock_nanosleep
    (tens of microseconds of slack; asyncio and tokio timers round to whole
    milliseconds)."""
    import collections
    import socket
    import threading

    delay = delay_ms / 1000.0
    host, port = listen.rsplit(":", 1)
    uhost, uport = upstream.rsplit(":", 1)
    server = socket.create_server((host, int(port)))

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        queue: collections.deque = collections.deque()
        ready = threading.Condition()
        done = [False]

        def reader() -> None:
            try:
                while True:
                    data = src.recv(1 << 20)
                    if not data:
                        break
                    with ready:
                        queue.append((time.monotonic() + delay, data))
                        ready.notify()
            except OSError:
                pass
            with ready:
                done[0] = True
                ready.notify()

        threading.Thread(target=reader, daemon=True).start()
        try:
            while True:
                with ready:
                    while not queue and not done[0]:
                        ready.wait()
                    if not queue:
                        break
                    due, data = queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    while True:
        conn, _ = server.accept()
        up = socket.create_connection((uhost, int(uport)))
        for sock in (conn, up):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pipe, args=(conn, up), daemon=True).start()
        threading.Thread(target=pipe, args=(up, conn), daemon=True).start()


def leftover_namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("cnsim")]


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def one_run(args, work: Path, vocab: Path, corpus: Path, tokens: int, rate: str, delay: float,
            shards: int, workers: int) -> dict:
    tag = f"{rate}-{delay}ms-S{shards}-W{workers}"
    net = Net(rate, delay)
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        endpoints = []
        for s in range(shards):
            addr = net.add_host(f"s{s}")
            endpoints.append(f"{addr}:{PORT}")
        clients = [net.add_host(f"c{i}") for i in range(workers)]
        for s, ep in enumerate(endpoints):
            lp = open(work / f"{tag}.shard{s}.log", "wb")
            logs.append(lp)
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", net.netns(f"s{s}"), str(args.bin_dir / "ps-shard"),
                 "--listen", ep, "--threads", "1", "--allow-plaintext"],
                stdout=lp, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "NO_COLOR": "1"}))
        worker_endpoints = [endpoints] * workers
        if delay > 0 and net.netem_missing:
            # Latency by relays in each worker's namespace: 127.0.0.1:6000+s
            # passes to shard s, each direction held `delay` ms.
            worker_endpoints = []
            for i in range(workers):
                local = []
                for s, ep in enumerate(endpoints):
                    listen = f"127.0.0.1:{6000 + s}"
                    procs.append(subprocess.Popen(
                        ["ip", "netns", "exec", net.netns(f"c{i}"), sys.executable, __file__,
                         "--relay", listen, ep, str(delay)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))
                    local.append(listen)
                worker_endpoints.append(local)
            time.sleep(1.0)  # the relays listen
        running = []
        start = time.monotonic()
        for i in range(workers):
            summary = work / f"{tag}.worker{i}.json"
            cmd = ["ip", "netns", "exec", net.netns(f"c{i}"), str(args.bin_dir / "colonnade"), "train",
                   "--corpus", str(corpus), "--vocab", str(vocab), "--shards", ",".join(worker_endpoints[i]),
                   "--num-workers", str(workers), "--worker-index", str(i), "--threads", "1",
                   "--size", str(args.size), "--window", str(args.window), "--negative", str(args.negative),
                   "--sample", str(args.sample), "--iter", "1", "--seed", "1",
                   "--summary", str(summary), *shlex.split(args.colonnade_args)]
            lp = open(work / f"{tag}.worker{i}.log", "wb")
            logs.append(lp)
            running.append((summary, work / f"{tag}.worker{i}.log", subprocess.Popen(
                cmd, stdout=lp, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "NO_COLOR": "1"})))
        for summary, lpath, p in running:
            if p.wait(args.timeout) != 0:
                raise SystemExit(f"{tag}: worker failed (exit {p.returncode}):\n{tail(lpath)}")
        wall = time.monotonic() - start
        sums = [json.loads(s.read_text()) for s, _, _ in running]
    finally:
        for p in procs:
            stop(p)
        for _, _, p in locals().get("running", []):
            stop(p)
        for lp in logs:
            lp.close()
        delay_applied = "netem" if net.delay_applied else ("relay" if delay > 0 else "none")
        net.close()

    seconds = max(s["seconds"] for s in sums)
    t = sum(s["trained_words"] for s in sums)
    pairs = sum(s["pairs"] for s in sums)
    sent = sum(s["bytes_sent"] for s in sums)
    recv = sum(s["bytes_received"] for s in sums)
    w, n, d = pairs / t, args.negative, args.size
    r7 = w * (n + 1) * shards * 4
    r2 = (2 + w * n) * d * 4
    bps = rate_bits(rate) / 8
    # Busiest link direction: each worker link carries its worker's bytes,
    # each shard link 1/S of all bytes.
    per_word_worker_link = max(sent, recv) / t * workers  # bytes per (all-workers) trained word on one worker link × W
    link_words_s = min(workers * bps / (max(sent, recv) / t), shards * bps / (max(sent, recv) / t))
    trained_per_s = t / seconds
    conv_bytes = t * r2  # per direction, all workers
    conv_seconds = conv_bytes / (workers * bps)
    return {
        "link": rate, "delay_ms": delay, "delay_applied": delay_applied, "shards": shards, "workers": workers,
        "seconds": seconds, "wall_seconds": wall, "words_per_second": tokens / seconds,
        "trained_words": t, "trained_per_second": trained_per_s, "w": w,
        "sent_per_word": sent / t, "recv_per_word": recv / t, "r_prime_7": r7, "r_conventional_2": r2,
        "sent_over_r7": sent / t / r7, "recv_over_r7": recv / t / r7,
        "link_bound_words_per_second": link_words_s * tokens / t,
        "link_utilisation": trained_per_s / link_words_s,
        "conventional_gb_per_direction": conv_bytes / 1e9,
        "measured_gb_per_direction": max(sent, recv) / 1e9,
        "conventional_seconds_at_link": conv_seconds,
        "per_word_worker_link": per_word_worker_link,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--relay"]:
        return relay_main(argv[1], argv[2], float(argv[3]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--tokens", type=int, default=2_000_000, help="train on the corpus's first N tokens")
    p.add_argument("--links", default="10gbit:0.1ms,1gbit:0.5ms", help="rate:one-way-delay, comma-separated")
    p.add_argument("--shards", default="1,2,4")
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-4)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--colonnade-args", default="", help="extra flags for every `colonnade train`")
    p.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("COLONNADE_BIN_DIR", REPO / "target" / "release")))
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench/netsim.py needs root (network namespaces and tc)")
    for tool in ("ip", "tc"):
        if sh("which", tool, check=False).returncode != 0:
            raise SystemExit(f"`{tool}` not found (iproute2)")
    links = []
    for item in args.links.split(","):
        rate, _, delay = item.partition(":")
        links.append((rate, float(delay.removesuffix("ms") or 0)))
        rate_bits(rate)
    shard_counts = [int(x) for x in args.shards.split(",")]
    worker_counts = [int(x) for x in args.workers.split(",")]
    args.bin_dir = args.bin_dir.resolve()

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    now = _dt.datetime.now().astimezone()
    work = Path(tempfile.mkdtemp(prefix="colonnade-netsim-"))
    rows = []
    try:
        corpus = work / "corpus.txt"
        opener = lzma.open if args.corpus.suffix == ".xz" else open
        tokens = 0
        with opener(args.corpus, "rt", encoding="utf-8") as fin, open(corpus, "w", encoding="utf-8") as fout:
            for line in fin:
                words = line.split()
                if tokens + len(words) > args.tokens:
                    words = words[: args.tokens - tokens]
                # text8-style files are one long line: cut it into 1000-word sentences.
                for k in range(0, len(words), 1000):
                    fout.write(" ".join(words[k:k + 1000]) + "\n")
                tokens += len(words)
                if tokens >= args.tokens:
                    break
        vocab = work / "vocab.tsv"
        v = subprocess.run([str(args.bin_dir / "colonnade"), "vocab", "--corpus", str(corpus),
                            "--min-count", str(args.min_count), "--output", str(vocab)],
                           capture_output=True, text=True)
        if v.returncode != 0:
            raise SystemExit(f"colonnade vocab failed: {v.stderr}")
        log(f"corpus: {tokens:,} tokens of {args.corpus.name}")
        for rate, delay in links:
            for s in shard_counts:
                for w in worker_counts:
                    log(f"link {rate} {delay} ms, {s} shard(s), {w} worker(s)")
                    r = one_run(args, work, vocab, corpus, tokens, rate, delay, s, w)
                    log(f"  {r['words_per_second']:,.0f} words/s, {r['sent_per_word']:.0f} + "
                        f"{r['recv_per_word']:.0f} B/trained word (r′ {r['r_prime_7']:.0f})")
                    rows.append(r)
    finally:
        left = leftover_namespaces()
        for ns in left:
            if ns.startswith(f"cnsim{os.getpid()}"):
                sh("ip", "netns", "del", ns, check=False)
        import shutil

        shutil.rmtree(work, ignore_errors=True)

    m = machine_info()
    delays = {r["delay_applied"] for r in rows}
    out = [
        f"## Network simulation: {tokens:,} tokens of {args.corpus.name}, 1 epoch",
        "",
        f"- Command: `bench/netsim.sh {shlex.join(argv)}`",
        f"- Date: {now.strftime('%Y-%m-%d %H:%M %Z')}; {colonnade_version(args.bin_dir)}",
        f"- Machine: {m['node']}, nproc {m['nproc']}, {m['cpu_model']}, Linux {m['kernel']}: every host shares "
        "these cores, so words/s is bounded by CPU, not by the links, wherever the link bound is higher",
        f"- Settings: size {args.size}, window {args.window}, negative {args.negative}, sample {args.sample:g}; "
        "every shard `ps-shard --threads 1`, every worker `--threads 1`"
        + (f" {args.colonnade_args}" if args.colonnade_args else "") + ", defaults otherwise",
        "- Latency: " + ("set with netem on every link direction (one-way delay per link)" if delays <= {"netem", "none"}
                         else "this kernel has no netem qdisc (`tc qdisc add ... netem` → 'Specified qdisc kind is "
                         "unknown'), so `tc` shapes the bandwidth (tbf, both directions of every link) and the delay "
                         "is added by a relay in each worker's namespace that holds every chunk for the delay in each "
                         "direction (clock_nanosleep, tens of µs of slack): the delay column is the one-way latency "
                         "worker ↔ shard, RTT = 2 × delay"),
        "",
        "| link | delay | S | W | words/s | sent B/T | recv B/T | r′ (7) | sent/r′ | recv/r′ | link-bound words/s "
        "| link use | conv. PS (2) B/T | conv. GB/dir | ours GB/dir | conv. s at link | ours train s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['link']} | {r['delay_ms']} ms | {r['shards']} | {r['workers']} | {r['words_per_second']:,.0f} "
            f"| {r['sent_per_word']:.0f} | {r['recv_per_word']:.0f} | {r['r_prime_7']:.0f} | {r['sent_over_r7']:.2f} "
            f"| {r['recv_over_r7']:.2f} | {r['link_bound_words_per_second']:,.0f} | {100 * r['link_utilisation']:.0f} % "
            f"| {r['r_conventional_2']:,.0f} | {r['conventional_gb_per_direction']:.2f} "
            f"| {r['measured_gb_per_direction']:.3f} | {r['conventional_seconds_at_link']:.1f} | {r['seconds']:.1f} |"
        )
    out += ["", "T: trained input words (after subsampling); B/T: bytes per T summed over workers; "
            "link-bound words/s: corpus words/s at which the busiest link direction would be full with our "
            "bytes; conv. s at link: seconds the workers' links need to carry a conventional parameter "
            "server's formula-(2) traffic for the same trained words (pull and push overlap, full duplex)."]
    report = "\n".join(out)
    print(report)
    stamp = now.strftime("%Y%m%d-%H%M%S")
    m_part = re.search(r"part\d+", args.corpus.name)
    corpus_tag = m_part.group(0) if m_part else args.corpus.name.split(".")[0]
    # e.g. netsim-20261124-212433-part01-2000000.json (.gitignore keeps *-part01-*.json)
    json_out = args.json_out or REPO / "bench" / "results" / f"netsim-{stamp}-{corpus_tag}-{tokens}.json"
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps({"argv": argv, "machine": m, "rows": rows, "markdown": report}, indent=2))
    json_out.with_suffix(".md").write_text(report + "\n")
    log(f"results written to {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
