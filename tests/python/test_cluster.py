"""A real multi-process cluster: `ps-shard` processes on loopback ports,
`colonnade train --shards`, and exports from the running shards."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from conftest import binary, colonnade, read_vocab_file, run, run_fail, train_args

DIM = 20  # 3 shards: columns [0,7), [7,14), [14,20)
# Attributes `colonnade export` writes; each must match the train-time file.
EXPORT_ATTRS = ("model_fingerprint", "vocab_fingerprint", "dim", "negative", "init_seed", "shards", "objective", "colonnade_version")


def h5_contents(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        out = {
            "vectors": f["vectors"][()],
            "words": list(f["words"].asstr()[()]),
            "counts": f["counts"][()],
            "attrs": {k: f.attrs[k] for k in f.attrs},
        }
        if "output_vectors" in f:
            out["output_vectors"] = f["output_vectors"][()]
    return out


def assert_same_model(trained: Path, exported: Path) -> None:
    a, b = h5_contents(trained), h5_contents(exported)
    assert a["words"] == b["words"]
    assert np.array_equal(a["counts"], b["counts"])
    assert a["vectors"].dtype == b["vectors"].dtype == np.float32
    assert a["vectors"].shape == b["vectors"].shape
    assert np.array_equal(a["vectors"].view(np.uint32), b["vectors"].view(np.uint32))
    assert ("output_vectors" in a) == ("output_vectors" in b)
    if "output_vectors" in a:
        assert np.array_equal(a["output_vectors"].view(np.uint32), b["output_vectors"].view(np.uint32))
    for k in EXPORT_ATTRS:
        assert k in b["attrs"], f"export wrote no attribute {k}"
        assert a["attrs"][k] == b["attrs"][k], f"attribute {k}: train {a['attrs'][k]!r}, export {b['attrs'][k]!r}"


def test_train_on_shard_processes_then_export_in_other_order(small_corpus, shard_launcher, tmp_path):
    endpoints = shard_launcher.start(3)
    vocab = tmp_path / "vocab.tsv"
    train_h5 = tmp_path / "train.h5"
    train_bin = tmp_path / "train.bin"
    run(
        train_args(
            small_corpus,
            shards=",".join(endpoints),
            size=DIM,
            save_vocab=vocab,
            output=train_h5,
            output_binary=train_bin,
            output_vectors=True,
            connect_timeout_secs=20,
        )
    )
    assert shard_launcher.alive() == endpoints, "a shard died during training\n" + shard_launcher.logs()
    with h5py.File(train_h5, "r") as f:
        assert f["vectors"].shape == (len(read_vocab_file(vocab)), DIM)
        assert int(f.attrs["shards"]) == 3
        v = f["vectors"][()]
    # Every shard's columns were trained (none left at its tiny initial values).
    for cols in (slice(0, 7), slice(7, 14), slice(14, 20)):
        assert np.abs(v[:50, cols]).max() > 0.1, f"columns {cols} look untrained"

    shuffled = [endpoints[2], endpoints[0], endpoints[1]]
    exp_h5 = tmp_path / "export.h5"
    exp_bin = tmp_path / "export.bin"
    run(
        [colonnade(), "export", "--shards", ",".join(shuffled), "--vocab", vocab,
         "--output", exp_h5, "--output-binary", exp_bin, "--output-vectors"]
    )
    assert_same_model(train_h5, exp_h5)
    assert exp_bin.read_bytes() == train_bin.read_bytes()

    # The standalone exporter, with yet another order, gives the same model.
    exp2_h5 = tmp_path / "export2.h5"
    run(
        [binary("colonnade-export"), "--shards", ",".join(endpoints[::-1]), "--vocab", vocab,
         "--output", exp2_h5, "--output-vectors"]
    )
    assert_same_model(train_h5, exp2_h5)
    assert shard_launcher.alive() == endpoints


def test_second_model_with_other_seed_on_same_shards(corpus_100k, shard_launcher, tmp_path):
    endpoints = shard_launcher.start(2)
    vocab = tmp_path / "vocab.tsv"
    outputs = {}
    for seed in (1, 2):
        out = tmp_path / f"seed{seed}.h5"
        run(
            train_args(
                corpus_100k,
                shards=",".join(endpoints),
                size=16,
                seed=seed,
                save_vocab=vocab,
                output=out,
                connect_timeout_secs=20,
            )
        )
        outputs[seed] = out
    fps = {}
    for seed, out in outputs.items():
        with h5py.File(out, "r") as f:
            fps[seed] = str(f.attrs["model_fingerprint"])
    assert fps[1] != fps[2]
    assert not np.array_equal(h5_contents(outputs[1])["vectors"], h5_contents(outputs[2])["vectors"])

    # Two models on the shards: export must be told which one.
    ambiguous = run_fail(
        [colonnade(), "export", "--shards", ",".join(endpoints), "--vocab", vocab, "--output", tmp_path / "x.h5"]
    )
    assert "--fingerprint" in ambiguous.stderr, ambiguous.describe()
    assert not (tmp_path / "x.h5").exists()

    for seed, out in outputs.items():
        exp = tmp_path / f"export{seed}.h5"
        run(
            [colonnade(), "export", "--shards", ",".join(endpoints[::-1]), "--vocab", vocab,
             "--fingerprint", fps[seed], "--output", exp]
        )
        assert_same_model(out, exp)


def test_one_pipeline_is_deterministic_across_transports_and_shard_counts(corpus_100k, shard_launcher, tmp_path):
    """With one minibatch in flight the run is a pure function of corpus, flags
    and seed: 2 embedded shards and 2 shard processes give the same bits; 1 or
    3 shards change only the float summation order of the dot products. The
    same --minibatch on both: its default is 32 in process, 256 over gRPC."""
    corpus = corpus_100k
    common = dict(size=16, threads=1, in_flight=1, minibatches_per_call=1, minibatch=32, seed=11,
                  connect_timeout_secs=20)
    outs = {}
    outs["embedded2"] = tmp_path / "embedded2.h5"
    run(train_args(corpus, embedded_shards=2, output=outs["embedded2"], **common))
    procs = shard_launcher.start(2, threads=2)
    outs["procs2"] = tmp_path / "procs2.h5"
    run(train_args(corpus, shards=",".join(procs), output=outs["procs2"], **common))
    for n in (1, 3):
        outs[f"embedded{n}"] = tmp_path / f"embedded{n}.h5"
        run(train_args(corpus, embedded_shards=n, output=outs[f"embedded{n}"], **common))
    v = {k: h5_contents(p)["vectors"] for k, p in outs.items()}
    assert np.array_equal(v["embedded2"].view(np.uint32), v["procs2"].view(np.uint32))
    np.testing.assert_allclose(v["embedded1"], v["embedded2"], rtol=0, atol=1e-3)
    np.testing.assert_allclose(v["embedded3"], v["embedded2"], rtol=0, atol=1e-3)
    # Same data, another run with a different seed really differs (the check above can fail).
    other = tmp_path / "seed12.h5"
    run(train_args(corpus, embedded_shards=2, output=other, **{**common, "seed": 12}))
    assert np.abs(h5_contents(other)["vectors"] - v["embedded2"]).max() > 1e-2


def test_compressed_export_holds_the_same_data(corpus_100k, shard_launcher, tmp_path):
    endpoints = shard_launcher.start(2)
    vocab = tmp_path / "vocab.tsv"
    plain = tmp_path / "plain.h5"
    run(train_args(corpus_100k, shards=",".join(endpoints), size=8, save_vocab=vocab, output=plain,
                   output_vectors=True, connect_timeout_secs=20))
    packed = tmp_path / "packed.h5"
    run([binary("colonnade-export"), "--shards", ",".join(endpoints), "--vocab", vocab, "--output", packed,
         "--output-vectors", "--hdf5-compress", 6])
    with h5py.File(packed, "r") as f:
        assert f["vectors"].compression == "gzip"
        assert f["vectors"].chunks is not None
    assert_same_model(plain, packed)
