"""TLS on the shard API, certificates from `colonnade certs`, and the
Prometheus endpoints of shards and clients.

Checked with independent readers: Python's `ssl` module verifies the chain a
TLS shard presents against the CA `colonnade certs` wrote, and
`prometheus_client`'s parser reads the metrics pages."""

from __future__ import annotations

import json
import socket
import ssl
import stat
import subprocess
import threading
import time
import urllib.request

import h5py
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import binary, clean_env, colonnade, free_port, run, run_fail, train_args


@pytest.fixture
def secrets(tmp_path):
    out = tmp_path / "secrets"
    run([colonnade(), "certs", "--out", out, "--hosts", "shard-0,*.shards.example"])
    return out


def test_certs_writes_a_ca_a_server_and_a_client_certificate_and_private_keys(secrets, tmp_path):
    for name in ("ca.crt", "shard.crt", "client.crt"):
        assert (secrets / name).read_text().startswith("-----BEGIN CERTIFICATE-----"), name
    for name in ("ca.key", "shard.key", "client.key", "token", "admin-token"):
        mode = stat.S_IMODE((secrets / name).stat().st_mode)
        assert mode == 0o600, f"{name} is {oct(mode)}"
    token = (secrets / "token").read_text().strip()
    assert len(token) == 64 and int(token, 16) >= 0
    assert token != (secrets / "admin-token").read_text().strip()
    # A second run into the same directory refuses to overwrite it.
    res = run_fail([colonnade(), "certs", "--out", secrets])
    assert "refusing to overwrite" in res.stderr and str(secrets) in res.stderr, res.describe()
    # The Kubernetes Secrets parse as YAML-ish stringData with the PEM blocks.
    run([colonnade(), "certs", "--out", tmp_path / "k8s", "--k8s-namespace", "colonnade"])
    text = (tmp_path / "k8s" / "secrets.yaml").read_text()
    assert "name: colonnade-tls" in text and "name: colonnade-auth" in text
    assert "    -----BEGIN CERTIFICATE-----" in text and "COLONNADE_AUTH_TOKEN:" in text


def _shard(shard_launcher, secrets, *extra):
    return shard_launcher.start(1, args=(
        "--tls-cert", secrets / "shard.crt", "--tls-key", secrets / "shard.key", *extra))[0]


def test_a_tls_shard_presents_a_chain_python_ssl_verifies(secrets, shard_launcher):
    endpoint = _shard(shard_launcher, secrets)
    host, port = endpoint.split(":")
    ctx = ssl.create_default_context(cafile=str(secrets / "ca.crt"))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() == "h2"
            names = [v for k, v in tls.getpeercert()["subjectAltName"]]
            assert {"shard-0", "*.shards.example", "localhost", "127.0.0.1"} <= set(names), names
    # A host the certificate does not name fails verification.
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(raw, server_hostname="other.example")


def test_health_of_a_tls_shard_named_without_https_says_how_to_name_it(secrets, shard_launcher):
    endpoint = _shard(shard_launcher, secrets)
    # The plaintext connection fails in one of several ways (h2's
    # FRAME_SIZE_ERROR, a closed connection, a broken pipe): each is said
    # as a TLS shard named without https://.
    for command in ("health", "health", "health", "models"):
        args = ["health"] if command == "health" else ["models", "list"]
        res = run_fail([colonnade(), *args, "--shards", endpoint])
        line = [l for l in res.stderr.splitlines() if l.startswith("error: ")][-1]
        for said in (endpoint, "probably serves TLS", "https://host:port", "--tls-ca"):
            assert said in line, f"{said!r} not said\n" + res.describe()
    res = run([colonnade(), "health", "--shards", f"https://{endpoint}", "--tls-ca", secrets / "ca.crt"])
    assert f"https://{endpoint}: SERVING" in res.stdout, res.describe()


