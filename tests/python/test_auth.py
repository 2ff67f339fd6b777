"""A shard given a bearer token (`ps-shard --auth-token-file`) refuses every
call without it, naming the shard, and serves the clients that carry it; the
gRPC health checks stay open for probes; an admin token keeps DropModel from
holders of the cluster token."""

from __future__ import annotations

import json
import subprocess
import time

import h5py
import numpy as np

from conftest import binary, clean_env, colonnade, free_port, run, run_fail, train_args


def _start_shard(tmp_path, *extra: str):
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    log = open(tmp_path / f"shard-{port}.log", "wb")
    proc = subprocess.Popen([binary("ps-shard"), "--listen", endpoint, "--threads", "1", *map(str, extra)],
                            env=clean_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if run([colonnade(), "health", "--shards", endpoint, "--timeout-secs", "1"], expect_ok=False).returncode == 0:
            return proc, endpoint
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the shard did not come up:\n" + (tmp_path / f"shard-{port}.log").read_text())


def _first_fingerprint(listing) -> str:
    """The first model fingerprint anywhere in `models list --json` output."""
    if isinstance(listing, dict):
        if "fingerprint" in listing and "vocab_size" in listing:
            return listing["fingerprint"]
        listing = list(listing.values())
    if isinstance(listing, list):
        for item in listing:
            try:
                return _first_fingerprint(item)
            except StopIteration:
                pass
    raise StopIteration


def test_a_shard_with_a_token_serves_only_clients_that_carry_it(tmp_path, corpus_100k):
    token = tmp_path / "token"
    token.write_text("s3cret-token-0123456789\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    admin = tmp_path / "admin"
    admin.write_text("admin-token-9876543210\n")
    shard, endpoint = _start_shard(tmp_path, "--auth-token-file", token, "--admin-token-file", admin)
    try:
        out = tmp_path / "m.h5"
        vocab = tmp_path / "v.tsv"
        # No token: refused before any training, naming the shard and the flag.
        res = run_fail(train_args(corpus_100k, shards=endpoint, size=8, output=out, connect_timeout_secs=5,
                                  retry_timeout=2))
        assert endpoint in res.stderr and "bearer token" in res.stderr, res.describe()
        assert "--auth-token-file" in res.stderr, res.describe()
        assert not out.exists()
        # A wrong token: refused the same way.
        res = run_fail(train_args(corpus_100k, shards=endpoint, size=8, output=out, connect_timeout_secs=5,
                                  retry_timeout=2, auth_token_file=wrong))
        assert endpoint in res.stderr and "wrong bearer token" in res.stderr, res.describe()
        assert not out.exists()
        # The right token (file, or the variable): trains, writes, exports.
        run(train_args(corpus_100k, shards=endpoint, size=8, output=out, save_vocab=vocab, connect_timeout_secs=5,
                       auth_token_file=token))
        with h5py.File(out, "r") as f:
            trained = f["vectors"][()]
        assert np.isfinite(trained).all() and np.abs(trained).max() > 0.1
        exported = tmp_path / "e.h5"
        env_run = subprocess.run(
            [str(binary("colonnade-export")), "--shards", endpoint, "--vocab", str(vocab), "--output", str(exported)],
            env={**clean_env(), "COLONNADE_AUTH_TOKEN": "s3cret-token-0123456789"}, capture_output=True, timeout=120)
        assert env_run.returncode == 0, env_run.stderr.decode()
        with h5py.File(exported, "r") as f:
            assert np.array_equal(f["vectors"][()], trained)
        res = run_fail([binary("colonnade-export"), "--shards", endpoint, "--vocab", vocab,
                        "--output", tmp_path / "e2.h5"])
        assert endpoint in res.stderr and "bearer token" in res.stderr, res.describe()
        # Health stays open without a token (probes carry none).
        run([colonnade(), "health", "--shards", endpoint])
        # Dropping a model is an admin call: the cluster token is not enough.
        listing = run([colonnade(), "models", "list", "--json", "--shards", endpoint, "--auth-token-file", token])
        fingerprint = _first_fingerprint(json.loads(listing.stdout))
        res = run_fail([colonnade(), "models", "drop", "--shards", endpoint, "--fingerprint", fingerprint,
                        "--auth-token-file", token])
        assert "admin" in res.stderr and endpoint in res.stderr, res.describe()
        run([colonnade(), "models", "drop", "--shards", endpoint, "--fingerprint", fingerprint,
             "--auth-token-file", admin])
    finally:
        shard.terminate()
        shard.wait(timeout=10)
