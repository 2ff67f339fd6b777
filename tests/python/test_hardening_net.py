"""A shard's network edge under abuse (issue 45, items 1, 2, 3 and 8): peers
without the token cannot lock clients out with health Watch streams or
half-open HTTP/2 connections, nor stop SIGTERM from returning; a flood of
the metrics port cannot take the file descriptors gRPC needs; requests too
large for the shard's byte budget, or asking too much CPU, are refused with
RESOURCE_EXHAUSTED before they cost anything, and the shard trains after;
a CreateModel stream that stops after its first message gives its memory
reservation back.

Raw gRPC calls go through grpcio with hand-encoded protobuf (the messages
of proto/colonnade/v1/shard.proto are few and flat); the floods are raw
sockets speaking just enough HTTP/2.
"""

from __future__ import annotations

import resource
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest

from conftest import ANSI, binary, clean_env, colonnade, free_port, run, train_args
from protowire import field_bytes, field_float, field_varint, parse, u32s

TOKEN = "net-hardening-token-0123"


def model_spec(vocab: int, dim: int, seed: int = 7) -> bytes:
    return (field_varint(1, 0x1234) + field_varint(2, vocab) + field_varint(3, dim)
            + field_varint(4, 0) + field_varint(5, dim) + field_varint(6, 5)
            + field_float(7, 0.75) + field_varint(8, seed))


def create_chunk(vocab: int, dim: int, counts: list[int] | None, seed: int = 7) -> bytes:
    msg = field_bytes(1, model_spec(vocab, dim, seed))
    if counts is not None:
        msg += field_bytes(3, struct.pack(f"<{len(counts)}Q", *counts))
    return msg


def minibatch(fingerprint: int, lineage: int, inputs, counts, outputs, padding: int = 0) -> bytes:
    mb = (field_varint(1, fingerprint) + field_varint(2, 9) + field_bytes(3, u32s(inputs))
          + field_bytes(4, u32s(counts)) + field_bytes(5, u32s(outputs)) + field_varint(6, lineage)
          + field_float(10, 0.025))
    if padding:
        mb += field_bytes(99, b"\0" * padding)  # a field the shard ignores
    return mb


def dotprod_request(*minibatches: bytes) -> bytes:
    return b"".join(field_bytes(2, mb) for mb in minibatches)


# --- calls ---------------------------------------------------------------

IDENTITY = dict(request_serializer=None, response_deserializer=None)
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def channel(endpoint: str) -> grpc.Channel:
    # A channel of its own (no subchannel shared with the other channels).
    return grpc.insecure_channel(endpoint, options=[
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.max_send_message_length", 128 << 20),
        ("grpc.max_receive_message_length", 128 << 20),
        ("grpc.enable_retries", 0),
    ])


def call(endpoint: str, method: str, request: bytes, timeout: float = 10.0) -> bytes:
    with channel(endpoint) as ch:
        return ch.unary_unary(f"/colonnade.v1.Shard/{method}", **IDENTITY)(
            request, metadata=AUTH, timeout=timeout)


def call_code(endpoint: str, method: str, request: bytes, timeout: float = 10.0):
    """The status code and message of a call expected to fail (OK, b"" if it does not)."""
    try:
        call(endpoint, method, request, timeout)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def create_model(endpoint: str, vocab: int, dim: int, counts: list[int]) -> tuple[int, int]:
    """Creates a model; returns its fingerprint and lineage."""
    with channel(endpoint) as ch:
        created = ch.stream_unary("/colonnade.v1.Shard/CreateModel", **IDENTITY)(
            iter([create_chunk(vocab, dim, counts)]), metadata=AUTH, timeout=30)
    fingerprint = parse(created)[1][0]
    status = parse(call(endpoint, "Status", b""))
    for m in status.get(3, []):
        m = parse(m)
        if m[1][0] == fingerprint:
            return fingerprint, m.get(7, [0])[0]
    raise AssertionError(f"model {fingerprint:016x} not listed")


def status_ok(endpoint: str, timeout: float = 10.0) -> bool:
    """A real client's call with the token: Status answers."""
    try:
        call(endpoint, "Status", b"", timeout=timeout)
        return True
    except grpc.RpcError:
        return False


# --- shards --------------------------------------------------------------


