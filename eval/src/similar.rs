//! `colonnade similar`: exact nearest neighbours by cosine over the whole
//! vocabulary. Queries run in blocks of [`QUERY_BLOCK`]; each block is one
//! pass of blocked matrix products over all rows ([`crate::knn`]). A query
//! word is looked up exactly, else case-insensitively (its most frequent
//! variant); the query's own row is never its neighbour. Unknown words are
//! reported, not fatal (unless every query is unknown). By default each word
//! gets its k nearest neighbours, however similar, as gensim's `most_similar`;
//! `--min-cosine` drops the less similar ones, and a word left with none is
//! reported on stderr.

use crate::embeddings::{CaseFold, Embeddings};
use crate::knn::{self, row_slice};
use anyhow::{bail, Context};
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Queries per pass over the vocabulary.
pub const QUERY_BLOCK: usize = 1024;

/// Print the nearest neighbours of words by cosine similarity.
#[derive(clap::Args, Debug)]
pub struct SimilarArgs {
    /// Vectors: our HDF5, word2vec text or word2vec binary (detected from the content).
    #[arg(long, env = "COLONNADE_VECTORS")]
    pub vectors: PathBuf,
    /// Neighbours per word (at most).
    #[arg(long, env = "COLONNADE_K", default_value_t = 30)]
    pub k: usize,
    /// Only neighbours at least this similar (default: no threshold, the k
    /// nearest however similar, as gensim's most_similar).
    #[arg(long, env = "COLONNADE_MIN_COSINE", allow_negative_numbers = true)]
    pub min_cosine: Option<f32>,
    /// Query words, one per line (blank lines ignored); combined with any WORD arguments.
    #[arg(long, env = "COLONNADE_QUERIES", value_name = "FILE")]
    pub queries: Option<PathBuf>,
    /// Print JSON instead of TSV (`word rank neighbour cosine`).
    #[arg(long, env = "COLONNADE_JSON")]
    pub json: bool,
    /// Query words.
    #[arg(value_name = "WORD")]
    pub words: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Neighbour {
    pub rank: usize,
    pub word: String,
    pub cosine: f32,
}

#[derive(Debug, Serialize)]
pub struct QueryResult {
    pub word: String,
    /// The vocabulary word used (differs from `word` when matched by case).
    pub matched: Option<String>,
    pub neighbours: Vec<Neighbour>,
}

#[derive(Debug, Serialize)]
pub struct SimilarReport {
    pub vectors: PathBuf,
    pub k: usize,
    /// None: no threshold.
    pub min_cosine: Option<f32>,
    pub results: Vec<QueryResult>,
    pub unknown: Vec<String>,
}

fn read_queries(args: &SimilarArgs) -> anyhow::Result<Vec<String>> {
    let mut words = args.words.clone();
    if let Some(path) = &args.queries {
        let bytes = fs_err::read(path)?;
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            let line = std::str::from_utf8(line)
                .with_context(|| format!("{}:{}: not UTF-8", path.display(), i + 1))?
                .trim_ascii();
            if !line.is_empty() {
                words.push(line.to_owned());
            }
        }
    }
    if words.is_empty() {
        bail!("no query words: give WORD... or --queries FILE");
    }
    Ok(words)
}

/// Nearest neighbours of `rows` (k best with cosine ≥ `min_cosine`, the row itself excluded).
pub fn neighbours(
    emb: &Embeddings,
    rows: &[u32],
    k: usize,
    min_cosine: f32,
) -> Vec<Vec<(f32, u32)>> {
    let mut out = Vec::with_capacity(rows.len());
    for block in rows.chunks(QUERY_BLOCK) {
        let probes = emb.probes(block);
        let init = knn::TopK::new(k);
        let tops = knn::scan(
            emb.base(),
            probes.view(),
            block.len(),
            &init,
            |t, scores, start, top: &mut knn::TopK, buf| {
                let me = block[t];
                let row = scores.row(t);
                let row = row_slice(&row);
                // A score below the floor is offered as NaN, which never enters.
                buf.clear();
                buf.extend(
                    row.iter()
                        .map(|&x| if x >= min_cosine { x } else { f32::NAN }),
                );
                top.push_slice(start, buf, |r| r == me);
            },
        );
        out.extend(tops.into_iter().map(|t| t.items().to_vec()));
    }
    out
}

pub fn search(args: &SimilarArgs) -> anyhow::Result<SimilarReport> {
    let queries = read_queries(args)?;
    let emb = Embeddings::load_logged(&args.vectors)?;
    let mut fold: Option<CaseFold> = None;
    let mut resolved = Vec::with_capacity(queries.len());
    let mut unknown = Vec::new();
    for q in &queries {
        let row = emb.id(q).or_else(|| {
            fold.get_or_insert_with(|| emb.case_fold(usize::MAX))
                .get(&q.to_uppercase())
        });
        if row.is_none() {
            unknown.push(q.clone());
        }
        resolved.push(row);
    }
    if !queries.is_empty() && unknown.len() == queries.len() {
        bail!(
            "no query word is in {}: {}",
            args.vectors.display(),
            unknown.join(" ")
        );
    }
    let known: Vec<u32> = resolved.iter().flatten().copied().collect();
    let start = Instant::now();
    let found = neighbours(
        &emb,
        &known,
        args.k,
        args.min_cosine.unwrap_or(f32::NEG_INFINITY),
    );
    tracing::info!(
        queries = known.len(),
        seconds = crate::seconds_since(start),
        "neighbours found"
    );
    let mut found = found.into_iter();
    let results = queries
        .iter()
        .zip(&resolved)
        .map(|(q, row)| {
            let Some(row) = row else {
                return QueryResult {
                    word: q.clone(),
                    matched: None,
                    neighbours: Vec::new(),
                };
            };
            let list = found.next().unwrap_or_default();
            QueryResult {
                word: q.clone(),
                matched: Some(emb.word(*row).to_owned()),
                neighbours: list
                    .into_iter()
                    .enumerate()
                    .map(|(i, (cosine, r))| Neighbour {
                        rank: i + 1,
                        word: emb.word(r).to_owned(),
                        cosine,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(SimilarReport {
        vectors: args.vectors.clone(),
        k: args.k,
        min_cosine: args.min_cosine,
        results,
        unknown,
    })
}

pub fn run(args: &SimilarArgs) -> anyhow::Result<()> {
    let report = search(args)?;
    for q in &report.results {
        match &q.matched {
            None => eprintln!("unknown word: {}", q.word),
            Some(m) if *m != q.word => {
                eprintln!("{}: not in the vocabulary; using {m}", q.word);
            }
            Some(_) => {}
        }
        if let (Some(min), Some(_), true) = (report.min_cosine, &q.matched, q.neighbours.is_empty())
        {
            if report.k > 0 {
                eprintln!(
                    "{}: no neighbour has cosine >= {min} (--min-cosine); lower it, or leave it out for the {} nearest",
                    q.word, report.k
                );
            }
        }
    }
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut w, &report).context("JSON output")?;
        writeln!(w)?;
    } else {
        writeln!(w, "word\trank\tneighbour\tcosine")?;
        for q in &report.results {
            for n in &q.neighbours {
                writeln!(w, "{}\t{}\t{}\t{:.6}", q.word, n.rank, n.word, n.cosine)?;
            }
        }
    }
    w.flush().context("cannot write the output")?;
    Ok(())
}
