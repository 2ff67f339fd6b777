"""Training that cannot diverge quietly.

A head-heavy vocabulary (a couple of hundred frequent words, as search-query
and graph vocabularies are) once made the paper's deferred minibatch updates
blow up: each frequent row took hundreds of gradient steps per minibatch, all
computed from the same stale vectors, and the run ended with exit code 0,
vector norms of 1e13 and a loss of 1e23. The shards now cap the stale steps a
row takes per minibatch (docs/design.md, "Row step cap"); gensim, training the
same corpus sequentially, is the independent reference for what converged
vectors look like. A run that blows up anyway must stop with an error that
names the epoch and the minibatch.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from conftest import run, run_fail, train_args

# The head-heavy setting: ~130 words of the 300K-word sample, 4 epochs, one
# minibatch pipeline (deterministic), word2vec's other defaults.
HEAD_HEAVY = dict(
    min_count=200,
    iter=4,
    threads=1,
    size=100,
    window=5,
    negative=5,
    sample=1e-3,
    alpha=0.025,
    seed=1,
)


def gensim_norms(corpus, **p) -> np.ndarray:
    from gensim.models import Word2Vec
    from gensim.models.word2vec import LineSentence

    model = Word2Vec(
        LineSentence(str(corpus)),
        sg=1,
        hs=0,
        negative=p["negative"],
        window=p["window"],
        vector_size=p["size"],
        min_count=p["min_count"],
        sample=p["sample"],
        alpha=p["alpha"],
        epochs=p["iter"],
        workers=1,
        seed=p["seed"],
    )
    return np.linalg.norm(model.wv.vectors, axis=1)


@pytest.fixture(scope="module")
def gensim_head_heavy(small_corpus) -> np.ndarray:
    return gensim_norms(small_corpus, **HEAD_HEAVY)


def test_head_heavy_vocabulary_converges_like_gensim(tmp_path, small_corpus, gensim_head_heavy):
    out, summary = tmp_path / "m.h5", tmp_path / "summary.json"
    run(train_args(small_corpus, embedded_shards=2, output=out, summary=summary, **HEAD_HEAVY))
    s = json.loads(summary.read_text())
    losses = s["epoch_loss"]
    assert len(losses) == HEAD_HEAVY["iter"], s
    assert all(l is not None and np.isfinite(l) for l in losses), losses
    assert losses[-1] < losses[0], f"loss did not decrease over the epochs: {losses}"
    assert losses[-1] < 3.5, f"loss {losses[-1]} (an untrained model has 6·ln 2 ≈ 4.16 per pair)"
    with h5py.File(out) as f:
        vectors = f["vectors"][()]
    assert 100 <= vectors.shape[0] <= 200, vectors.shape
    assert np.isfinite(vectors).all()
    ours = np.linalg.norm(vectors, axis=1)
    theirs = gensim_head_heavy
    # Same order of magnitude as gensim's sequential SGD on the same corpus
    # (the diverged runs had max norms of 1e13 and more).
    assert ours.max() <= 3 * theirs.max(), (ours.max(), theirs.max())
    assert theirs.mean() / 3 <= ours.mean() <= 3 * theirs.mean(), (ours.mean(), theirs.mean())


def test_larger_minibatches_on_a_head_heavy_vocabulary_converge(tmp_path, small_corpus, gensim_head_heavy):
    # 1024 inputs per minibatch and no subsampling: four times the stale
    # steps per row, and inputs repeated at many positions.
    out, summary = tmp_path / "m.h5", tmp_path / "summary.json"
    flags = dict(HEAD_HEAVY, iter=2, sample=0, minibatch=1024)
    run(train_args(small_corpus, embedded_shards=2, output=out, summary=summary, **flags))
    losses = json.loads(summary.read_text())["epoch_loss"]
    assert all(l is not None and np.isfinite(l) for l in losses), losses
    with h5py.File(out) as f:
        ours = np.linalg.norm(f["vectors"][()], axis=1)
    assert np.isfinite(ours).all() and ours.max() <= 3 * gensim_head_heavy.max(), ours.max()


def test_a_run_that_blows_up_stops_naming_epoch_and_minibatch(tmp_path, small_corpus):
    # A learning rate 2,000 times word2vec's default blows any model up.
    out = tmp_path / "m.h5"
    res = run_fail(train_args(small_corpus, embedded_shards=2, output=out, **dict(HEAD_HEAVY, alpha=50)))
    err = res.stderr
    assert "diverged" in err, res.describe()
    assert "epoch 1" in err and "minibatch starting at sentence" in err, res.describe()
    assert "--alpha" in err, res.describe()
    assert not out.exists(), "a diverged model must not be written"


def test_divergence_over_grpc_is_caught_too(tmp_path, small_corpus, shard_launcher):
    endpoints = shard_launcher.start(2)
    res = run_fail(
        train_args(small_corpus, shards=",".join(endpoints), output=tmp_path / "m.h5", **dict(HEAD_HEAVY, alpha=50))
    )
    assert "diverged" in res.stderr and "epoch 1" in res.stderr, res.describe()