def test_tls_with_client_certificates_and_a_token_refuses_every_incomplete_client(
        secrets, tmp_path, corpus_100k, shard_launcher):
    endpoint = _shard(shard_launcher, secrets, "--tls-ca", secrets / "ca.crt",
                      "--auth-token-file", secrets / "token")
    https = f"https://{endpoint}"
    ca = ("--tls-ca", secrets / "ca.crt")
    client = (*ca, "--tls-cert", secrets / "client.crt", "--tls-key", secrets / "client.key")
    out = tmp_path / "m.h5"

    def refused(shards, *flags, expect):
        args = [*train_args(corpus_100k, shards=shards, size=8, output=out, connect_timeout_secs=5,
                            retry_timeout=2), *map(str, flags)]
        start = time.monotonic()
        res = run_fail(args)
        assert endpoint in res.stderr, res.describe()
        for e in expect:
            assert e in res.stderr, f"{e!r} not said\n" + res.describe()
        # A TLS mismatch is not waited out like a shard that is still starting.
        assert time.monotonic() - start < 30, res.describe()
        assert not out.exists()

    # Plaintext to a TLS shard.
    refused(endpoint, expect=["probably serves TLS", "https://", "--tls-ca"])
    # TLS without the cluster's CA: the shard's certificate is not trusted.
    refused(https, expect=["not signed by a CA this client trusts", "--tls-ca"])
    # The CA but no client certificate: mutual TLS refuses the connection.
    refused(https, *ca, expect=["client certificate", "--tls-cert"])
    # A client certificate from another CA.
    other = tmp_path / "other"
    run([colonnade(), "certs", "--out", other])
    refused(https, *ca, "--tls-cert", other / "client.crt", "--tls-key", other / "client.key",
            expect=["may not accept this client's certificate"])
    # TLS asked for but the shard named without https://.
    refused(endpoint, *client, expect=["named without https://"])
    # Everything but the token.
    refused(https, *client, expect=["bearer token"])
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    refused(https, *client, "--auth-token-file", wrong, expect=["wrong bearer token"])

    # All of it: trains over TLS, and the exporter pulls the same vectors.
    vocab = tmp_path / "v.tsv"
    run([*train_args(corpus_100k, shards=https, size=8, output=out, save_vocab=vocab),
         *map(str, client), "--auth-token-file", secrets / "token"])
    with h5py.File(out, "r") as f:
        trained = f["vectors"][()]
    assert np.isfinite(trained).all() and np.abs(trained).max() > 0.1
    env = {**clean_env(), "COLONNADE_TLS_CA": str(secrets / "ca.crt"),
           "COLONNADE_TLS_CERT": str(secrets / "client.crt"), "COLONNADE_TLS_KEY": str(secrets / "client.key"),
           "COLONNADE_AUTH_TOKEN_FILE": str(secrets / "token")}
    exported = tmp_path / "e.h5"
    proc = subprocess.run([str(binary("colonnade-export")), "--shards", https, "--vocab", str(vocab),
                           "--output", str(exported)], env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    with h5py.File(exported, "r") as f:
        assert np.array_equal(f["vectors"][()], trained)
    # Health over TLS needs the CA and a client certificate, not the token.
    run([colonnade(), "health", "--shards", f"https://localhost:{endpoint.split(':')[1]}", *client])


def test_plaintext_beyond_loopback_needs_a_flag_and_health_has_a_plaintext_port(secrets, shard_launcher):
    port = free_port()
    res = run_fail([binary("ps-shard"), "--listen", f"0.0.0.0:{port}"], timeout=30)
    assert f"0.0.0.0:{port}" in res.stderr and "--allow-plaintext" in res.stderr and "--tls-cert" in res.stderr, \
        res.describe()
    # TLS on the shard's port, a plaintext port that serves health alone.
    health = f"127.0.0.1:{free_port()}"
    endpoint = _shard(shard_launcher, secrets, "--health-listen", health, "--auth-token-file", secrets / "token")
    out = run([colonnade(), "health", "--shards", health])
    assert "SERVING" in out.stdout
    res = run_fail([colonnade(), "models", "list", "--shards", health,
                    "--auth-token-file", secrets / "token"])
    assert health in res.stderr, res.describe()
    assert endpoint


def _scrape(addr: str) -> dict:
    """Samples of a Prometheus page: {(name, sorted label items): value}."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        text = r.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def _value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_shard_and_client_metrics_count_what_training_did(tmp_path, small_corpus, shard_launcher):
    token = tmp_path / "token"
    token.write_text("metrics-test-token\n")
    shard_metrics = f"127.0.0.1:{free_port()}"
    (endpoint,) = shard_launcher.start(1, args=("--metrics-listen", shard_metrics, "--auth-token-file", token))
    # A call without the token is refused, and counted as such.
    run_fail([colonnade(), "models", "list", "--shards", endpoint])
    before = _scrape(shard_metrics)
    assert _value(before, "colonnade_shard_calls_total", method="Status", code="Unauthenticated") == 1
    assert _value(before, "colonnade_shard_serving") == 1

    client_metrics = f"127.0.0.1:{free_port()}"
    summary = tmp_path / "summary.json"
    seen: list[dict] = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                seen.append(_scrape(client_metrics))
            except OSError:
                pass
            time.sleep(0.2)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        run([*train_args(small_corpus, shards=endpoint, size=16, iter=6, summary=summary,
                         output=tmp_path / "m.h5", metrics_listen=client_metrics),
             "--auth-token-file", token])
    finally:
        stop.set()
        poller.join(timeout=10)
    done = json.loads(summary.read_text())
    during = [s for s in seen if _value(s, "colonnade_client_words_total") > 0]
    assert during, f"the client's metrics were never scraped while it trained ({len(seen)} scrapes)"
    last = during[-1]
    assert 0 < _value(last, "colonnade_client_words_total") <= done["words"]
    assert max(_value(s, "colonnade_client_words_per_second") for s in during) > 0
    assert 0 < _value(last, "colonnade_client_learning_rate") <= 0.025
    assert _value(last, "colonnade_client_wire_bytes_total", direction="sent") > 0
    assert _value(last, "colonnade_client_call_seconds_count", method="dotprod") > 0

    after = _scrape(shard_metrics)
    time.sleep(5.5)  # the shard samples its state every 5 s
    after = _scrape(shard_metrics)
    # Every pair the client trained was adjusted on the shard, and every
    # dotprod had its adjust.
    assert _value(after, "colonnade_shard_pairs_adjusted_total") == done["pairs"]
    dot = _value(after, "colonnade_shard_calls_total", method="Dotprod", code="Ok")
    adj = _value(after, "colonnade_shard_calls_total", method="Adjust", code="Ok")
    assert dot > 0 and dot == adj
    assert _value(after, "colonnade_shard_call_seconds_count", method="Dotprod") == dot
    assert _value(after, "colonnade_shard_models") == 1
    assert _value(after, "colonnade_shard_model_bytes") > 0
    assert _value(after, "process_resident_memory_bytes") > 0
