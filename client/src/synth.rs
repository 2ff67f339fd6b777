//! `colonnade synth`: a large-vocabulary corpus shaped like our users' data
//! (search queries, sessions, graph nodes), for tests and benchmarks at
//! sizes no public corpus has: a Zipf head of frequent words, a long tail
//! where most types are rare, and planted structure whose recovery can be
//! measured (`colonnade eval --groups`), not only the speed.
//!
//! The tail is cut into groups of `--group-size` tokens that co-occur: every
//! group is written once as a "seed" sentence holding all its members (so
//! every type occurs and `--min-count 1` keeps exactly `--words` words);
//! then each further sentence picks one group by Zipf popularity and mixes
//! its members with head words (`--head-share` of the tokens). Popular
//! groups are seen often and should be learnt (their members each other's
//! nearest neighbours); the Zipf tail of groups is seen once or twice, as
//! rare queries are. Sentence i is drawn from its own ChaCha stream
//! (`--seed`, i), so the file is the same whatever `--threads`.

use anyhow::{bail, Context};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A count with optional decimal suffix: `20M`, `2.5K`, `1000000`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_decimal()
        .parse_size(s)
        .map_err(|e| format!("{e} (e.g. 20M, 500K, 1000000)"))
}

#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    /// Text corpus to write (one sentence per line).
    #[arg(long, env = "COLONNADE_OUTPUT")]
    pub output: PathBuf,
    /// Distinct words (types), head and tail together: `--min-count 1` keeps
    /// exactly these (e.g. 5M).
    #[arg(long, env = "COLONNADE_WORDS", value_parser = parse_count)]
    pub words: u64,
    /// Tokens in all (at least --words: each type occurs once in its seed
    /// sentence; the rest are drawn).
    #[arg(long, env = "COLONNADE_TOKENS", value_parser = parse_count)]
    pub tokens: u64,
    /// Frequent head words, named `h<rank>`, drawn by Zipf.
    #[arg(long, env = "COLONNADE_HEAD", value_parser = parse_count, default_value = "10000")]
    pub head: u64,
    /// Share of the drawn tokens taken from the head; the others are members
    /// of the sentence's group.
    #[arg(long, env = "COLONNADE_HEAD_SHARE", default_value_t = 0.5)]
    pub head_share: f64,
    /// Tail words per planted group, named `t<group>_<member>` (group 0 is
    /// the most popular).
    #[arg(long, env = "COLONNADE_GROUP_SIZE", default_value_t = 8)]
    pub group_size: u64,
    /// Zipf exponent of the head words' and the groups' popularity.
    #[arg(long, env = "COLONNADE_ZIPF", default_value_t = 1.0)]
    pub zipf: f64,
    /// Tokens per drawn sentence.
    #[arg(long, env = "COLONNADE_SENTENCE_LENGTH", default_value_t = 20)]
    pub sentence_length: u64,
    #[arg(long, env = "COLONNADE_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Also write the planted groups, one line each in popularity order:
    /// `members...` separated by spaces (for `eval --groups`).
    #[arg(long, env = "COLONNADE_GROUPS")]
    pub groups: Option<PathBuf>,
    /// Generating threads (the file is the same for any number). Default:
    /// the available cores.
    #[arg(long, env = "COLONNADE_THREADS")]
    pub threads: Option<usize>,
}

struct Shape {
    head: u64,
    tail: u64,
    group_size: u64,
    groups: u64,
    head_share: f64,
    length: u64,
    head_zipf: Zipf<f64>,
    group_zipf: Zipf<f64>,
}

impl Shape {
    /// Members of group `g` (the last may be short).
    fn members(&self, g: u64) -> u64 {
        (self.tail - g * self.group_size).min(self.group_size)
    }
}

fn head_word(out: &mut Vec<u8>, rank: u64) {
    let _ = write!(out, "h{rank}");
}

fn tail_word(out: &mut Vec<u8>, group: u64, member: u64) {
    let _ = write!(out, "t{group}_{member}");
}

/// Group `g`'s members on one line (its seed sentence, and its line of
/// the groups file).
fn group_line(shape: &Shape, g: u64, out: &mut Vec<u8>) {
    for m in 0..shape.members(g) {
        if m > 0 {
            out.push(b' ');
        }
        tail_word(out, g, m);
    }
    out.push(b'\n');
}

/// Drawn sentence `i`, `len` tokens, appended to `out` with its newline.
fn drawn_sentence(shape: &Shape, seed: u64, i: u64, len: u64, out: &mut Vec<u8>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(i);
    let group = (shape.group_zipf.sample(&mut rng) as u64 - 1).min(shape.groups - 1);
    let members = shape.members(group);
    for t in 0..len {
        if t > 0 {
            out.push(b' ');
        }
        if shape.head > 0 && (members == 0 || rng.random::<f64>() < shape.head_share) {
            let rank = (shape.head_zipf.sample(&mut rng) as u64 - 1).min(shape.head - 1);
            head_word(out, rank);
        } else {
            tail_word(out, group, rng.random_range(0..members));
        }
    }
    out.push(b'\n');
}

