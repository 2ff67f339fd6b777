"""`colonnade eval` and `colonnade similar` against gensim 4.4 and numpy.

The vectors are built here with numpy (fast and deterministic, no training):
the words of a subset of the Google analogy questions and of WordSim-353 and
SimLex-999, with mixed-case duplicates ("Paris"/"paris"/"PARIS" as separate
rows, in either frequency order) and multibyte words, padded with filler words
to more than the 30,000-word analogy restriction, some test words placed
beyond it and some left out. Analogy structure (a per-section offset) makes
the answers neither all right nor all wrong. They are written as word2vec
binary and as HDF5 in our layout, and evaluated by `colonnade eval --json` and
by gensim's own `evaluate_word_analogies` / `evaluate_word_pairs`; 3CosMul is
compared with gensim's `most_similar_cosmul` over the restricted vocabulary in
the same loop as `evaluate_word_analogies`. Everything must agree to the 4th
decimal, per section and in total, skipped counts included.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
from gensim.models import KeyedVectors

from conftest import REPO, colonnade, run, run_fail

EVAL = (REPO / ".." / "shared" / "data" / "eval").resolve()
QUESTIONS = EVAL / "questions-words.txt"
PAIR_FILES = [EVAL / "wordsim353.tsv", EVAL / "simlex999.txt"]

RESTRICT = 30_000  # colonnade's default and the restriction gensim is given
VOCAB = 32_000
DIM = 48
MAIN = 32  # test words live mostly in the first MAIN dimensions
PER_SECTION = 60  # questions kept per section (gensim is slow on many)
MULTIBYTE = ["naïve", "NAÏVE", "東京", "straße", "STRASSE", "Ärger", "ärger", "🙂"]


@dataclass
class VectorSet:
    words: list[str]
    vectors: np.ndarray
    binary: Path
    h5: Path
    questions: Path
    sections: list[tuple[str, int]]  # name, 4-word questions in it
    kv: KeyedVectors


def _subset_questions(out: Path) -> list[tuple[str, list[tuple[str, ...]]]]:
    sections: list[tuple[str, list[tuple[str, ...]]]] = []
    with open(QUESTIONS, encoding="utf-8") as f:
        for line in f:
            if line.startswith(": "):
                sections.append((line[2:].strip(), []))
            else:
                sections[-1][1].append(tuple(line.split()))
    kept = []
    for name, qs in sections:
        step = max(1, len(qs) // PER_SECTION)
        kept.append((name, qs[::step][:PER_SECTION]))
    with open(out, "w", encoding="utf-8") as f:
        for i, (name, qs) in enumerate(kept):
            f.write(f": {name}\n")
            for q in qs:
                f.write(" ".join(q) + "\n")
            if i == 1:
                # Lines gensim skips as invalid (and a blank one).
                f.write("only three words\n\nfive words on this line\n")
    return kept


def _pair_words() -> list[str]:
    words: dict[str, None] = {}
    for path in PAIR_FILES:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("#"):
                    continue
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 3:
                    words.setdefault(parts[0])
                    words.setdefault(parts[1])
    return list(words)


@pytest.fixture(scope="module")
def vs(tmp_path_factory) -> VectorSet:
    d = tmp_path_factory.mktemp("parity")
    rng = np.random.default_rng(20261122)
    questions = d / "questions.txt"
    kept = _subset_questions(questions)

    qwords = list(dict.fromkeys(w for _, qs in kept for q in qs for w in q))
    pwords = [w for w in _pair_words() if w not in set(qwords)]
    # Some pair words are not in the vocabulary at all.
    pwords = [w for w in pwords if rng.random() > 0.1]
    primary = list(dict.fromkeys(qwords + pwords + MULTIBYTE))
    taken = set(primary)
    variants = []
    for w in primary:
        if rng.random() < 0.3:
            for v in (w.lower(), w.capitalize(), w.upper()):
                if v not in taken:
                    taken.add(v)
                    variants.append(v)
    fillers = [f"zz{i:05d}" for i in range(VOCAB - len(primary) - len(variants))]

    # Canonical vectors per upper-cased form, with analogy structure.
    base: dict[str, np.ndarray] = {}

    def canon(w: str) -> np.ndarray:
        u = w.upper()
        if u not in base:
            base[u] = rng.normal(size=MAIN)
        return base[u]

    structured: set[str] = set()
    for _, qs in kept:
        offset = rng.normal(size=MAIN)
        for a, b, c, e in qs:
            for x, y in ((a, b), (c, e)):
                if y.upper() not in structured and y.upper() != x.upper():
                    base[y.upper()] = canon(x) + offset + 0.5 * rng.normal(size=MAIN)
                    structured.add(y.upper())

    def vec(w: str, noise: float) -> np.ndarray:
        return np.concatenate([canon(w) + noise * rng.normal(size=MAIN), 0.1 * rng.normal(size=DIM - MAIN)])

    rows = {w: vec(w, 0.0) for w in primary}
    rows.update({w: vec(w, 0.35) for w in variants})
    rows.update(
        {w: np.concatenate([0.25 * rng.normal(size=MAIN), rng.normal(size=DIM - MAIN)]) for w in fillers}
    )

    # Frequency order: random, except that ~5% of the test words come after
    # the restriction (so their questions are skipped).
    key = {w: rng.random() for w in rows}
    for w in primary:
        key[w] = 0.95 + 0.05 * rng.random() if rng.random() < 0.05 else 0.93 * rng.random()
    words = sorted(rows, key=lambda w: key[w])
    vectors = np.stack([rows[w] for w in words]).astype(np.float32)
    assert len(words) == VOCAB == len(set(words))

    binary = d / "vectors.bin"
    with open(binary, "wb") as f:
        f.write(f"{VOCAB} {DIM}\n".encode())
        for w, v in zip(words, vectors):
            f.write(w.encode("utf-8") + b" " + v.astype("<f4").tobytes() + b"\n")
    h5 = d / "model.h5"
    with h5py.File(h5, "w") as f:
        f["vectors"] = vectors
        f.create_dataset("words", data=words, dtype=h5py.string_dtype("utf-8"))
        f["counts"] = np.arange(VOCAB, 0, -1, dtype=np.uint64) * 10
    kv = KeyedVectors.load_word2vec_format(binary, binary=True)
    assert kv.index_to_key == words
    return VectorSet(words, vectors, binary, h5, questions, [(n, len(qs)) for n, qs in kept], kv)


def colonnade_eval(vectors: Path, *args) -> dict:
    res = run([colonnade(), "eval", "--vectors", vectors, "--json", *args])
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def ours(vs) -> dict:
    args = ["--analogies", vs.questions]
    for p in PAIR_FILES:
        args += ["--similarity", p]
    report = colonnade_eval(vs.binary, *args)
    from_h5 = colonnade_eval(vs.h5, *args)
    assert report["vectors"]["format"] == "word2vec_binary"
    assert from_h5["vectors"]["format"] == "hdf5"
    assert from_h5["analogies"] == report["analogies"]
    assert from_h5["similarity"] == report["similarity"]
    return report


def _gensim_cosmul(kv: KeyedVectors, path: Path, restrict: int) -> list[tuple[str, int, int]]:
    """evaluate_word_analogies' loop (gensim 4.4), with most_similar_cosmul
    over a KeyedVectors holding only the first `restrict` words."""
    kr = KeyedVectors(kv.vector_size)
    kr.add_vectors(kv.index_to_key[:restrict], kv.vectors[:restrict])
    ok_vocab = {k.upper(): kr.get_index(k) for k in reversed(kr.index_to_key)}
    original, kr.key_to_index = kr.key_to_index, ok_vocab
    out: list[tuple[str, int, int]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith(": "):
                    out.append((line.lstrip(": ").strip(), 0, 0))
                    continue
                try:
                    a, b, c, expected = [w.upper() for w in line.split()]
                except ValueError:
                    continue
                if not all(w in ok_vocab for w in (a, b, c, expected)):
                    continue
                ignore = {a, b, c}
                predicted = None
                for word, _ in kr.most_similar_cosmul(positive=[b, c], negative=[a], topn=5):
                    predicted = word.upper()
                    if predicted in ok_vocab and predicted not in ignore:
                        break
                name, correct, incorrect = out[-1]
                ok = predicted == expected
                out[-1] = (name, correct + ok, incorrect + (not ok))
    finally:
        kr.key_to_index = original
    return out


def test_the_vector_set_exercises_restriction_and_case(vs, ours):
    a = ours["analogies"][0]
    assert a["restrict"] == RESTRICT
    assert a["total"]["skipped"] > 0, "some questions must fall outside the restriction"
    assert a["total"]["evaluated"] > 500
    assert 0.1 < a["total"]["cos_add"]["accuracy"] < 0.95
    assert a["invalid_lines"] == 2
    first: dict[str, int] = {}
    variants_after_first = 0
    for i, w in enumerate(vs.words[:RESTRICT]):
        u = w.upper()
        if u in first:
            variants_after_first += 1
        else:
            first[u] = i
    assert variants_after_first > 100, "mixed-case duplicates within the restriction"
    # Both orders occur: a lower-case form first, or another form first.
    assert any(vs.words[i] == vs.words[i].lower() != vs.words[i].upper() for i in first.values())
    assert any(vs.words[i] != vs.words[i].lower() for i in first.values())


def test_3cosadd_matches_gensim_evaluate_word_analogies(vs, ours):
    score, sections = vs.kv.evaluate_word_analogies(vs.questions, restrict_vocab=RESTRICT, case_insensitive=True)
    a = ours["analogies"][0]
    *per_section, total = sections
    assert total["section"] == "Total accuracy"
    assert [s["section"] for s in a["sections"]] == [s["section"] for s in per_section] == [n for n, _ in vs.sections]
    for mine, theirs, (_, questions) in zip(a["sections"], per_section, vs.sections):
        correct, incorrect = len(theirs["correct"]), len(theirs["incorrect"])
        assert mine["questions"] == questions
        assert mine["evaluated"] == correct + incorrect, mine["section"]
        assert mine["skipped"] == questions - correct - incorrect, mine["section"]
        assert mine["cos_add"]["correct"] == correct, mine["section"]
        expected = correct / (correct + incorrect) if correct + incorrect else 0.0
        assert mine["cos_add"]["accuracy"] == pytest.approx(expected, abs=1e-4)
    t = a["total"]
    assert t["evaluated"] == len(total["correct"]) + len(total["incorrect"])
    assert t["cos_add"]["correct"] == len(total["correct"])
    assert t["cos_add"]["accuracy"] == pytest.approx(score, abs=1e-4)
    assert t["skipped"] == sum(q for _, q in vs.sections) - t["evaluated"]
    # The Google set's first 5 sections are semantic, the rest syntactic.
    sem = a["sections"][:5]
    assert a["semantic"]["cos_add"]["correct"] == sum(s["cos_add"]["correct"] for s in sem)
    assert a["semantic"]["evaluated"] == sum(s["evaluated"] for s in sem)
    assert a["syntactic"]["evaluated"] == t["evaluated"] - a["semantic"]["evaluated"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # most_similar_cosmul calls init_sims
def test_3cosmul_matches_gensim_most_similar_cosmul(vs, ours):
    theirs = _gensim_cosmul(vs.kv, vs.questions, RESTRICT)
    a = ours["analogies"][0]
    assert [s["section"] for s in a["sections"]] == [n for n, _, _ in theirs]
    for mine, (name, correct, incorrect) in zip(a["sections"], theirs):
        assert mine["evaluated"] == correct + incorrect, name
        assert mine["cos_mul"]["correct"] == correct, name
    correct = sum(c for _, c, _ in theirs)
    evaluated = sum(c + i for _, c, i in theirs)
    assert a["total"]["cos_mul"]["correct"] == correct
    assert a["total"]["cos_mul"]["accuracy"] == pytest.approx(correct / evaluated, abs=1e-4)
    assert a["total"]["cos_mul"]["correct"] != a["total"]["cos_add"]["correct"]


@pytest.mark.parametrize("restrict", [None, 20_000], ids=["default", "restricted"])
def test_word_pairs_match_gensim_evaluate_word_pairs(vs, ours, restrict):
    if restrict is None:
        report = ours["similarity"]
    else:
        args = ["--similarity-restrict", restrict]
        for p in PAIR_FILES:
            args += ["--similarity", p]
        report = colonnade_eval(vs.binary, *args)["similarity"]
    for mine, path in zip(report, PAIR_FILES):
        kw = {} if restrict is None else {"restrict_vocab": restrict}
        pearson, spearman, oov_ratio = vs.kv.evaluate_word_pairs(path, **kw)
        assert mine["spearman"] == pytest.approx(spearman[0], abs=1e-4), path.name
        assert mine["pearson"] == pytest.approx(pearson[0], abs=1e-4), path.name
        assert mine["oov_ratio"] == pytest.approx(oov_ratio, abs=1e-9), path.name
        assert mine["skipped"] > 0 and mine["evaluated"] == mine["pairs"] - mine["skipped"]
        assert mine["restrict"] == (VOCAB if restrict is None else restrict)


def test_table_output_names_sections_and_totals(vs):
    res = run([colonnade(), "eval", "--vectors", vs.h5, "--analogies", vs.questions, "--similarity", PAIR_FILES[0]])
    out = res.stdout
    for name in ("capital-common-countries", "gram9-plural-verbs", "semantic", "syntactic", "total",
                 "3CosAdd", "3CosMul", "spearman", "wordsim353.tsv"):
        assert name in out, out


def test_eval_errors_name_the_file(vs, tmp_path):
    res = run_fail([colonnade(), "eval", "--vectors", tmp_path / "missing.bin", "--analogies", vs.questions])
    assert "missing.bin" in res.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("a b c d\n")
    res = run_fail([colonnade(), "eval", "--vectors", vs.binary, "--analogies", bad])
    assert "bad.txt:1" in res.stderr and "section" in res.stderr
    junk = tmp_path / "junk.vec"
    junk.write_bytes(b"\x00\x01 not vectors")
    res = run_fail([colonnade(), "eval", "--vectors", junk, "--similarity", PAIR_FILES[0]])
    assert "junk.vec" in res.stderr
    res = run_fail([colonnade(), "eval", "--vectors", vs.binary])
    assert "--analogies" in res.stderr


# ---------------------------------------------------------------- similar


def _check_neighbours(vs: VectorSet, unit: np.ndarray, query_row: int, got: list[tuple[str, float]], k: int,
                      min_cos: float):
    """Brute force in float64: every listed neighbour has that cosine, the list
    is in order, and nothing left out beats it (up to float32 rounding).
    Returns the exact expected rows (ties: lower row first) and ours."""
    cos = unit @ unit[query_row]
    cos[query_row] = -np.inf
    index = {w: i for i, w in enumerate(vs.words)}
    rows = [index[w] for w, _ in got]
    assert query_row not in rows
    assert len(set(rows)) == len(rows)
    for (w, c), r in zip(got, rows):
        assert c == pytest.approx(cos[r], abs=1e-5), w
        assert c >= min_cos - 1e-6
    cs = [c for _, c in got]
    assert all(a >= b - 1e-6 for a, b in zip(cs, cs[1:]))
    rest = np.delete(cos, rows + [query_row])
    best_left = rest.max() if rest.size else -np.inf
    if len(got) < k:
        assert best_left < min_cos + 1e-5, "a neighbour above --min-cosine is missing"
    else:
        assert best_left <= cs[-1] + 1e-5, "a better neighbour is missing"
    expected = [int(i) for i in np.argsort(-cos, kind="stable")[:k] if cos[i] >= min_cos]
    return expected, rows


@pytest.mark.parametrize("k,min_cos", [(10, -1.0), (30, 0.65), (5, 0.3)])
def test_similar_matches_numpy_brute_force(vs, k, min_cos):
    rng = np.random.default_rng(k)
    queries = [vs.words[i] for i in rng.choice(VOCAB, size=40, replace=False)] + ["東京", "straße"]
    res = run([colonnade(), "similar", "--vectors", vs.binary, "--k", k, "--min-cosine", min_cos, "--json", *queries])
    report = json.loads(res.stdout)
    assert report["unknown"] == []
    assert [r["word"] for r in report["results"]] == queries
    unit = vs.vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    exact = 0
    for r in report["results"]:
        got = [(n["word"], n["cosine"]) for n in r["neighbours"]]
        assert [n["rank"] for n in r["neighbours"]] == list(range(1, len(got) + 1))
        assert len(got) <= k
        expected, rows = _check_neighbours(vs, unit, vs.words.index(r["word"]), got, k, min_cos)
        exact += expected == rows
    assert exact >= len(queries) - 2, "orders differ beyond float rounding"
    if min_cos > 0.5:
        assert any(len(r["neighbours"]) < k for r in report["results"]), "--min-cosine must cut some lists"


def test_similar_tsv_queries_file_case_fallback_and_unknown_words(vs, tmp_path):
    uppers = collections.Counter(w.upper() for w in vs.words)
    lower = next(w for w in vs.words if w.islower() and w.isalpha() and uppers[w.upper()] == 1)
    qfile = tmp_path / "queries.txt"
    qfile.write_text(f"{vs.words[3]}\n\n  {lower.upper()}  \nno-such-word\n", encoding="utf-8")
    res = run([colonnade(), "similar", "--vectors", vs.h5, "--queries", qfile, "--k", 4, "--min-cosine", -1])
    lines = res.stdout.splitlines()
    assert lines[0] == "word\trank\tneighbour\tcosine"
    rows = [line.split("\t") for line in lines[1:]]
    assert all(len(r) == 4 for r in rows)
    assert [r[0] for r in rows] == [vs.words[3]] * 4 + [lower.upper()] * 4
    assert [int(r[1]) for r in rows] == [1, 2, 3, 4] * 2
    assert "unknown word: no-such-word" in res.stderr
    assert f"using {lower}" in res.stderr
    # Same neighbours as asking for the lower-case word itself.
    same = run([colonnade(), "similar", "--vectors", vs.binary, "--k", 4, "--min-cosine", -1, lower])
    assert [line.split("\t")[2:] for line in same.stdout.splitlines()[1:]] == [r[2:] for r in rows[4:]]
    fail = run_fail([colonnade(), "similar", "--vectors", vs.binary, "nothing-known", "at-all"])
    assert "nothing-known" in fail.stderr
