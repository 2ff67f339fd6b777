"""Every export format, read back by the tools people use: h5py for the
compressed, chunked HDF5 with output vectors (every dataset and attribute,
checked against docs/formats.md), gensim for word2vec text and binary with
multibyte words, plain parsing for the TensorBoard projector TSV files, the
Python snippet of docs/formats.md run as it is, and `colonnade eval` /
`colonnade similar` giving the same answers from all three vector formats."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
from gensim.models import KeyedVectors

from conftest import REPO, binary, colonnade, read_vocab_file, run, run_fail, train_args

DIM = 16
LEVEL = 4
FORMATS_MD = REPO / "docs" / "formats.md"
WS353 = (REPO / ".." / "shared" / "data" / "eval" / "wordsim353.tsv").resolve()
MULTIBYTE = ["naïve", "日本", "Ελλάδα", "🙂", "Straße", "mixed-日本-🙂"]


@dataclass
class Outputs:
    dir: Path
    h5: Path
    text: Path
    binary: Path
    tsv_vectors: Path
    tsv_metadata: Path
    vocab: Path


@pytest.fixture(scope="module")
def outputs(corpus_100k, tmp_path_factory) -> Outputs:
    d = tmp_path_factory.mktemp("formats")
    corpus = d / "corpus.txt"
    rng = random.Random(3)
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(corpus_100k.read_text(encoding="utf-8"))
        for _ in range(40):
            f.write(" ".join(rng.choice(MULTIBYTE + ["the", "of"]) for _ in range(12)) + "\n")
    o = Outputs(d, d / "model.h5", d / "v.txt", d / "v.bin", d / "v.tsv", d / "meta.tsv", d / "vocab.tsv")
    run(
        train_args(
            corpus,
            embedded_shards=2,
            size=DIM,
            output=o.h5,
            output_vectors=True,
            hdf5_compress=LEVEL,
            output_text=o.text,
            output_binary=o.binary,
            output_tsv_vectors=o.tsv_vectors,
            output_tsv_metadata=o.tsv_metadata,
            save_vocab=o.vocab,
        )
    )
    return o


def documented_attributes() -> dict[str, tuple[str, str]]:
    """The attribute table of docs/formats.md: name -> (type, written by)."""
    text = FORMATS_MD.read_text(encoding="utf-8")
    table = text[text.index("Attributes of the root group") : text.index("### Loading it in Python")]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \| [^|]+ \|$", table, re.M)
    return {name: (typ.strip(), by.strip()) for name, typ, by in rows}


def test_hdf5_every_dataset_and_attribute_reads_with_h5py(outputs):
    vocab = read_vocab_file(outputs.vocab)
    v = len(vocab)
    with h5py.File(outputs.h5, "r") as f:
        assert set(f.keys()) == {"vectors", "words", "counts", "output_vectors"}
        for name in ("vectors", "output_vectors"):
            ds = f[name]
            assert ds.shape == (v, DIM) and ds.dtype == np.float32
            assert ds.chunks == (min(v, 4096), DIM), name
            assert ds.compression == "gzip" and ds.compression_opts == LEVEL, name
            data = ds[()]
            assert np.isfinite(data).all()
            assert np.abs(data).sum(axis=1).min() > 0
        assert list(f["words"].asstr()[()]) == [w for w, _ in vocab]
        assert f["counts"].dtype == np.uint64
        assert f["counts"][()].tolist() == [c for _, c in vocab]
        assert not np.array_equal(f["vectors"][()], f["output_vectors"][()])

        documented = documented_attributes()
        assert set(f.attrs.keys()) == set(documented), "docs/formats.md lists exactly the attributes train writes"
        kinds = {"uint64": np.uint64, "float64": np.float64}
        for name in f.attrs:
            value = f.attrs[name]
            typ = documented[name][0]
            if typ.startswith("string"):
                assert isinstance(value, str), name
                assert h5py.check_string_dtype(f.attrs.get_id(name).dtype).encoding == "utf-8", name
            else:
                assert isinstance(value, kinds[typ]), (name, type(value))
        assert int(f.attrs["dim"]) == DIM
        config = json.loads(f.attrs["config_json"])
        assert {"params", "corpus", "summary"} <= set(config)


def test_word2vec_text_and_binary_load_in_gensim_with_multibyte_words(outputs):
    with h5py.File(outputs.h5, "r") as f:
        words = list(f["words"].asstr()[()])
        v = f["vectors"][()]
    assert set(MULTIBYTE) <= set(words)
    kb = KeyedVectors.load_word2vec_format(outputs.binary, binary=True)
    kt = KeyedVectors.load_word2vec_format(outputs.text, binary=False)
    assert kb.index_to_key == words == kt.index_to_key
    # The compressed HDF5 holds the very same floats.
    assert np.array_equal(kb.vectors.view(np.uint32), v.view(np.uint32))
    assert np.array_equal(kt.vectors.view(np.uint32), v.view(np.uint32)), "text must round-trip float32 exactly"
    for w in MULTIBYTE:
        assert np.array_equal(kb[w], v[words.index(w)])


def test_projector_tsv_files(outputs):
    with h5py.File(outputs.h5, "r") as f:
        words = list(f["words"].asstr()[()])
        v = f["vectors"][()]
    lines = outputs.tsv_vectors.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""
    rows = [line.split("\t") for line in lines[:-1]]
    assert len(rows) == len(words)
    assert {len(r) for r in rows} == {DIM}
    assert np.array_equal(np.array(rows, dtype=np.float32).view(np.uint32), v.view(np.uint32))
    meta = outputs.tsv_metadata.read_text(encoding="utf-8").split("\n")
    assert meta[-1] == "" and meta[:-1] == words


def test_the_docs_python_snippet_runs(outputs, tmp_path):
    text = FORMATS_MD.read_text(encoding="utf-8")
    m = re.search(r"<!-- snippet: load-hdf5[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/formats.md lost its load-hdf5 snippet"
    shutil.copy(outputs.h5, tmp_path / "model.h5")
    proc = subprocess.run(
        [sys.executable, "-c", m.group(1)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    with h5py.File(outputs.h5, "r") as f:
        first = f["words"].asstr()[0]
    assert proc.stdout.startswith(first + " [("), proc.stdout


def test_eval_and_similar_read_all_three_formats_alike(outputs):
    queries = ["the", "three", "city", "日本", "naïve"]
    answers = []
    for path in (outputs.h5, outputs.text, outputs.binary):
        sim = json.loads(run([colonnade(), "similar", "--vectors", path, "--k", 5, "--min-cosine", -1,
                              "--json", *queries]).stdout)
        ev = json.loads(run([colonnade(), "eval", "--vectors", path, "--similarity", WS353, "--json"]).stdout)
        answers.append((sim["results"], ev["similarity"][0]["spearman"], ev["vectors"]["format"]))
    assert [a[2] for a in answers] == ["hdf5", "word2vec_text", "word2vec_binary"]
    assert answers[0][:2] == answers[1][:2] == answers[2][:2]


def test_export_writes_projector_files_alone(corpus_100k, shard_launcher, tmp_path):
    endpoints = ",".join(shard_launcher.start(2))
    vocab = tmp_path / "vocab.tsv"
    run(train_args(corpus_100k, shards=endpoints, size=8, save_vocab=vocab, connect_timeout_secs=20))
    meta = tmp_path / "meta.tsv"
    run([binary("colonnade-export"), "--shards", endpoints, "--vocab", vocab, "--output-tsv-metadata", meta])
    assert meta.read_text(encoding="utf-8").split("\n")[:-1] == [w for w, _ in read_vocab_file(vocab)]
    res = run_fail([binary("colonnade-export"), "--shards", endpoints, "--vocab", vocab])
    assert "--output-tsv-vectors" in res.stderr