pub fn run(args: &SynthArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    if args.words < 2 || args.head > args.words {
        bail!(
            "--words must be at least 2 and at least --head ({})",
            args.head
        );
    }
    if args.tokens < args.words {
        bail!(
            "--tokens {} < --words {}: every word occurs at least once",
            args.tokens,
            args.words
        );
    }
    if args.group_size == 0 || args.sentence_length == 0 {
        bail!("--group-size and --sentence-length must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.head_share) {
        bail!("--head-share must lie in [0, 1]");
    }
    let tail = args.words - args.head;
    let groups = tail.div_ceil(args.group_size);
    if tail == 0 && args.head_share < 1.0 {
        bail!("--head equals --words: no tail groups; give --head-share 1 or a smaller --head");
    }
    let zipf = |n: u64| {
        Zipf::new(n.max(1) as f64, args.zipf)
            .map_err(|e| anyhow::anyhow!("--zipf {}: {e}", args.zipf))
    };
    let shape = Shape {
        head: args.head,
        tail,
        group_size: args.group_size,
        groups: groups.max(1),
        head_share: if tail == 0 { 1.0 } else { args.head_share },
        length: args.sentence_length,
        head_zipf: zipf(args.head)?,
        group_zipf: zipf(groups)?,
    };
    let file = fs_err::File::create(&args.output)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 22, file);

    // Seed sentences: the head in sentences of --sentence-length, then one
    // per group.
    let mut buf = Vec::with_capacity(1 << 16);
    let mut written = 0u64;
    let mut r = 0;
    while r < shape.head {
        let end = (r + shape.length).min(shape.head);
        for k in r..end {
            if k > r {
                buf.push(b' ');
            }
            head_word(&mut buf, k);
        }
        buf.push(b'\n');
        written += end - r;
        r = end;
        if buf.len() >= 1 << 16 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    if let Some(path) = &args.groups {
        let mut g_out = std::io::BufWriter::new(fs_err::File::create(path)?);
        let mut line = Vec::new();
        for g in 0..groups {
            line.clear();
            group_line(&shape, g, &mut line);
            g_out.write_all(&line)?;
        }
        g_out
            .flush()
            .with_context(|| format!("writing {}", path.display()))?;
    }
    for g in 0..groups {
        group_line(&shape, g, &mut buf);
        written += shape.members(g);
        if buf.len() >= 1 << 16 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)?;

    // Drawn sentences, in chunks generated in parallel and written in order.
    let drawn_tokens = args.tokens - written;
    let sentences = drawn_tokens.div_ceil(shape.length);
    let chunk = 4096u64;
    let chunks = sentences.div_ceil(chunk);
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
        .max(1);
    let next = AtomicU64::new(0);
    let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>)>(threads * 2);
    let seed = args.seed;
    std::thread::scope(|scope| -> anyhow::Result<()> {
        for _ in 0..threads {
            let (tx, next, shape) = (tx.clone(), &next, &shape);
            scope.spawn(move || loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= chunks {
                    return;
                }
                let mut text = Vec::with_capacity((chunk * shape.length * 10) as usize);
                for i in c * chunk..((c + 1) * chunk).min(sentences) {
                    let len = if i + 1 == sentences {
                        drawn_tokens - i * shape.length
                    } else {
                        shape.length
                    };
                    drawn_sentence(shape, seed, i, len, &mut text);
                }
                if tx.send((c, text)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut pending = BTreeMap::new();
        let mut want = 0u64;
        let mut last_log = Instant::now();
        while let Ok((c, text)) = rx.recv() {
            pending.insert(c, text);
            while let Some(text) = pending.remove(&want) {
                out.write_all(&text)
                    .with_context(|| format!("writing {}", args.output.display()))?;
                want += 1;
            }
            if last_log.elapsed().as_secs() >= 10 {
                last_log = Instant::now();
                tracing::info!(sentences_done = want * chunk, sentences, "synthesising");
            }
        }
        Ok(())
    })?;
    out.flush()
        .with_context(|| format!("writing {}", args.output.display()))?;
    tracing::info!(
        words = args.words,
        head = shape.head,
        groups,
        tokens = args.tokens,
        seed_tokens = written,
        drawn_sentences = sentences,
        seconds = format!("{:.1}", start.elapsed().as_secs_f64()),
        file = %args.output.display(),
        "corpus written"
    );
    Ok(())
}
