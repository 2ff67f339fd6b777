"""A shard given a bearer token (`ps-shard --auth-token-file`) refuses every
call without it, naming the shard, and serves the clients that carry it; the
gRPC health checks stay open for probes; an admin token keeps DropModel from
holders of the cluster token."""

from __future__ import annotations

import json
import subprocess

import h5py
import numpy as np

from conftest import binary, clean_env, colonnade, run, run_fail, train_args


def test_a_shard_with_a_token_serves_only_clients_that_carry_it(tmp_path, corpus_100k, shard_launcher):
    token = tmp_path / "token"
    token.write_text("s3cret-token-0123456789\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    admin = tmp_path / "admin"
    admin.write_text("admin-token-9876543210\n")
    (endpoint,) = shard_launcher.start(1, args=("--auth-token-file", token, "--admin-token-file", admin))
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
    fingerprint = json.loads(listing.stdout)["shards"][0]["models"][0]["fingerprint"]
    res = run_fail([colonnade(), "models", "drop", "--shards", endpoint, "--fingerprint", fingerprint,
                    "--auth-token-file", token])
    assert "admin" in res.stderr and endpoint in res.stderr, res.describe()
    run([colonnade(), "models", "drop", "--shards", endpoint, "--fingerprint", fingerprint,
         "--auth-token-file", admin])
