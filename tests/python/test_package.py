"""The Python package (`python/`, `import colonnade`): gensim's Word2Vec API
trained by the Rust trainer in process. Checked against gensim (quality on
the sample), against the CLI (the same vectors bit for bit), with real
`ps-shard` processes driven from Python, and installed from the source tree
into a clean venv as README.md says.

scripts/test.sh installs the package into .venv (`pip install ./python`)
before pytest runs; without it every test here fails saying so."""

from __future__ import annotations

import lzma
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from gensim.models import KeyedVectors

from conftest import REPO, SAMPLE_XZ, clean_env, colonnade, read_vocab_file, run

try:
    import colonnade as cn
except ImportError as e:  # pragma: no cover - the message is the point
    pytest.fail(
        f"the colonnade package is not installed in this venv ({e}): run "
        "`.venv/bin/pip install ./python` (scripts/test.sh does)",
        pytrace=False,
    )

EVAL = (REPO / ".." / "shared" / "data" / "eval").resolve()
KARATE = (REPO / ".." / "shared" / "data" / "graphs").resolve()


@pytest.fixture(scope="module")
def sample_txt(tmp_path_factory) -> Path:
    """testdata/sample.txt.xz decompressed (gensim's LineSentence reads it)."""
    out = tmp_path_factory.mktemp("sample") / "sample.txt"
    with lzma.open(SAMPLE_XZ, "rb") as src, open(out, "wb") as dst:
        dst.write(src.read())
    return out


def quality(kv) -> tuple[float, float]:
    """Analogy accuracy (gensim's evaluate_word_analogies, 30K words) and
    WS-353 Spearman ρ (evaluate_word_pairs) of gensim KeyedVectors."""
    analogy, _ = kv.evaluate_word_analogies(str(EVAL / "questions-words.txt"), restrict_vocab=30000)
    pearson, spearman, _ = kv.evaluate_word_pairs(str(EVAL / "wordsim353.tsv"))
    return 100.0 * analogy, float(spearman[0])


# gensim's defaults but skip-gram. At sample 1e-4 and 3 epochs on this 2M-word
# sample Colonnade converges more slowly than gensim (WS-353 0.23 against 0.30
# to 0.33, seeds 1 and 2): issue 44's slow-convergence gap, not the package's.
SETTINGS = dict(vector_size=100, window=5, negative=5, min_count=5, sample=1e-3, sg=1,
                epochs=3, workers=2, seed=1, alpha=0.025, min_alpha=0.0001)


def test_word2vec_trains_at_gensims_quality_on_the_sample(sample_txt):
    """The same settings through both packages' Word2Vec: analogies within 1.5
    points of gensim's, WS-353 within 0.05. Measured at 3 epochs (seeds 1, 2):
    5.91/6.06 % against 6.21/5.75 %, ρ 0.326/0.345 against 0.353/0.344; at 5
    epochs (seeds 1-3) 8.5-8.6 % against 7.9-8.0 %, ρ 0.425-0.456 against
    0.422-0.437. 3 epochs keep CI shorter; bench/python.py compares them on
    part 01."""
    from gensim.models import Word2Vec as GensimWord2Vec

    ours = cn.Word2Vec(corpus_file=str(sample_txt), **SETTINGS)
    theirs = GensimWord2Vec(corpus_file=str(sample_txt), **SETTINGS)
    assert isinstance(ours.wv, KeyedVectors)
    assert ours.wv.vectors.shape == theirs.wv.vectors.shape, "same vocabulary size"
    # The same words (words of equal count may be ordered differently).
    assert set(ours.wv.index_to_key) == set(theirs.wv.index_to_key)
    (a_ours, r_ours), (a_theirs, r_theirs) = quality(ours.wv), quality(theirs.wv)
    print(f"analogy {a_ours:.2f} vs gensim {a_theirs:.2f}; WS-353 {r_ours:.3f} vs {r_theirs:.3f}")
    assert a_theirs > 2.0, "gensim itself learned analogies on the sample"
    assert a_ours >= a_theirs - 1.5
    assert r_ours >= r_theirs - 0.05
    assert len(ours.epoch_losses) == 3 and ours.epoch_losses[-1] < ours.epoch_losses[0]


@pytest.fixture(scope="module")
def small_model(small_corpus, tmp_path_factory):
    """One deterministic run (one thread) on the small corpus, kept as HDF5."""
    out = tmp_path_factory.mktemp("pkg") / "model.h5"
    epochs = []
    model = cn.Word2Vec(corpus_file=str(small_corpus), vector_size=32, sg=1, epochs=2, workers=1,
                        seed=7, sample=1e-3, output=out, epoch_callback=epochs.append)
    return model, out, epochs


