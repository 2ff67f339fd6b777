#!/usr/bin/env python3
"""The CPU a process pays to move bytes over loopback TCP, per byte, on each side.

Why (issue 43): in the paper's protocol (formula (7)) every shard returns one
partial dot product per dot product of a call and takes one weight back, so
each shard moves a fixed number of bytes per dot product whatever its columns
(today 4 bytes of f32 out and 2 of f16 weight in), and the worker the same
again per shard. This measures the floor of that cost, the kernel's alone:
one sender and one receiver process, `--bytes` in `--chunk`-byte writes (64
KiB, far larger than any gRPC frame, so the floor is a best case), the
process CPU (user + system) of each side per byte. Nothing of gRPC, HTTP/2
or the shard is in it. docs/benchmarks.md ("What a shard pays whatever its
columns") turns it into the least CPU per dot product that adding shards adds.

Usage:
    python3 bench/loopback_bytes.py                 # 4 GiB, 64 KiB writes, 3 rounds
    python3 bench/loopback_bytes.py --chunk 16384 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time


def one_round(total: int, chunk: int) -> tuple[float, float]:
    """CPU ns per byte of the sender and of the receiver, one transfer."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        c = socket.create_connection(("127.0.0.1", port))
        buf, sent = b"\0" * chunk, 0
        t0 = time.process_time()
        while sent < total:
            sent += c.send(buf)
        c.close()
        os.write(w, repr(time.process_time() - t0).encode())
        os._exit(0)
    os.close(w)
    s, _ = srv.accept()
    buf, got = bytearray(chunk), 0
    t0 = time.process_time()
    while n := s.recv_into(buf):
        got += n
    received = time.process_time() - t0
    sent_cpu = float(os.read(r, 64).decode())
    os.waitpid(pid, 0)
    s.close()
    srv.close()
    return 1e9 * sent_cpu / got, 1e9 * received / got


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bytes", type=int, default=4 << 30, help="bytes per round")
    p.add_argument("--chunk", type=int, default=64 << 10, help="bytes per write and read")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    send, recv = [], []
    for i in range(args.rounds):
        s, r = one_round(args.bytes, args.chunk)
        send.append(s)
        recv.append(r)
        print(f"round {i}: sender {s:.3f} ns/byte, receiver {r:.3f} ns/byte", file=sys.stderr)
    print(f"loopback TCP, {args.bytes:,} bytes in {args.chunk:,}-byte writes, median of {args.rounds}: "
          f"sender {statistics.median(send):.3f} CPU ns/byte, receiver {statistics.median(recv):.3f} CPU ns/byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
