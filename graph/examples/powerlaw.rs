//! Writes a Barabási–Albert graph (preferential attachment: a power-law
//! degree distribution, every node of degree at least `m`) as an edge list,
//! for benchmarks at sizes no labelled graph reaches:
//!
//! ```sh
//! cargo run --release -p colonnade-graph --example powerlaw -- NODES M SEED OUT
//! ```
//!
//! Node i ≥ m joins with m edges to earlier nodes drawn with probability
//! proportional to their degree (a uniform pick from the list of edge
//! endpoints so far; repeated picks are kept, as the model allows
//! multi-edges). Deterministic for a seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [nodes, m, seed, out] = &args[..] else {
        return Err("usage: powerlaw NODES M SEED OUT".into());
    };
    let (nodes, m, seed): (u32, u32, u64) = (nodes.parse()?, m.parse()?, seed.parse()?);
    if m == 0 || nodes <= m {
        return Err("need NODES > M >= 1".into());
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let edges = u64::from(nodes - m) * u64::from(m);
    let mut ends: Vec<u32> = Vec::with_capacity(2 * edges as usize + m as usize);
    // The first m nodes start as a star's leaves: node m links to each.
    ends.extend(0..m);
    let file = fs_err::File::create(out)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 22, file);
    let mut line = itoa::Buffer::new();
    let mut picks = Vec::with_capacity(m as usize);
    for v in m..nodes {
        picks.clear();
        if v == m {
            picks.extend(0..m);
        } else {
            for _ in 0..m {
                picks.push(ends[rng.random_range(0..ends.len())]);
            }
        }
        for &u in &picks {
            w.write_all(line.format(u).as_bytes())?;
            w.write_all(b" ")?;
            w.write_all(line.format(v).as_bytes())?;
            w.write_all(b"\n")?;
            ends.push(u);
            ends.push(v);
        }
    }
    w.flush()?;
    eprintln!("{nodes} nodes, {edges} edges (m = {m}, seed {seed}) -> {out}");
    Ok(())
}
