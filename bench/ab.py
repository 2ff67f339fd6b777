#!/usr/bin/env python3
"""Old binary against new in one run: one `colonnade train` command, run with
each of two binary directories in turn (A B A B ...), so that the ratios stay
meaningful while this shared machine's speed drifts.

Per run: wall seconds, CPU seconds and peak RSS of the whole process (create,
train, write), and the training words/s of its --summary. Per pair: the A/B
ratios; then their medians, and the medians of each side. JSON into
bench/results/ab-*.json.

    bench/ab.py --a target/release --b /tmp/colonnade-old --pairs 3 -- \\
        --encoded enc --vocab vocab.tsv --size 100 --window 5 --negative 5 \\
        --min-count 1 --sample 1e-4 --iter 1 --threads 2 --seed 1 \\
        --embedded-shards 4

Everything after `--` is passed to `colonnade train`; `--summary` and
`--output` are added per run (under --work). With `--shard-processes N`, each
run starts N `ps-shard --threads 1` processes of its own binary directory
(a worker refuses shards of another API version) and adds `--shards`; the
run then also records each shard's CPU seconds and peak RSS, and the
ratio of the whole cluster's CPU (worker and shards: `total_cpu_a_over_b`;
`cpu_a_over_b` is the worker's alone). Run nothing else heavy meanwhile.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402


def identity(bin_dir: Path) -> dict:
    """The binary directory, its version and its colonnade binary's SHA-256 (the
    version carries no commit)."""
    digest = hashlib.sha256((bin_dir / "colonnade").read_bytes()).hexdigest()[:16]
    return {"dir": str(bin_dir), "version": c.colonnade_version(bin_dir), "sha256": digest}


def one_run(bin_dir: Path, train: list[str], work: Path, tag: str, shard_processes: int = 0) -> dict:
    summary, out = work / f"{tag}.json", work / f"{tag}.h5"
    cmd = [str(bin_dir / "colonnade"), "train", *train, "--summary", str(summary), "--output", str(out)]
    shards = c.start_shards(bin_dir, shard_processes, work, tag) if shard_processes else []
    try:
        if shards:
            cmd += ["--shards", ",".join(e for _, e in shards)]
        r = c.run_child(cmd, work / f"{tag}.log")
        if shards:
            r["shards"] = [{"cpu_seconds": c.proc_cpu_seconds(p.pid),
                            "peak_rss_mb": c.status_kib(p.pid, "VmHWM") / 1024} for p, _ in shards]
    finally:
        c.stop_shards(shards)
    if r["returncode"] != 0:
        raise SystemExit(f"{tag} failed (exit {r['returncode']}):\n{c.tail(work / f'{tag}.log')}")
    s = json.loads(summary.read_text())
    r["words_per_second"] = s["words"] / s["seconds"]
    r["epoch_loss"] = s.get("epoch_loss")
    out.unlink(missing_ok=True)
    c.log(f"{tag}: {r['words_per_second']:,.0f} words/s, wall {r['wall_seconds']:.1f} s, "
          f"peak {r['peak_rss_mb']:,.0f} MB"
          + "".join(f"; shard {s['cpu_seconds']:.0f} CPU-s, {s['peak_rss_mb']:,.0f} MB" for s in r.get("shards", [])))
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", type=Path, required=True, help="binary directory A (the new one)")
    p.add_argument("--b", type=Path, required=True, help="binary directory B (the baseline)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--warmup", action="store_true", help="one uncounted B run first (page cache)")
    p.add_argument("--label", default="ab")
    p.add_argument("--shard-processes", type=int, default=0,
                   help="train over this many ps-shard processes of each side's binaries")
    p.add_argument("--work", type=Path, default=Path("/tmp/colonnade-ab"))
    p.add_argument("--out", type=Path, default=c.REPO / "bench" / "results")
    p.add_argument("train", nargs=argparse.REMAINDER, help="-- then the `colonnade train` flags")
    args = p.parse_args()
    train = args.train[1:] if args.train[:1] == ["--"] else args.train
    c.set_log_name("ab")
    args.work.mkdir(parents=True, exist_ok=True)
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": c.machine_info(),
                    "a": identity(args.a), "b": identity(args.b),
                    "train": train, "command": sys.argv, "pairs": []}
    if args.warmup:
        one_run(args.b, train, args.work, "warmup", args.shard_processes)
    for i in range(args.pairs):
        a = one_run(args.a, train, args.work, f"a{i}", args.shard_processes)
        b = one_run(args.b, train, args.work, f"b{i}", args.shard_processes)
        pair = {"a": a, "b": b, "words_per_second_a_over_b": a["words_per_second"] / b["words_per_second"],
                "wall_a_over_b": a["wall_seconds"] / b["wall_seconds"],
                "cpu_a_over_b": a["cpu_seconds"] / b["cpu_seconds"]}
        if args.shard_processes:
            # The whole cluster's CPU: the worker's and every shard's.
            total = {side: r["cpu_seconds"] + sum(s["cpu_seconds"] or 0.0 for s in r["shards"])
                     for side, r in (("a", a), ("b", b))}
            pair["total_cpu_a_over_b"] = total["a"] / total["b"]
        report["pairs"].append(pair)
        c.log(f"pair {i}: words/s A/B {pair['words_per_second_a_over_b']:.3f}, wall A/B {pair['wall_a_over_b']:.3f}")
    med = {k: statistics.median(pr[k] for pr in report["pairs"])
           for k in ("words_per_second_a_over_b", "wall_a_over_b", "cpu_a_over_b")}
    if args.shard_processes:
        med["total_cpu_a_over_b"] = statistics.median(pr["total_cpu_a_over_b"] for pr in report["pairs"])
    for side in ("a", "b"):
        med[f"words_per_second_{side}"] = statistics.median(pr[side]["words_per_second"] for pr in report["pairs"])
        med[f"peak_rss_mb_{side}"] = statistics.median(pr[side]["peak_rss_mb"] for pr in report["pairs"])
        if args.shard_processes:
            med[f"shard_cpu_seconds_{side}"] = statistics.median(
                sum(s["cpu_seconds"] for s in pr[side]["shards"]) for pr in report["pairs"])
            med[f"shard_peak_rss_mb_{side}"] = statistics.median(
                max(s["peak_rss_mb"] for s in pr[side]["shards"]) for pr in report["pairs"])
    report["medians"] = med
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"ab-{args.label}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    c.log(f"report: {out}")
    print(json.dumps(med, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
