//! What a training run reads, prepared from its flags ([`prepare`]): a
//! text corpus with its vocabulary (loaded, or counted here), an encoded
//! corpus with its counts, or a graph whose random walks are the sentences
//! (its nodes counted in the first epoch's walks).

use crate::cli::train::{GraphArgs, TrainArgs};
use crate::flags::CountArgs;
use crate::preflight::human_bytes;
use crate::stream::{GraphSource, Source};
use anyhow::{bail, Context};
use colonnade_common::vocab::{Vocab, VocabCounts};
use colonnade_graph::walk::Walks;
use colonnade_graph::Graph;
use std::sync::Arc;
use std::time::Instant;

/// The words of a run (none for an encoded corpus: training needs only the
/// counts; export reads them from `--vocab`) and what its sentences come
/// from. Writes `--save-vocab` and `--save-walks`. Blocking (it may count
/// a corpus or walk a graph).
pub fn prepare(args: &TrainArgs) -> anyhow::Result<(Option<Arc<Vocab>>, Source)> {
    let (words, source) = match (&args.graph.graph, &args.encoded, &args.vocab) {
        (Some(graph), _, _) => {
            let (vocab, source) = graph_source(
                graph,
                &args.graph,
                args.seed,
                args.min_count(),
                args.max_vocab,
            )?;
            (Some(Arc::new(vocab)), source)
        }
        (None, Some(dir), Some(path)) => {
            let counts = Arc::new(
                VocabCounts::load(path)
                    .map_err(|e| anyhow::anyhow!(e.for_flag("--vocab", path)))?,
            );
            let encoded = crate::encode::open_for_training(dir, &counts)?;
            (None, Source::Encoded(encoded, counts))
        }
        (None, _, Some(path)) => {
            let vocab = Arc::new(
                Vocab::load(path).map_err(|e| anyhow::anyhow!(e.for_flag("--vocab", path)))?,
            );
            let source = Source::Text(args.corpus.clone(), Arc::clone(&vocab));
            (Some(vocab), source)
        }
        (None, _, None) => {
            let count = CountArgs {
                memory_budget: None,
                spill_dir: None,
                threads: args.threads,
            };
            let (vocab, _) = crate::vocab::count_vocab(
                &args.corpus,
                args.min_count(),
                args.max_vocab,
                args.invalid_utf8.into(),
                &count,
            )?;
            let vocab = Arc::new(vocab);
            let source = Source::Text(args.corpus.clone(), Arc::clone(&vocab));
            (Some(vocab), source)
        }
    };
    if let (Some(path), Some(words)) = (&args.save_vocab, &words) {
        words.save(path)?;
    }
    Ok((words, source))
}

/// Loads the graph, counts its nodes in the first epoch's walks and builds
/// the vocabulary from those counts; writes --save-walks.
fn graph_source(
    path: &std::path::Path,
    g: &GraphArgs,
    seed: u64,
    min_count: u64,
    max_vocab: Option<usize>,
) -> anyhow::Result<(Vocab, Source)> {
    let start = Instant::now();
    let graph = Graph::load(path, g.directed)?;
    let stats = graph.stats();
    tracing::info!(
        file = %path.display(),
        nodes = graph.nodes(),
        edges = stats.edges,
        self_loops_left_out = stats.self_loops,
        weighted = stats.weighted,
        directed = g.directed,
        layout = %human_bytes(graph.layout_bytes()),
        seconds = format!("{:.2}", start.elapsed().as_secs_f64()),
        "graph loaded"
    );
    let walks = g.walk_params();
    let start = Instant::now();
    let counts = Walks::new(&graph, walks, seed).count(0);
    let tokens: u64 = counts.iter().sum();
    let pairs = graph
        .names()
        .iter()
        .zip(&counts)
        .filter(|&(_, &c)| c >= min_count.max(1))
        .map(|(n, &c)| (n.clone(), c))
        .collect();
    let vocab = Vocab::from_pairs(pairs, max_vocab)?;
    if let Some((name, why)) = vocab
        .words()
        .find_map(|w| colonnade_common::words::unwritable(w).map(|why| (w, why)))
    {
        bail!("--graph {}: node {name:?} {why}", path.display());
    }
    if vocab.len() < 2 {
        bail!(
            "{}: {} node(s) occur at least --min-count {min_count} times in the walks; training needs at least 2",
            path.display(),
            vocab.len()
        );
    }
    tracing::info!(
        walks = u64::from(walks.walks_per_node) * graph.nodes() as u64,
        tokens,
        kept = vocab.len(),
        min_count,
        seconds = format!("{:.2}", start.elapsed().as_secs_f64()),
        "walks counted"
    );
    let vocab_ids = graph
        .names()
        .iter()
        .map(|n| vocab.id(n).unwrap_or(u32::MAX))
        .collect();
    let source = Arc::new(GraphSource {
        graph,
        walks,
        seed,
        vocab_ids,
    });
    if let Some(out) = &g.save_walks {
        save_walks(&source, out)?;
    }
    let counts = vocab.counts_only();
    Ok((vocab, Source::Walks(source, counts)))
}

/// Writes the first epoch's walks, one per line, node ids by name.
fn save_walks(source: &GraphSource, path: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    // Whole or not at all: under a temporary name until written.
    let staged = colonnade_formats::staged::Staged::new(path);
    let file = fs_err::File::create(staged.path())?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let names = source.graph.names();
    source
        .walks()
        .for_each(
            0,
            |_| true,
            |_, walk| {
                let mut sep = "";
                for &v in walk {
                    write!(out, "{sep}{}", names[v as usize])?;
                    sep = " ";
                }
                writeln!(out)?;
                Ok::<_, std::io::Error>(true)
            },
        )
        .and_then(|_| out.flush())
        .with_context(|| format!("cannot write --save-walks {}", path.display()))?;
    drop(out);
    staged
        .commit()
        .with_context(|| format!("cannot write --save-walks {}", path.display()))?;
    Ok(())
}