class Shard:
    def __init__(self, tmp: Path, *args, fd_limit: int | None = None):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        token = tmp / "token"
        token.write_text(TOKEN + "\n")
        self.log = tmp / f"ps-shard-{self.port}.log"
        limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))) if fd_limit else None
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(
                [str(binary("ps-shard")), "--listen", self.endpoint, "--threads", "2",
                 "--auth-token-file", str(token), *map(str, args)],
                env=clean_env(), stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                preexec_fn=limit)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"ps-shard exited:\n{self.text()}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"ps-shard did not start:\n{self.text()}", pytrace=False)

    def text(self) -> str:
        with open(self.log, "rb") as f:
            return ANSI.sub("", f.read(200_000).decode("utf-8", "replace"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def shards(tmp_path):
    started: list[Shard] = []

    def start(*args, **kw) -> Shard:
        s = Shard(tmp_path, *args, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


# --- raw HTTP/2 ----------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _literal(name: str, value: str) -> bytes:
    # HPACK: literal header field without indexing, new name, no Huffman.
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


def watch_request() -> bytes:
    headers = b"".join(_literal(k, v) for k, v in [
        (":method", "POST"), (":scheme", "http"), (":path", "/grpc.health.v1.Health/Watch"),
        (":authority", "shard"), ("content-type", "application/grpc"), ("te", "trailers")])
    return (PREFACE + SETTINGS + _frame(1, 0x4, 1, headers)
            + _frame(0, 0x1, 1, b"\x00\x00\x00\x00\x00"))  # an empty HealthCheckRequest


def open_sockets(port: int, n: int, payload: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if payload:
            s.sendall(payload)
        socks.append(s)
    return socks


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def closed_by_peer(s: socket.socket, within: float) -> bool:
    """Whether the shard closed `s` within `within` seconds (what it sent before is read away)."""
    s.settimeout(0.2)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


# --- 1: lock-out without a token -------------------------------------------


def test_watch_streams_without_a_token_neither_lock_clients_out_nor_hold_sigterm(shards):
    # Default limits (512 connections): more watchers than slots, none with the token.
    shard = shards()
    watchers = open_sockets(shard.port, 520, watch_request())
    try:
        time.sleep(1.0)
        assert shard.proc.poll() is None
        start = time.monotonic()
        assert status_ok(shard.endpoint, timeout=10), (
            "a client with the token was locked out by health Watch streams\n" + shard.text()[-3000:])
        assert time.monotonic() - start < 5
        # SIGTERM returns promptly although Watch streams are open.
        shard.proc.send_signal(signal.SIGTERM)
        try:
            code = shard.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM waited for the Watch streams\n" + shard.text()[-3000:], pytrace=False)
        assert code == 0, shard.text()[-3000:]
    finally:
        close_all(watchers)


def test_half_open_http2_connections_neither_lock_clients_out_nor_linger(shards):
    # Connections that send the HTTP/2 preface and nothing more.
    shard = shards()
    stuck = open_sockets(shard.port, 520, PREFACE + SETTINGS)
    try:
        time.sleep(0.5)
        assert status_ok(shard.endpoint, timeout=10), (
            "a client with the token was locked out by preface-only connections\n" + shard.text()[-3000:])
    finally:
        close_all(stuck)
    # With a short handshake timeout, such a connection is closed soon.
    quick = shards("--handshake-timeout-secs", "1")
    (s,) = open_sockets(quick.port, 1, PREFACE + SETTINGS)
    try:
        assert closed_by_peer(s, within=5), "a preface-only connection was not closed"
    finally:
        s.close()
    assert status_ok(quick.endpoint)


# --- 2: the metrics port ---------------------------------------------------


def test_a_metrics_flood_leaves_grpc_serving_and_the_log_quiet(shards):
    metrics_port = free_port()
    shard = shards("--metrics-listen", f"127.0.0.1:{metrics_port}", fd_limit=1024)
    flood = open_sockets(metrics_port, 1100, b"")
    try:
        time.sleep(1.0)
        assert shard.proc.poll() is None
        assert status_ok(shard.endpoint, timeout=5), (
            "the metrics flood took gRPC down\n" + shard.text()[-3000:])
        # Health too.
        run([colonnade(), "health", "--shards", shard.endpoint])
    finally:
        close_all(flood)
    time.sleep(0.5)
    log_bytes = shard.log.stat().st_size
    assert log_bytes < 200_000, f"the flood wrote {log_bytes} bytes of log"
    # Scrapes still answer once the flood is gone.
    with socket.create_connection(("127.0.0.1", metrics_port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    assert b"colonnade_shard_connections" in got


# --- 3: memory and CPU admission -------------------------------------------


def test_oversized_and_expensive_dotprods_are_refused_and_the_shard_trains_after(
        shards, tmp_path, corpus_100k):
    shard = shards("--max-request-bytes-in-flight", 16 << 20)
    fp, lineage = create_model(shard.endpoint, vocab=2, dim=65536, counts=[10, 5])
    # A valid 100-pair batch padded past the byte budget in an ignored field.
    small = minibatch(fp, lineage, [0], [100], [1] * 100)
    assert call_code(shard.endpoint, "Dotprod", dotprod_request(small))[0] == grpc.StatusCode.OK
    padded = minibatch(fp, lineage, [0], [100], [1] * 100, padding=20 << 20)
    code, message = call_code(shard.endpoint, "Dotprod", dotprod_request(padded))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, message)
    assert "--max-request-bytes-in-flight" in message, message
    # 699,050 pairs × (5 + 1) on 65,536 columns: ~2.7e11 multiply-adds.
    pairs = 699_050
    costly = minibatch(fp, lineage, [0], [pairs], [1] * pairs)
    start = time.monotonic()
    code, message = call_code(shard.endpoint, "Dotprod", dotprod_request(costly), timeout=8)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, message)
    assert "--max-call-work" in message, message
    assert time.monotonic() - start < 3
    # Still healthy, and it trains.
    run([colonnade(), "health", "--shards", shard.endpoint])
    out = tmp_path / "m.h5"
    run(train_args(corpus_100k, shards=shard.endpoint, size=8, output=out, auth_token_file=tmp_path / "token"))
    assert out.exists()


def partial_dotprod(declared: int, token: str | None) -> bytes:
    """An HTTP/2 connection's Dotprod whose gRPC prefix declares `declared` bytes, and stops there."""
    fields = [(":method", "POST"), (":scheme", "http"), (":path", "/colonnade.v1.Shard/Dotprod"),
              (":authority", "shard"), ("content-type", "application/grpc"), ("te", "trailers")]
    if token:
        fields.append(("authorization", f"Bearer {token}"))
    headers = b"".join(_literal(k, v) for k, v in fields)
    return PREFACE + SETTINGS + _frame(1, 0x4, 1, headers) + _frame(0, 0, 1, b"\x00" + struct.pack(">I", declared))


def test_requests_past_the_default_byte_budget_are_refused_before_they_arrive(shards):
    # A 60 MB request fits alone in the default 512 MiB, not beside eight more.
    shard = shards()
    fp, lineage = create_model(shard.endpoint, vocab=2, dim=16, counts=[10, 5])
    big = dotprod_request(minibatch(fp, lineage, [0], [100], [1] * 100, padding=60 << 20))
    # Peers without the token reserve nothing, however much they declare.
    strangers = open_sockets(shard.port, 9, partial_dotprod(60 << 20, None))
    holders = []
    try:
        time.sleep(0.5)
        assert call_code(shard.endpoint, "Dotprod", big, timeout=30)[0] == grpc.StatusCode.OK
        # Nine stalled 60 MB requests with the token hold the budget...
        holders = open_sockets(shard.port, 9, partial_dotprod(60 << 20, TOKEN))
        time.sleep(0.5)
        code, message = call_code(shard.endpoint, "Dotprod", big, timeout=30)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, message)
        assert "--max-request-bytes-in-flight" in message, message
        # ...until they go away.
        close_all(holders)
        time.sleep(0.5)
        assert call_code(shard.endpoint, "Dotprod", big, timeout=30)[0] == grpc.StatusCode.OK
        assert status_ok(shard.endpoint)
    finally:
        close_all(strangers)
        close_all(holders)


# --- 8: a half-sent CreateModel ---------------------------------------------

# A 65,536-word model of dim 64 takes ~36 MB while it is created: one fits, two do not.
MODEL_BUDGET = 50_000_000


def test_a_half_sent_create_model_releases_its_reservation(shards):
    # The budget holds one 65,536-word model of dim 64 but not two.
    shard = shards("--max-model-bytes", MODEL_BUDGET, "--request-stall-secs", "1")
    stop = threading.Event()

    def first_message_only():
        yield create_chunk(65536, 64, None)
        stop.wait(30)

    with channel(shard.endpoint) as ch:
        stalled = ch.stream_unary("/colonnade.v1.Shard/CreateModel", **IDENTITY).future(
            first_message_only(), metadata=AUTH, timeout=30)
        try:
            time.sleep(0.3)
            # Another model needs the budget: refused while the first holds it...
            with channel(shard.endpoint) as ch2:
                other = ch2.stream_unary("/colonnade.v1.Shard/CreateModel", **IDENTITY)
                chunk = create_chunk(65536, 64, [1] * 65536, seed=8)
                deadline = time.monotonic() + 10
                while True:
                    try:
                        other(iter([chunk]), metadata=AUTH, timeout=10)
                        break
                    except grpc.RpcError as e:
                        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                        if time.monotonic() > deadline:
                            pytest.fail("the half-sent CreateModel kept its reservation\n" + shard.text()[-3000:],
                                        pytrace=False)
                        time.sleep(0.3)
            with pytest.raises(grpc.RpcError) as failed:
                stalled.result(timeout=10)
            assert failed.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, failed.value
            assert "--request-stall-secs" in (failed.value.details() or "")
        finally:
            stop.set()
