//! Random walks, regenerated from the run seed wherever they are needed.
//!
//! An epoch holds `walks_per_node` rounds; each round starts one walk at
//! every node, in an order shuffled per (epoch, round) as DeepWalk shuffles
//! its node list. Walk `index = round * nodes + position` of an epoch draws
//! its steps from a ChaCha8 stream keyed by (seed, epoch, index), so a worker
//! that trains walk `index` needs nothing from the one that counted it.
//!
//! A step from `v` picks an out-neighbour with probability proportional to
//! the edge's weight. With node2vec's p or q not 1, a step from `v` reached
//! from `t` is proposed that way and accepted with probability
//! `bias(t, x) / max_bias`, where bias is 1/p for going back to `t`, 1 for a
//! neighbour of `t`, 1/q otherwise: exactly node2vec's distribution
//! `w(v, x) · bias(t, x)`, without its per-edge alias tables. A walk ends
//! early at a node with no out-edges (directed graphs).

use crate::Graph;
use colonnade_common::seeds::{self, derive, Purpose};
use rand::Rng;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How walks are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WalkParams {
    pub walks_per_node: u32,
    /// Nodes per walk, the start included.
    pub walk_length: u32,
    /// node2vec's return parameter: a step back weighs 1/p.
    pub p: f32,
    /// node2vec's in-out parameter: a step away from the previous node
    /// weighs 1/q.
    pub q: f32,
}

impl WalkParams {
    /// The first invalid setting, named by its flag.
    pub fn check(&self) -> Result<(), String> {
        if self.walks_per_node == 0 {
            return Err("--walks-per-node must be at least 1".into());
        }
        if self.walk_length < 2 {
            return Err(
                "--walk-length must be at least 2 (a walk of one node has no context)".into(),
            );
        }
        for (flag, v) in [("--p", self.p), ("--q", self.q)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{flag} {v} must be a positive finite number"));
            }
        }
        Ok(())
    }

    /// Whether steps depend on the previous node (node2vec with p or q ≠ 1).
    pub fn second_order(&self) -> bool {
        self.p != 1.0 || self.q != 1.0
    }
}

/// The walks of one run over one graph.
pub struct Walks<'g> {
    graph: &'g Graph,
    params: WalkParams,
    seed: u64,
}

impl<'g> Walks<'g> {
    pub fn new(graph: &'g Graph, params: WalkParams, seed: u64) -> Self {
        Self {
            graph,
            params,
            seed,
        }
    }

    pub fn params(&self) -> WalkParams {
        self.params
    }

    /// Walks in one epoch: `walks_per_node` × nodes.
    pub fn per_epoch(&self) -> u64 {
        u64::from(self.params.walks_per_node) * self.graph.nodes() as u64
    }

