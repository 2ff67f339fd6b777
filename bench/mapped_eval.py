#!/usr/bin/env python3
"""`eval` and `similar` on a V-row HDF5 file used in place (issue 16).

Writes, with h5py and numpy (not Colonnade's writer), an HDF5 file in
Colonnade's layout for the vocabulary of `colonnade synth --words V`: every
planted group's members get their group's random centre plus small noise,
head words random rows. Then runs `colonnade eval --groups` and `colonnade
similar` on it, sampling each process's RssAnon, RssFile and VmHWM every
50 ms, and checks `similar` against numpy's exact cosine top-k over all
rows (read block by block). Recall must be 1.0 for popular and spread groups
alike: the planted structure is exact here, so any miss is a search bug.

    .venv/bin/python bench/mapped_eval.py --words 20M
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
from scale import parse_count  # noqa: E402

BLOCK = 1 << 20


def vocab_words(path: Path):
    """(word, count) in row order from a Colonnade vocabulary file."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            w, n = line.rstrip("\n").split("\t")
            yield w, int(n)


def write_h5(vocab: Path, out: Path, words: int, dim: int, seed: int) -> float:
    start = time.monotonic()
    rng = np.random.default_rng(seed)
    groups = words // 8 + 1
    centres = rng.standard_normal((groups, dim), dtype=np.float32)
    with h5py.File(out, "w") as f:
        vec = f.create_dataset("vectors", (words, dim), dtype="<f4")  # contiguous
        wds = f.create_dataset("words", (words,), dtype=h5py.string_dtype("utf-8"))
        cnt = f.create_dataset("counts", (words,), dtype="<u8")
        it = vocab_words(vocab)
        row = 0
        while row < words:
            block = [next(it) for _ in range(min(BLOCK, words - row))]
            names = [w for w, _ in block]
            gid = np.array([int(w[1:].split("_")[0]) if w.startswith("t") else -1 for w in names])
            m = rng.standard_normal((len(block), dim), dtype=np.float32)
            tail = gid >= 0
            m[tail] = centres[gid[tail]] + 0.05 * m[tail]
            vec[row:row + len(block)] = m
            wds[row:row + len(block)] = names
            cnt[row:row + len(block)] = [n for _, n in block]
            row += len(block)
    return time.monotonic() - start


def run_sampled(cmd: list[str], log: Path) -> dict:
    """Runs `cmd`, sampling /proc/PID/status; returns the peaks and the output."""
    start = time.monotonic()
    with open(log, "wb") as logf:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf)
        peaks, t = c.watch_status(p.pid, ("RssAnon", "RssFile", "VmHWM"), lambda: p.poll() is not None)
        out, _ = p.communicate()
        t.join()
    if p.returncode != 0:
        raise SystemExit(f"{cmd[1]} failed:\n{c.tail(log)}")
    return {"wall_seconds": time.monotonic() - start, "returncode": p.returncode,
            **{f"peak_{k}_mb": v / 1024 for k, v in peaks.items()}, "stdout": out.decode()}


def numpy_topk(h5: Path, query_rows: list[int], k: int) -> list[list[int]]:
    with h5py.File(h5, "r") as f:
        vec = f["vectors"]
        q = vec[sorted(query_rows)]
        order = {r: i for i, r in enumerate(sorted(query_rows))}
        q = q[[order[r] for r in query_rows]]
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        best = [np.empty(0, dtype=np.int64) for _ in query_rows]
        best_s = [np.empty(0, dtype=np.float32) for _ in query_rows]
        for s in range(0, vec.shape[0], BLOCK):
            m = vec[s:s + BLOCK]
            m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-30)
            scores = q @ m.T
            for i, r in enumerate(query_rows):
                if s <= r < s + len(m):
                    scores[i, r - s] = -np.inf
                idx = np.argpartition(-scores[i], k)[:k]
                allr = np.concatenate([best[i], idx + s])
                alls = np.concatenate([best_s[i], scores[i, idx]])
                top = np.argsort(-alls, kind="stable")[:k]
                best[i], best_s[i] = allr[top], alls[top]
        return [list(map(int, b)) for b in best]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--words", type=parse_count, default=parse_count("20M"))
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--work", type=Path, default=Path("/tmp/colonnade-mapped"))
    p.add_argument("--bin-dir", type=Path, default=c.REPO / "target" / "release")
    p.add_argument("--out", type=Path, default=c.REPO / "bench" / "results")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    c.set_log_name("mapped_eval")
    args.work.mkdir(parents=True, exist_ok=True)
    b = str(args.bin_dir / "colonnade")
    w = args.work
    corpus, groups, vocab, h5 = w / "synth.txt", w / "groups.txt", w / "vocab.tsv", w / "planted.h5"
    r: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": c.machine_info(),
               "version": c.colonnade_version(args.bin_dir), "command": sys.argv, "words": args.words,
               "dim": args.dim}
    subprocess.run([b, "synth", "--words", str(args.words), "--tokens", str(args.words), "--output", str(corpus),
                    "--groups", str(groups), "--seed", "1"], check=True, stderr=subprocess.DEVNULL)
    subprocess.run([b, "vocab", "--corpus", str(corpus), "--min-count", "1", "--output", str(vocab)], check=True,
                   stderr=subprocess.DEVNULL)
    corpus.unlink()
    r["h5py_write_seconds"] = write_h5(vocab, h5, args.words, args.dim, 7)
    r["matrix_mb"] = args.words * args.dim * 4 / 2**20
    c.log(f"wrote {h5} ({h5.stat().st_size / 2**20:,.0f} MiB) in {r['h5py_write_seconds']:.0f} s")
    ev = run_sampled([b, "eval", "--vectors", str(h5), "--groups", str(groups), "--group-queries", "100", "--json"],
                     w / "eval.log")
    out = json.loads(ev.pop("stdout"))
    ev["recall"] = {s["sample"]: s["recall"] for s in out["groups"]["samples"]}
    ev["mapped"] = "vectors mapped" in (w / "eval.log").read_text(errors="replace")
    r["eval_groups"] = ev
    c.log(f"eval --groups: {ev}")
    with open(groups, encoding="utf-8") as f:
        last = f.readlines()[-1].split()
    queries = ["t0_0", "t1000_3", last[-1], "h0", "h77"]
    k = 7
    sim = run_sampled([b, "similar", "--vectors", str(h5), "--k", str(k), "--json", *queries], w / "similar.log")
    got = json.loads(sim.pop("stdout"))
    rows = {}
    for row, (word, _) in enumerate(vocab_words(vocab)):
        if word in queries:
            rows[word] = row
        if len(rows) == len(queries):
            break
    want = numpy_topk(h5, [rows[q] for q in queries], k)
    names = {}
    need = {x for lst in want for x in lst}
    for row, (word, _) in enumerate(vocab_words(vocab)):
        if row in need:
            names[row] = word
    agree = []
    for res, ref in zip(got["results"], want):
        agree.append([n["word"] for n in res["neighbours"]] == [names[x] for x in ref])
    sim["agrees_with_numpy"] = agree
    sim["mapped"] = "vectors mapped" in (w / "similar.log").read_text(errors="replace")
    r["similar"] = sim
    c.log(f"similar: {sim}")
    if not args.keep:
        h5.unlink()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"mapped-eval-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(r, indent=2, default=str))
    c.log(f"report: {path}")
    print(json.dumps({k: v for k, v in r.items() if k != "machine"}, indent=2, default=str))
    return 0 if all(agree) and ev["recall"].get("popular") == 1.0 and ev["recall"].get("spread") == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