def test_the_package_trains_the_vectors_the_cli_trains(small_corpus, small_model, tmp_path):
    """One thread is deterministic, so the package and `colonnade train`
    with the same flags must write the same bits: the same Rust code."""
    model, _, _ = small_model
    out = tmp_path / "cli.bin"
    run([colonnade(), "train", "--corpus", small_corpus, "--size", "32", "--iter", "2",
         "--threads", "1", "--seed", "7", "--sample", "1e-3", "--min-count", "5",
         "--min-alpha", "0.0001", "--output-binary", out])
    cli = KeyedVectors.load_word2vec_format(str(out), binary=True)
    assert cli.index_to_key == model.wv.index_to_key
    assert np.array_equal(cli.vectors, model.wv.vectors)


def test_sentences_from_an_iterable_train_as_the_same_file(small_corpus, small_model):
    """A one-shot generator of token lists (streamed, not kept) gives the
    vectors the file gives."""
    model, _, _ = small_model

    def sentences():
        with open(small_corpus, encoding="utf-8") as f:
            for line in f:
                yield line.split()

    again = cn.Word2Vec(sentences=sentences(), vector_size=32, sg=1, epochs=2, workers=1,
                        seed=7, sample=1e-3)
    assert again.wv.index_to_key == model.wv.index_to_key
    assert np.array_equal(again.wv.vectors, model.wv.vectors)
    assert again.corpus_count > 0


def test_outputs_are_the_clis_files_and_read_back(small_model, tmp_path):
    model, h5, epochs = small_model
    with h5py.File(h5) as f:
        assert f["vectors"].shape == model.wv.vectors.shape
        assert np.array_equal(f["vectors"][()], model.wv.vectors)
        assert list(f["words"].asstr()[()]) == model.wv.index_to_key
    copy = tmp_path / "copy.h5"
    model.save_hdf5(copy)
    assert copy.read_bytes() == h5.read_bytes()
    for binary in (False, True):
        path = tmp_path / f"v.{'bin' if binary else 'txt'}"
        model.save_word2vec_format(path, binary=binary)
        kv = KeyedVectors.load_word2vec_format(str(path), binary=binary)
        assert kv.index_to_key == model.wv.index_to_key
        np.testing.assert_allclose(kv.vectors, model.wv.vectors, rtol=0, atol=0 if binary else 1e-6)
        loaded = cn.load(path)
        assert loaded.index_to_key == model.wv.index_to_key
    assert np.array_equal(cn.load(h5).vectors, model.wv.vectors)
    # model.wv is a KeyedVectors whose queries work.
    assert len(model.wv.most_similar("the", topn=5)) == 5


def test_an_epoch_callback_sees_each_epochs_loss_and_rate(small_model):
    _, _, epochs = small_model
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert all(isinstance(e["loss"], float) and 0 < e["loss"] < 5 for e in epochs), epochs
    assert all(e["words_per_sec"] > 0 for e in epochs), epochs


def test_gensim_style_callbacks_and_logging(corpus_100k, caplog):
    calls = []

    class Cb:
        def on_train_begin(self, model):
            calls.append("begin")

        def on_epoch_end(self, model):
            calls.append(("epoch", model.get_latest_training_loss()))

        def on_train_end(self, model):
            calls.append("end")

    with caplog.at_level("INFO", logger="colonnade"):
        cn.Word2Vec(corpus_file=str(corpus_100k), vector_size=16, epochs=2, workers=1, callbacks=[Cb()])
    assert calls[0] == "begin" and calls[-1] == "end"
    assert [c[0] for c in calls[1:-1]] == ["epoch", "epoch"]
    assert any("EPOCH 2 done" in r.getMessage() for r in caplog.records)
    assert any("trained" in r.getMessage() and "words/s" in r.getMessage() for r in caplog.records)


def test_training_releases_the_gil(small_corpus):
    """Another Python thread keeps running while Rust trains."""
    ticks, stop = [], threading.Event()

    def count():
        n = 0
        while not stop.is_set():
            n += 1
            if n % 10000 == 0:
                ticks.append(time.monotonic())

    t = threading.Thread(target=count)
    t.start()
    start = time.monotonic()
    try:
        cn.Word2Vec(corpus_file=str(small_corpus), vector_size=64, sg=1, epochs=10, workers=2, sample=1e-3)
    finally:
        stop.set()
        t.join()
    end = time.monotonic()
    assert end - start > 1.0, "training too short to tell"
    during = [x for x in ticks if start < x < end]
    # The thread ran throughout: ticks in every quarter of the run.
    quarters = {int(4 * (x - start) / (end - start)) for x in during}
    assert quarters >= {0, 1, 2, 3}, (len(during), sorted(quarters))


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(hs=1), NotImplementedError, "hs=1"),
        (dict(cbow_mean=0), NotImplementedError, "cbow_mean"),
        (dict(trim_rule=lambda *a: 0), NotImplementedError, "trim_rule"),
        (dict(negative=0), ValueError, "negative"),
        (dict(vector_size=0), ValueError, "vector_size"),
        (dict(workers=-1), ValueError, "workers"),
        (dict(alpha=-0.1), ValueError, "alpha"),
        (dict(extra_args=["--no-such-flag"]), ValueError, "--no-such-flag"),
    ],
)
def test_bad_arguments_are_refused_clearly(corpus_100k, kwargs, error, words):
    with pytest.raises(error, match=words.replace("-", r"\-").replace("=", "=")):
        cn.Word2Vec(corpus_file=str(corpus_100k), **kwargs)