    /// The start nodes of `round` of `epoch`, in walk order: every node once.
    pub fn round_order(&self, epoch: u64, round: u64) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.graph.nodes() as u32).collect();
        let mut rng = seeds::rng(derive(self.seed, Purpose::WalkOrder, epoch, round));
        for i in (1..order.len()).rev() {
            let j = rng.random_range(0..=i);
            order.swap(i, j);
        }
        order
    }

    /// Walk `index` of `epoch`, which starts at `start`, into `out`.
    pub fn walk(&self, epoch: u64, index: u64, start: u32, out: &mut Vec<u32>) {
        let mut rng = seeds::rng(derive(self.seed, Purpose::Walk, epoch, index));
        let g = self.graph;
        let len = self.params.walk_length as usize;
        out.clear();
        out.push(start);
        let (p_bias, q_bias) = (1.0 / self.params.p, 1.0 / self.params.q);
        let max_bias = p_bias.max(q_bias).max(1.0);
        let mut prev: Option<u32> = None;
        let mut cur = start;
        while out.len() < len {
            let Some(mut next) = g.step(cur, &mut rng) else {
                break; // no out-edges
            };
            if let Some(t) = prev.filter(|_| self.params.second_order()) {
                loop {
                    let bias = if next == t {
                        p_bias
                    } else if g.has_edge(t, next) {
                        1.0
                    } else {
                        q_bias
                    };
                    if rng.random::<f32>() * max_bias < bias {
                        break;
                    }
                    next = g
                        .step(cur, &mut rng)
                        .expect("cur has out-edges: one was drawn");
                }
            }
            prev = Some(cur);
            cur = next;
            out.push(next);
        }
    }

    /// Calls `f(index, walk)` for every walk of `epoch` whose index `keep`
    /// accepts, in index order; stops when `f` returns false.
    pub fn for_each<E>(
        &self,
        epoch: u64,
        mut keep: impl FnMut(u64) -> bool,
        mut f: impl FnMut(u64, &[u32]) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let n = self.graph.nodes() as u64;
        let mut buf = Vec::with_capacity(self.params.walk_length as usize);
        for round in 0..u64::from(self.params.walks_per_node) {
            let order = self.round_order(epoch, round);
            for (pos, &start) in order.iter().enumerate() {
                let index = round * n + pos as u64;
                if !keep(index) {
                    continue;
                }
                self.walk(epoch, index, start, &mut buf);
                if !f(index, &buf)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// How often each node occurs in all walks of `epoch` (every worker's),
    /// using every core.
    pub fn count(&self, epoch: u64) -> Vec<u64> {
        let n = self.graph.nodes();
        let counts: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        const CHUNK: usize = 1024;
        for round in 0..u64::from(self.params.walks_per_node) {
            let order = self.round_order(epoch, round);
            order.par_chunks(CHUNK).enumerate().for_each_init(
                || Vec::with_capacity(self.params.walk_length as usize),
                |buf, (c, starts)| {
                    for (j, &start) in starts.iter().enumerate() {
                        let index = round * n as u64 + (c * CHUNK + j) as u64;
                        self.walk(epoch, index, start, buf);
                        for &v in buf.iter() {
                            counts[v as usize].fetch_add(1, Relaxed);
                        }
                    }
                },
            );
        }
        counts.into_iter().map(AtomicU64::into_inner).collect()
    }
}

impl Graph {
    /// One first-order step from `v`: an out-neighbour drawn by edge
    /// weight; `None` when `v` has none.
    fn step(&self, v: u32, rng: &mut impl Rng) -> Option<u32> {
        let range = self.range(v);
        if range.is_empty() {
            return None;
        }
        let i = match &self.cum_weights {
            None => rng.random_range(0..range.len()),
            Some(cum) => {
                let cum = &cum[range.clone()];
                let x = rng.random::<f32>() * cum[cum.len() - 1];
                cum.partition_point(|&c| c <= x).min(cum.len() - 1)
            }
        };
        Some(self.targets[range.start + i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn graph(text: &str, directed: bool) -> Graph {
        Graph::read(text.as_bytes(), Path::new("g"), directed).expect("parses")
    }

    fn params(walks: u32, len: u32, p: f32, q: f32) -> WalkParams {
        WalkParams {
            walks_per_node: walks,
            walk_length: len,
            p,
            q,
        }
    }

    /// Frequencies of `x` in `v -> x` steps taken right after `t -> v`,
    /// over many walks started at t whose first step went to v.
    fn second_steps(g: &Graph, p: WalkParams, t: u32, v: u32, walks: u64) -> Vec<f64> {
        let w = Walks::new(g, p, 9);
        let mut counts = vec![0u64; g.nodes()];
        let mut buf = Vec::new();
        let mut total = 0u64;
        for i in 0..walks {
            w.walk(0, i, t, &mut buf);
            if buf.len() >= 3 && buf[1] == v {
                counts[buf[2] as usize] += 1;
                total += 1;
            }
        }
        counts.iter().map(|&c| c as f64 / total as f64).collect()
    }

    // t=0, v=1; 1's neighbours: 0 (t itself), 2 (also t's neighbour), 3 and 4 (not).
    const KITE: &str = "0 1\n0 2\n1 2\n1 3\n1 4\n3 5\n";

    #[test]
    fn uniform_steps_are_uniform_over_neighbours() {
        let g = graph(KITE, false);
        let f = second_steps(&g, params(1, 3, 1.0, 1.0), 0, 1, 200_000);
        for x in [0, 2, 3, 4] {
            assert!((f[x] - 0.25).abs() < 0.01, "node {x}: {:.4}", f[x]);
        }
        assert_eq!(f[5], 0.0);
    }

    #[test]
    fn node2vec_steps_follow_the_biased_distribution() {
        // node2vec: P(x) ∝ w(v,x)·bias(t,x): back to t 1/p, t's neighbour 1,
        // else 1/q. With p = 4, q = 0.25: 0.25, 1, 4, 4 → /9.25.
        let g = graph(KITE, false);
        let f = second_steps(&g, params(1, 3, 4.0, 0.25), 0, 1, 400_000);
        let expect = [0.25 / 9.25, 0.0, 1.0 / 9.25, 4.0 / 9.25, 4.0 / 9.25];
        for x in [0, 2, 3, 4] {
            assert!(
                (f[x] - expect[x]).abs() < 0.01,
                "node {x}: {:.4} vs {:.4}",
                f[x],
                expect[x]
            );
        }
    }

    #[test]
    fn weighted_steps_follow_the_weights() {
        let g = graph("a b 1\na c 2\na d 5\n", true);
        let w = Walks::new(&g, params(1, 2, 1.0, 1.0), 3);
        let mut counts = [0u64; 4];
        let mut buf = Vec::new();
        for i in 0..160_000 {
            w.walk(0, i, 0, &mut buf);
            assert_eq!(buf.len(), 2, "b, c, d have no out-edges");
            counts[buf[1] as usize] += 1;
        }
        for (x, share) in [(1, 1.0 / 8.0), (2, 2.0 / 8.0), (3, 5.0 / 8.0)] {
            let f = counts[x] as f64 / 160_000.0;
            assert!((f - share).abs() < 0.01, "node {x}: {f:.4} vs {share:.4}");
        }
    }

    #[test]
    fn walks_are_edges_and_deterministic() {
        let g = graph(KITE, false);
        let w = Walks::new(&g, params(3, 10, 0.5, 2.0), 1);
        let mut all = Vec::new();
        w.for_each(
            0,
            |_| true,
            |i, walk| {
                assert_eq!(walk.len(), 10, "undirected: no dead ends");
                assert!(
                    walk.windows(2).all(|s| g.has_edge(s[0], s[1])),
                    "walk {i}: {walk:?}"
                );
                all.push(walk.to_vec());
                Ok::<_, ()>(true)
            },
        )
        .expect("no error");
        assert_eq!(all.len() as u64, w.per_epoch());
        // Each round starts once at every node.
        for round in all.chunks(g.nodes()) {
            let mut starts: Vec<u32> = round.iter().map(|w| w[0]).collect();
            starts.sort_unstable();
            assert_eq!(starts, (0..g.nodes() as u32).collect::<Vec<_>>());
        }
        // Regenerated alone, walk 7 is the same; another epoch differs.
        let start = all[7][0];
        let mut again = Vec::new();
        w.walk(0, 7, start, &mut again);
        assert_eq!(again, all[7]);
        assert_ne!(w.round_order(0, 0), w.round_order(1, 0));
        // Counting (in parallel) sees exactly these walks.
        let mut counts = vec![0u64; g.nodes()];
        for v in all.iter().flatten() {
            counts[*v as usize] += 1;
        }
        assert_eq!(w.count(0), counts);
    }

    #[test]
    fn directed_walks_stop_at_dead_ends() {
        let g = graph("a b\nb c\n", true);
        let w = Walks::new(&g, params(1, 5, 1.0, 1.0), 1);
        let mut buf = Vec::new();
        w.walk(0, 0, 0, &mut buf);
        assert_eq!(buf, [0, 1, 2]);
    }

    #[test]
    fn bad_parameters_are_named() {
        assert!(params(0, 5, 1.0, 1.0)
            .check()
            .unwrap_err()
            .contains("--walks-per-node"));
        assert!(params(1, 1, 1.0, 1.0)
            .check()
            .unwrap_err()
            .contains("--walk-length"));
        assert!(params(1, 5, 0.0, 1.0).check().unwrap_err().contains("--p"));
        assert!(params(1, 5, 1.0, f32::NAN)
            .check()
            .unwrap_err()
            .contains("--q"));
        assert!(params(1, 5, 1.0, 1.0).check().is_ok());
    }
}
