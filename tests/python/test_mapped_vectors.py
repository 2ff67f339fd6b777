"""`colonnade similar` and `colonnade eval --groups` over an uncompressed HDF5
file use the rows in place from a memory map: the process's own memory
(RssAnon, sampled every 20 ms from /proc) stays well below the matrix,
while the same rows stored chunked (read into memory) take at least the
matrix; and the neighbours equal a numpy reference of exact cosine top-k."""

from __future__ import annotations

import subprocess
import threading
import time

import h5py
import numpy as np
import pytest

from conftest import ANSI, Result, clean_env, colonnade

ROWS = 300_000
DIM = 64
MATRIX_BYTES = ROWS * DIM * 4  # 76.8 MB
K = 10
QUERIES = [0, 1, 777, 123_456, ROWS - 1]


def rss_anon_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def run_sampled(args: list) -> tuple[Result, int]:
    """Runs a command to completion, sampling its RssAnon every 20 ms; returns
    the result and the peak in bytes."""
    args = [str(a) for a in args]
    start = time.monotonic()
    proc = subprocess.Popen(
        args,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    peak = 0
    # Reads the pipes on threads so a full pipe never stalls the child.
    out: dict[str, bytes] = {}

    def drain(name, pipe):
        out[name] = pipe.read()

    readers = [
        threading.Thread(target=drain, args=(n, p)) for n, p in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for t in readers:
        t.start()
    while proc.poll() is None:
        kib = rss_anon_kib(proc.pid)
        if kib is not None:
            peak = max(peak, kib * 1024)
        if time.monotonic() - start > 120:
            proc.kill()
            pytest.fail(f"timed out: {' '.join(args)}")
        time.sleep(0.02)
    for t in readers:
        t.join()
    res = Result(
        args=args,
        returncode=proc.returncode,
        stdout=ANSI.sub("", out["out"].decode("utf-8", "replace")),
        stderr=ANSI.sub("", out["err"].decode("utf-8", "replace")),
        seconds=time.monotonic() - start,
    )
    assert res.returncode == 0, "command failed\n" + res.describe()
    return res, peak


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The same random rows written contiguous (mapped) and chunked (loaded)."""
    d = tmp_path_factory.mktemp("mapped")
    rng = np.random.default_rng(16)
    vectors = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    vectors[5] = 0.0  # an all-zero row: cosine 0 with everything
    words = np.array([f"w{i}" for i in range(ROWS)], dtype=object)
    counts = np.arange(ROWS, 0, -1, dtype=np.uint64)
    paths = {}
    for name, chunks in (("plain", None), ("chunked", (4096, DIM))):
        p = d / f"{name}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("vectors", data=vectors, chunks=chunks)
            f.create_dataset("words", data=words, dtype=h5py.string_dtype("utf-8"))
            f.create_dataset("counts", data=counts)
        paths[name] = p
    with h5py.File(paths["plain"]) as f:
        assert f["vectors"].chunks is None and f["vectors"].id.get_offset() is not None
    groups = d / "groups.txt"
    groups.write_text("".join(f"w{3 * i} w{3 * i + 1} w{3 * i + 2}\n" for i in range(2000)))
    return vectors, paths, groups


def reference(vectors: np.ndarray, q: int) -> list[tuple[str, float]]:
    """Exact cosine top-k of row q (itself excluded), higher cosine first, then lower row."""
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    unit = vectors.astype(np.float64) / np.where(norms > 0, norms, 1.0)[:, None]
    scores = unit @ unit[q]
    scores[q] = -np.inf
    order = np.lexsort((np.arange(ROWS), -scores))[:K]
    return [(f"w{i}", float(scores[i])) for i in order]


def parse(stdout: str, words: list[str]) -> dict[str, list[tuple[str, float]]]:
    """`similar`'s TSV: word -> [(neighbour, cosine)] in rank order."""
    got: dict[str, list[tuple[str, float]]] = {w: [] for w in words}
    lines = stdout.splitlines()
    assert lines[0] == "word\trank\tneighbour\tcosine"
    for line in lines[1:]:
        word, rank, neighbour, cosine = line.split("\t")
        assert int(rank) == len(got[word]) + 1
        got[word].append((neighbour, float(cosine)))
    return got


def test_similar_maps_the_rows_and_matches_numpy(model):
    vectors, paths, _ = model
    words = [f"w{q}" for q in QUERIES]
    res, peak = run_sampled([colonnade(), "similar", "--vectors", paths["plain"], "--k", K, *words])
    assert "vectors mapped" in res.stderr, res.describe()
    assert peak < 0.5 * MATRIX_BYTES + 16e6, (
        f"peak RssAnon {peak / 1e6:.1f} MB with a {MATRIX_BYTES / 1e6:.1f} MB matrix mapped\n" + res.describe()
    )
    got = parse(res.stdout, words)
    for q, w in zip(QUERIES, words):
        want = reference(vectors, q)
        assert [n for n, _ in got[w]] == [n for n, _ in want], w
        for (_, a), (_, b) in zip(got[w], want):
            assert abs(a - b) < 2e-6, (w, a, b)

    # The control: the same rows chunked are read into memory, and the
    # sampling sees the matrix (so the bound above means something).
    res, loaded_peak = run_sampled([colonnade(), "similar", "--vectors", paths["chunked"], "--k", K, *words])
    assert "vectors loaded" in res.stderr, res.describe()
    assert loaded_peak > MATRIX_BYTES, f"loaded peak {loaded_peak / 1e6:.1f} MB"
    loaded = parse(res.stdout, words)
    for w in words:
        assert [n for n, _ in loaded[w]] == [n for n, _ in got[w]], w
        for (_, a), (_, b) in zip(loaded[w], got[w]):
            assert abs(a - b) < 2e-6, (w, a, b)
    print(
        f"matrix {MATRIX_BYTES / 1e6:.1f} MB; peak RssAnon mapped {peak / 1e6:.1f} MB, "
        f"loaded {loaded_peak / 1e6:.1f} MB"
    )


def test_eval_groups_maps_the_rows(model):
    _, paths, groups = model
    res, peak = run_sampled(
        [colonnade(), "eval", "--vectors", paths["plain"], "--groups", groups, "--group-queries", 50, "--json"]
    )
    assert "vectors mapped" in res.stderr, res.describe()
    assert peak < 0.5 * MATRIX_BYTES + 16e6, f"peak RssAnon {peak / 1e6:.1f} MB\n" + res.describe()
    print(f"eval --groups: matrix {MATRIX_BYTES / 1e6:.1f} MB, peak RssAnon {peak / 1e6:.1f} MB")