def test_bad_corpora_are_refused_naming_what_is_wrong(tmp_path):
    with pytest.raises(TypeError, match="not a string"):
        cn.Word2Vec(sentences="a b c")
    with pytest.raises(ValueError, match="sentence 2: tokens must be non-empty strings without whitespace"):
        cn.Word2Vec(sentences=[["a", "b"], ["c d", "e"]])
    with pytest.raises(TypeError, match="sentences or corpus_file, not both"):
        cn.Word2Vec(sentences=[["a"]], corpus_file="x")
    missing = tmp_path / "nope.txt"
    with pytest.raises(RuntimeError, match="nope.txt"):
        cn.Word2Vec(corpus_file=str(missing))
    with pytest.raises(ValueError, match="nope.h5"):
        cn.load(tmp_path / "nope.h5")
    with pytest.raises(RuntimeError, match="not trained"):
        cn.Word2Vec().save_word2vec_format(tmp_path / "x.txt")


def test_cbow_and_graphs(corpus_100k):
    model = cn.Word2Vec(corpus_file=str(corpus_100k), vector_size=16, sg=0, epochs=3, workers=1)
    assert model.summary["final_loss"] is not None
    assert model.epoch_losses[-1] < model.epoch_losses[0]
    karate = KARATE / "karate.edges"
    edges = [tuple(line.split()[:2]) for line in karate.read_text().splitlines() if line.strip()]
    g = cn.Word2Vec.from_graph(edges, walks_per_node=10, walk_length=20, vector_size=8, epochs=2, workers=1)
    nodes = {u for e in edges for u in e}
    assert set(g.wv.index_to_key) == nodes
    from_file = cn.Word2Vec.from_graph(karate, walks_per_node=10, walk_length=20, vector_size=8,
                                       epochs=2, workers=1)
    assert set(from_file.wv.index_to_key) == nodes


def test_a_cluster_of_two_ps_shards_driven_from_python(corpus_100k, shard_launcher, tmp_path):
    token = "py-package-token-0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(token)
    endpoints = shard_launcher.start(2, args=("--auth-token-file", token_file))
    cluster = cn.Cluster(endpoints, token=token)
    vocab = tmp_path / "vocab.tsv"
    model = cluster.Word2Vec(corpus_file=str(corpus_100k), vector_size=24, sg=1, epochs=2,
                             workers=2, extra_args=["--save-vocab", str(vocab)])
    shards = cluster.models()
    assert [s["endpoint"] for s in shards] == endpoints
    (a,), (b,) = shards[0]["models"], shards[1]["models"]
    assert a["fingerprint"] == b["fingerprint"]
    assert (a["col_start"], a["col_end"], b["col_start"], b["col_end"]) == (0, 12, 12, 24)
    assert a["adjust_calls"] > 0 and b["adjust_calls"] == a["adjust_calls"]
    exported = cluster.export(vocab)
    assert exported.index_to_key == model.wv.index_to_key
    assert np.array_equal(exported.vectors, model.wv.vectors)
    assert [w for w, _ in cluster.similar("the", vocab, topn=3)] == [
        w for w, _ in model.wv.most_similar("the", topn=3)]
    # Without the token the shards refuse, and the error says so.
    with pytest.raises(RuntimeError, match="(?i)token|unauthenticated"):
        cn.Cluster(endpoints).models()
    cluster.drop(a["fingerprint"])
    assert all(not s["models"] for s in cluster.models())
    assert [w for w, _ in read_vocab_file(vocab)][:10] == model.wv.index_to_key[:10]


