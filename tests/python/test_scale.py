"""A multi-million-word vocabulary end to end over 4 `ps-shard` processes
(the CI-sized version of bench/scale.sh): `synth` → `vocab` (spilling) →
`encode` → `train --encoded` → `export`, with every shard's memory checked
against the sizing formula of README.md and docs/deploy.md, and a shard whose
budget is too small refusing the model before allocating it."""

from __future__ import annotations

import json
import re

import h5py
import numpy as np

from conftest import colonnade, row_bytes, run, run_fail

WORDS = 2_000_000
DIM = 32
SHARDS = 4


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


# What a shard process holds beyond the formula whatever the model (see the test below): a fixed
# part, and the plan and buffers of each call in flight at it (threads × --in-flight of every worker).
FIXED_BYTES = 8 * 2**20
PER_CALL_BYTES = 3 * 2**20
THREADS = 2


def default_in_flight(threads: int, workers: int = 1) -> int:
    """`train`'s --in-flight default (client/src/cli/train.rs, `in_flight`): 4 calls per thread, or as
    many (at least 2) as keep the workers' threads at or under 256 minibatches in flight at 4 per call."""
    return min(4, max(2, 256 // (threads * workers * 4)))


def formula_bytes(words: int, cols: int, table_over_runs: bool = False) -> int:
    """README's sizing: 2 matrices × V × (cols × 4 + 4 bytes of row lock, 1 for a multiple of 16
    columns) + 16 × V (sampler, counts).
    The sampler's 8 × V is a bound: from a million words on, a count-ordered vocabulary's alias
    table is over runs of equal counts, a few KB (`table_over_runs`)."""
    sampler = 0 if table_over_runs else 8 * words
    return 2 * words * row_bytes(cols) + 8 * words + sampler


def test_two_million_words_over_four_shards_within_the_formula(shard_launcher, tmp_path):
    corpus, groups, vocab, enc = (tmp_path / n for n in ("synth.txt", "groups.txt", "vocab.tsv", "enc"))
    run([colonnade(), "synth", "--words", WORDS, "--tokens", 2 * WORDS, "--head", 5000,
         "--output", corpus, "--groups", groups])
    res = run([colonnade(), "vocab", "--corpus", corpus, "--min-count", 1, "--memory-budget", "64M",
               "--spill-dir", tmp_path, "--output", vocab])
    assert re.search(r"spills=[1-9]", res.stderr), "a 64 MiB budget should spill at 2M words\n" + res.describe()
    with open(vocab, encoding="utf-8") as f:
        assert sum(1 for _ in f) == WORDS + 1  # the header line, then one line per word
    run([colonnade(), "encode", "--corpus", corpus, "--vocab", vocab, "--parts", SHARDS, "--output", enc])

    endpoints = shard_launcher.start(SHARDS)
    pids = [s.proc.pid for s in shard_launcher.shards]
    idle = [status_kib(p, "VmRSS") * 1024 for p in pids]
    summary = tmp_path / "summary.json"
    res = run([colonnade(), "train", "--encoded", enc, "--vocab", vocab, "--shards", ",".join(endpoints),
               "--size", DIM, "--iter", 1, "--min-count", 1, "--threads", THREADS, "--summary", summary],
              timeout=600)
    log = res.stderr
    estimate = log.find("memory estimate")
    assert 0 <= estimate < log.find("model ready on every shard"), "the estimate must be printed before the model is made\n" + log
    assert json.loads(summary.read_text())["progress_reached"] == 1.0

    # The peak against README's bound; what is held against the formula with the table this
    # vocabulary gets (2M words in count order: over runs, so the bound's 8 × V for it is not
    # held). Beyond the formula a shard holds a fixed part (threads, gRPC) and about 2.6 MiB per
    # call in flight at it (its waiting plan, a spent one kept for reuse, its request and
    # response; the same at any V): on the Intel host
    # of 2026-11-29, 10.5-11.0 MiB at 2 calls, 15.5-16.2 at 4, 26.1 at 8 (the default: 2 threads
    # × 4) and 36.8 at 16. 16 % of this small model, 0.6 % of bench/scale.sh's 20M one. So the
    # bound is the formula plus 8 MiB plus 3 MiB a call, not a ratio that a 2M-word model makes
    # mostly fixed cost.
    calls = THREADS * default_in_flight(THREADS)
    extra = FIXED_BYTES + calls * PER_CALL_BYTES
    bound = formula_bytes(WORDS, DIM // SHARDS)
    need = formula_bytes(WORDS, DIM // SHARDS, table_over_runs=True)
    for pid, base, s in zip(pids, idle, shard_launcher.shards, strict=True):
        peak = status_kib(pid, "VmHWM") * 1024 - base
        held = status_kib(pid, "VmRSS") * 1024 - base
        ratio = (peak - extra) / bound
        print(f"{s.endpoint}: formula {bound / 2**20:.1f} MiB as a bound, {need / 2**20:.1f} MiB with this "
              f"table, peak {peak / 2**20:.1f} MiB ({ratio:.3f}x the bound after {extra / 2**20:.0f} MiB for "
              f"{calls} calls in flight), held {held / 2**20:.1f} MiB")
        assert peak <= bound + extra, (f"{s.endpoint}: peak {peak} bytes > formula {bound} + {extra} for {calls} "
                                       f"calls in flight\n{s.log_text()}")
        assert held >= 0.95 * need, f"{s.endpoint}: holds {held} bytes, formula says {need}: is the formula too high?"

    out = tmp_path / "model.h5"
    run([colonnade(), "export", "--shards", ",".join(endpoints), "--vocab", vocab, "--output", out], timeout=600)
    with h5py.File(out, "r") as f:
        assert f["vectors"].shape == (WORDS, DIM)
        head = f["vectors"][:1000]
        assert np.isfinite(head).all()
        assert f["words"][0].decode() == "h0"

    res = run([colonnade(), "eval", "--vectors", out, "--groups", groups, "--group-queries", 20, "--json"],
              timeout=600)
    samples = {s["sample"]: s for s in json.loads(res.stdout)["groups"]["samples"]}
    assert samples["popular"]["recall"] > 0.5, samples


def test_a_shard_refuses_a_model_over_its_budget_before_allocating(shard_launcher, tmp_path):
    corpus, vocab = tmp_path / "synth.txt", tmp_path / "vocab.tsv"
    run([colonnade(), "synth", "--words", 500_000, "--tokens", 600_000, "--output", corpus])
    run([colonnade(), "vocab", "--corpus", corpus, "--min-count", 1, "--output", vocab])
    need = formula_bytes(500_000, DIM)
    [endpoint] = shard_launcher.start(1, args=("--max-model-bytes", need // 2))
    pid = shard_launcher.shards[0].proc.pid
    res = run_fail([colonnade(), "train", "--corpus", corpus, "--vocab", vocab, "--shards", endpoint,
                    "--size", DIM, "--iter", 1])
    assert "--max-model-bytes" in res.stderr and "more shards" in res.stderr and "--size" in res.stderr, \
        res.describe()
    assert "memory estimate" in res.stderr, res.describe()
    peak = status_kib(pid, "VmHWM") * 1024
    assert peak < need // 2, f"the refused shard reached {peak} bytes: it allocated before refusing"
    assert shard_launcher.alive() == [endpoint]
