"""A shard's trained state holds against its own callers (issue 45, items 4–6).

Raw gRPC calls, as an attacker holding the worker token would make them (the
protobuf messages are encoded by hand below: the test needs no generated
code):
- roles: the worker token can neither roll a model with checkpoints back to
  its initial state nor take a checkpoint of an arbitrary version; every
  checkpoint file stays. It can roll back to a version the shard lists (what
  `train --rollback` and the recovery after a failure do), and the versions
  rolled back from stay on disk until newer ones replace them. The admin token
  can restore the initial state.
- poison: 30 adjusts with α = 100 and every weight +1 (each inside the
  limits) are refused before any value passes ±2^40; no dot product a shard
  returns is non-finite; the model is flagged diverged and refuses training
  and export, saying how to roll it back.
- one bad model: a bit flipped in one model's model.bin and an empty model
  directory no longer keep the shard from starting: it serves the good model
  and names the bad ones in its log.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from protowire import F, msg, parse, u32s


# ---- the shard's calls ----

VOCAB, DIM, NEGATIVE = 6, 8, 2
COUNTS = [50, 40, 30, 20, 10, 5]


class Client:
    def __init__(self, endpoint: str, token: str | None = None):
        self.channel = grpc.insecure_channel(endpoint)
        self.metadata = [("authorization", f"Bearer {token}")] if token else []

    def call(self, method: str, request: bytes, timeout: float = 20) -> bytes:
        f = self.channel.unary_unary(f"/colonnade.v1.Shard/{method}")
        return f(request, metadata=self.metadata, timeout=timeout)

    def create(self, init_seed: int = 1) -> int:
        self.status()  # waits until the shard has loaded its data dir
        spec = msg(f1=7, f2=VOCAB, f3=DIM, f4=0, f5=DIM, f6=NEGATIVE, f7=F(0.75), f8=init_seed)
        chunk = msg(f1=spec, f2=0, f3=np.asarray(COUNTS, dtype="<u8").tobytes())
        f = self.channel.stream_unary("/colonnade.v1.Shard/CreateModel")
        resp = parse(f(iter([chunk]), metadata=self.metadata, timeout=20))
        return resp[1][0]

    def status(self) -> dict[int, dict[int, list]]:
        """Model fingerprint -> its parsed ModelStatus (waits while the shard loads)."""
        for _ in range(200):
            resp = parse(self.call("Status", b""))
            if not resp.get(5, [0])[0]:
                break
            time.sleep(0.05)
        models = [parse(m) for m in resp.get(3, [])]
        return {m[1][0]: m for m in models}

    def lineage(self, fp: int) -> int:
        return self.status()[fp].get(7, [0])[0]

    def minibatch(self, fp: int, alpha: float) -> bytes:
        return msg(f1=fp, f2=9, f3=u32s([0, 1]), f4=u32s([1, 1]), f5=u32s([1, 2]),
                   f6=self.lineage(fp), f10=F(alpha))

    def dotprod(self, fp: int, alpha: float) -> np.ndarray:
        resp = parse(self.call("Dotprod", msg(f2=self.minibatch(fp, alpha))))
        # A column slice answers half floats (field 4), a whole shard f32 (field 3).
        if 4 in resp:
            dots = np.frombuffer(resp[4][0], dtype="<f2").astype(np.float32)
        else:
            dots = np.frombuffer(resp.get(3, [b""])[0], dtype="<f4")
        assert dots.size == 2 * (1 + NEGATIVE), f"{dots.size} dot products: {resp}"
        return dots

    def adjust(self, fp: int, alpha: float, weight: float) -> None:
        weights = np.full(2 * (1 + NEGATIVE), weight, dtype="<f2").tobytes()
        self.call("Adjust", msg(f5=self.minibatch(fp, alpha), f6=weights))

    def checkpoint(self, fp: int, version: int) -> None:
        req = msg(f1=fp, f2=self.lineage(fp), f3=version, f4=0, f5=1, f6=b'{"jobs":0}', f8=True,
                  f9=5000)
        self.call("Checkpoint", req, timeout=30)

    def restore(self, fp: int, version: int, lineage: int) -> None:
        self.call("Restore", msg(f1=fp, f2=version, f3=lineage), timeout=30)

    def pull(self, fp: int) -> list:
        f = self.channel.unary_stream("/colonnade.v1.Shard/PullRows")
        return list(f(msg(f1=fp, f2=1, f3=0, f4=VOCAB), metadata=self.metadata, timeout=20))


def refused(call, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() == code, (e.value.code(), e.value.details())
    return e.value.details()


def files(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir())


@pytest.fixture
def tokens(tmp_path):
    worker, admin = tmp_path / "worker", tmp_path / "admin"
    worker.write_text("worker-token-0123456789\n")
    admin.write_text("admin-token-9876543210\n")
    return worker, admin


def test_the_worker_token_cannot_erase_a_models_history(tmp_path, shard_launcher, tokens):
    worker, admin = tokens
    data = tmp_path / "data"
    (endpoint,) = shard_launcher.start(
        1, args=("--data-dir", data, "--auth-token-file", worker, "--admin-token-file", admin))
    w = Client(endpoint, worker.read_text().strip())
    a = Client(endpoint, admin.read_text().strip())
    fp = w.create()
    model_dir = data / f"{fp:016x}"
    w.adjust(fp, 0.025, 0.5)
    w.checkpoint(fp, 1)
    w.adjust(fp, 0.025, 0.5)
    w.checkpoint(fp, 2)
    kept = files(model_dir)
    assert {"v0000000001.ckpt", "v0000000002.ckpt"} <= set(kept), kept

    # Restore(0): refused for the worker; nothing changes.
    why = refused(lambda: w.restore(fp, 0, 12345), grpc.StatusCode.PERMISSION_DENIED)
    assert "admin token" in why and f"{fp:016x}" in why, why
    # Checkpoint(2^63): refused, nothing written or deleted.
    why = refused(lambda: w.checkpoint(fp, 2**63), grpc.StatusCode.INVALID_ARGUMENT)
    assert "newest complete version is 2" in why, why
    why = refused(lambda: w.checkpoint(fp, 4), grpc.StatusCode.INVALID_ARGUMENT)
    assert files(model_dir) == kept
    assert [c for c in w.status()[fp][10]], "versions still listed"
    assert w.status()[fp].get(9, [0])[0] > 0, "the trained state was not reset"

    # The worker may roll back to a listed version (train --rollback, recovery):
    # version 2 is set aside, not deleted, until a newer version 2 replaces it.
    w.restore(fp, 1, 777)
    assert "v0000000002.ckpt.rolled-back" in files(model_dir), files(model_dir)
    assert "v0000000001.ckpt" in files(model_dir)
    w.checkpoint(fp, 2)
    assert "v0000000002.ckpt" in files(model_dir)
    assert not any(n.endswith(".rolled-back") for n in files(model_dir)), files(model_dir)

    # The admin token can restore the initial state; the versions are set aside.
    a.restore(fp, 0, 999)
    after = files(model_dir)
    assert "v0000000001.ckpt.rolled-back" in after and "v0000000002.ckpt.rolled-back" in after, after
    assert a.status()[fp].get(8, [0])[0] == 0


def test_poisoning_adjusts_are_refused_and_nothing_non_finite_leaves_the_shard(shard_launcher):
    (endpoint,) = shard_launcher.start(1)
    c = Client(endpoint)
    fp = c.create()
    refusal = None
    for i in range(30):
        dots = c.dotprod(fp, 100.0)
        assert np.isfinite(dots).all(), f"round {i}: dots {dots}"
        try:
            c.adjust(fp, 100.0, 1.0)
        except grpc.RpcError as e:
            refusal = (i, e.code(), e.details())
            break
    assert refusal is not None, "30 adjusts of α 100 and weight +1 were all applied"
    _, code, why = refusal
    assert code == grpc.StatusCode.FAILED_PRECONDITION, refusal
    assert "diverged" in why and f"{fp:016x}" in why and "--rollback" in why, why
    # Diverged: training and export refused, naming the model and the way back.
    why = refused(lambda: c.dotprod(fp, 0.025), grpc.StatusCode.FAILED_PRECONDITION)
    assert "--rollback" in why, why
    why = refused(lambda: c.pull(fp), grpc.StatusCode.FAILED_PRECONDITION)
    assert f"{fp:016x}" in why and "not exported" in why and "--rollback" in why, why
    assert c.status()[fp][13][0], "Status shows the model diverged"
    # A rollback (no data dir: the initial state) makes it trainable and exportable again.
    c.restore(fp, 0, 4242)
    blocks = c.pull(fp)
    values = np.frombuffer(parse(blocks[0])[3][0], dtype="<f4")
    assert np.isfinite(values).all() and np.abs(values).max() < 1
    assert np.isfinite(c.dotprod(fp, 0.025)).all()


def test_one_bad_model_does_not_keep_the_shard_from_starting(tmp_path, shard_launcher):
    data = tmp_path / "data"
    (endpoint,) = shard_launcher.start(1, args=("--data-dir", data))
    c = Client(endpoint)
    good, bad = c.create(init_seed=1), c.create(init_seed=2)
    c.channel.close()
    shard_launcher.stop_all()
    model_bin = data / f"{bad:016x}" / "model.bin"
    raw = bytearray(model_bin.read_bytes())
    raw[len(raw) - 20] ^= 0x04
    model_bin.write_bytes(bytes(raw))
    empty = data / "00000000deadbeef"
    empty.mkdir()

    (endpoint,) = shard_launcher.start(1, args=("--data-dir", data))
    c = Client(endpoint)
    assert list(c.status()) == [good]
    assert np.isfinite(c.dotprod(good, 0.025)).all()
    log = shard_launcher.shards[-1].log_text()
    for name in (f"{bad:016x}", "00000000deadbeef"):
        assert (data / f"{name}.quarantined").is_dir(), sorted(p.name for p in data.iterdir())
        assert "QUARANTINED" in log and str(data / name) in log, log
    # The bad ones are set aside for good: the next start is quiet about them.
    shard_launcher.stop_all()
    (endpoint,) = shard_launcher.start(1, args=("--data-dir", data))
    assert list(Client(endpoint).status()) == [good]