CTRL_C = """
import colonnade, signal, sys
# As in an interactive session, whatever the launching shell left ignored (a
# background job started without job control ignores SIGINT, and Python keeps that).
signal.signal(signal.SIGINT, signal.default_int_handler)
m = colonnade.Word2Vec(vector_size=32, sg=1, epochs=200, workers=2, sample=1e-3)
print("training", flush=True)
try:
    m.train(corpus_file=sys.argv[1])
except KeyboardInterrupt:
    print("interrupted", len(m.wv.index_to_key), m.wv.vectors.shape[1], flush=True)
    sys.exit(3)
print("finished", flush=True)
"""


def test_ctrl_c_stops_training_cleanly_and_keeps_what_was_trained(small_corpus, tmp_path):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    p = subprocess.Popen([sys.executable, str(script), str(small_corpus)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=clean_env())
    assert p.stdout.readline().strip() == "training"
    time.sleep(2.0)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert time.monotonic() - sent < 20, "Ctrl-C took too long to stop training"
    assert p.returncode == 3, (out, err)
    words, dim = out.split()[1:3]
    assert int(words) > 1000 and int(dim) == 32, out


README_SCRIPT = textwrap.dedent(
    """
    import colonnade
    model = colonnade.Word2Vec(corpus_file="testdata/sample.txt.xz", vector_size=100, sg=1, workers=2)
    print(model.wv.most_similar("king"))
    """
)


def test_pip_install_from_the_source_tree_into_a_clean_venv(tmp_path):
    """README.md's path: a clean venv, `pip install ./python`, the five-line
    script. Without gensim in that venv, model.wv is colonnade.Vectors."""
    readme = (REPO / "README.md").read_text()
    assert "pip install ./python" in readme
    assert README_SCRIPT.strip() in readme, "the README's script is the one tested here"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "./python"], cwd=REPO,
                         capture_output=True, text=True, timeout=1200)
    assert pip.returncode == 0, pip.stderr[-4000:]
    res = subprocess.run([str(venv / "bin" / "python"), "-c", README_SCRIPT], cwd=REPO,
                         capture_output=True, text=True, timeout=600, env=clean_env())
    assert res.returncode == 0, res.stderr[-4000:]
    printed = eval(res.stdout.strip().splitlines()[-1])  # a list of (word, cosine)
    assert len(printed) == 10 and all(-1 <= s <= 1 for _, s in printed)
    words = [w for w, _ in printed]
    assert any(w in words for w in ("queen", "prince", "throne", "emperor", "kings", "monarch", "reign")), words
    kind = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import colonnade, gensim"], capture_output=True, text=True)
    assert kind.returncode != 0, "the clean venv must not have gensim"


def other_interpreters() -> list[str]:
    """The oldest CPython of another minor version on this machine (pyenv's,
    or on PATH): the wheel is abi3, one for all of them from 3.9 on."""
    import glob
    import shutil

    found = {}
    for minor in range(9, 20):
        if minor == sys.version_info.minor:
            continue
        candidates = sorted(glob.glob(f"{Path.home()}/.pyenv/versions/3.{minor}.*/bin/python3.{minor}"))
        candidates.append(shutil.which(f"python3.{minor}"))
        for path in filter(None, candidates):
            if subprocess.run([path, "-c", "import venv, ensurepip"], capture_output=True).returncode == 0:
                found[minor] = path
                break
    return [found[min(found)]] if found else []


TINY = """
import colonnade, sys
m = colonnade.Word2Vec(sentences=[["a", "b", "c", "a", "b"]] * 200, vector_size=8, min_count=1, workers=1, epochs=2)
print(sys.version_info[:2], type(m.wv).__name__, m.wv.vectors.shape, m.wv.most_similar("a", topn=1)[0][0])
"""


def test_one_abi3_wheel_serves_every_cpython_from_3_9(tmp_path):
    """maturin builds one cp39-abi3 wheel; it installs and trains on the
    oldest other CPython this machine has (3.9 here; 3.13 was checked by hand)."""
    wheels = tmp_path / "wheels"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    built = subprocess.run([str(Path(sys.executable).parent / "maturin"), "build", "--release", "-q",
                            "-m", "python/Cargo.toml", "-o", str(wheels)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stderr[-4000:]
    (wheel,) = wheels.glob("*.whl")
    assert "-cp39-abi3-" in wheel.name, wheel.name
    pythons = other_interpreters()
    assert pythons, "no other CPython on this machine to install the wheel into"
    for python in pythons:
        venv = tmp_path / f"venv-{Path(python).name}"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)],
                             capture_output=True, text=True, timeout=600)
        assert pip.returncode == 0, pip.stderr[-4000:]
        res = subprocess.run([str(venv / "bin" / "python"), "-c", TINY], capture_output=True, text=True,
                             timeout=300, env=clean_env())
        assert res.returncode == 0, res.stderr[-4000:]
        assert "Vectors (3, 8)" in res.stdout, res.stdout
