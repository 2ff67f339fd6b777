//! The `colonnade` command line: its flags ([`Cli`], [`Command`]; those of
//! `train` in [`train`], of `vocab` in [`vocab`]) and the dispatch of each command to the
//! module that runs it ([`run`]). Flags follow word2vec's names; every flag
//! can also be set by a `COLONNADE_*` environment variable (compose and
//! Kubernetes set env most easily).

pub mod train;
pub mod vocab;

use clap::{Args, Parser, Subcommand};
use colonnade_exporter::cli::ExportArgs;
use colonnade_setup::Connector;

#[derive(Parser, Debug)]
#[command(
    name = "colonnade",
    version,
    about = "Train word2vec embeddings through column-partitioned parameter-server shards"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub log: colonnade_setup::log::LogArgs,
}

/// How a command reaches shards: TLS and the cluster's bearer token. Only
/// the commands that talk to shards take them.
#[derive(Args, Debug, Default)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub auth: colonnade_setup::AuthArgs,
    #[command(flatten)]
    pub tls: colonnade_setup::ClientTlsArgs,
}

impl ConnectArgs {
    /// The connector these flags describe (files read, checked).
    pub fn connector(&self) -> anyhow::Result<Connector> {
        Connector::from_args(&self.auth, &self.tls).map_err(anyhow::Error::msg)
    }
}

/// `colonnade export`: the exporter's flags, and how to reach the shards.
#[derive(Args, Debug)]
pub struct ExportCommand {
    #[command(flatten)]
    pub export: ExportArgs,
    #[command(flatten, next_help_heading = "Connecting to shards")]
    pub connect: ConnectArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Count a corpus and write the vocabulary file.
    Vocab(vocab::VocabArgs),
    /// Train through PS shards (embedded or running) and export the vectors.
    Train(Box<train::TrainArgs>),
    /// Export a trained model from running shards.
    Export(ExportCommand),
    /// Probe shards with grpc.health.v1 (exit 0 when all are SERVING).
    Health(crate::health::HealthArgs),
    /// Evaluate vectors: analogies (3CosAdd, 3CosMul), word-pair similarity, node classification.
    Eval(colonnade_eval::evaluate::EvalArgs),
    /// Nearest neighbours of words by cosine over the whole vocabulary.
    Similar(colonnade_eval::similar::SimilarArgs),
    /// List the models running shards hold, or drop one.
    Models(crate::models::ModelsArgs),
    /// Make a cluster's secrets: a private CA, the shards' and clients'
    /// certificates, and the bearer token (files, and a Kubernetes Secret).
    Certs(crate::certs::CertsArgs),
    /// Turn a text corpus into word ids of a vocabulary, in parts, once:
    /// workers then read their own parts and hold no word map.
    Encode(crate::encode::EncodeArgs),
    /// Write a synthetic large-vocabulary corpus: a Zipf head, a long rare
    /// tail, and planted groups of co-occurring words (`eval --groups`).
    Synth(crate::synth::SynthArgs),
    /// Start, stop or inspect a cluster of ps-shard processes on this machine.
    Cluster(crate::local::ClusterArgs),
}

/// Parses this process's arguments, as [`Cli::parse`] does, with hints for
/// other trainers' spellings: word2vec's single-dash flags (`-cbow 1`),
/// gensim's and fastText's names, and no suggestion of an unrelated flag.
/// An error (or --help and --version) is printed here and returned as the
/// exit status.
pub fn parse() -> Result<Cli, std::process::ExitCode> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(hint) = crate::flags::word2vec_spelling(&args) {
        eprintln!("error: {hint}\n\nFor more information, try '--help'.");
        return Err(std::process::ExitCode::from(2));
    }
    let e = match Cli::try_parse_from(&args) {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    let status = std::process::ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        // Help and version go to stdout, errors to stderr, as clap's exit().
        let _ = e.print();
        return Err(status);
    }
    use clap::error::{ContextKind, ContextValue};
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    let given = text(ContextKind::InvalidArg).unwrap_or_default();
    let hint = crate::flags::unknown_flag_hint(&given, text(ContextKind::SuggestedArg).as_deref());
    // clap's own text without its suggestion, then ours.
    let rendered = e.render().to_string();
    let mut lines: Vec<String> = rendered
        .lines()
        .filter(|l| !l.trim_start().starts_with("tip: a similar argument exists"))
        .map(
            |l| match l.find(" --").filter(|_| l.starts_with("Usage:")) {
                // clap's usage line names the flag it suggested: the command's own.
                Some(at) => format!("{} [OPTIONS]", &l[..at]),
                None => l.to_string(),
            },
        )
        .collect();
    if let Some(h) = hint {
        lines.insert(1.min(lines.len()), String::new());
        lines.insert(2.min(lines.len()), format!("  tip: {h}"));
    }
    let mut out = lines.join("\n");
    while out.contains("\n\n\n") {
        out = out.replace("\n\n\n", "\n\n");
    }
    eprintln!("{out}");
    Err(status)
}

/// Runs `cli`'s command; those that reach shards do so with their own
/// TLS settings and token ([`ConnectArgs`]).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Vocab(args) => tokio::task::block_in_place(|| crate::vocab::run_vocab(&args)),
        Command::Train(args) => {
            let connector = args.connect.connector()?;
            crate::run::run_train(*args, &connector).await.map(|_| ())
        }
        Command::Export(args) => {
            let connector = args.connect.connector()?;
            colonnade_exporter::cli::run(args.export, &connector).await
        }
        Command::Health(args) => crate::health::run(&args, &args.connect.connector()?).await,
        Command::Eval(args) => tokio::task::block_in_place(|| colonnade_eval::evaluate::run(&args)),
        Command::Similar(args) => {
            tokio::task::block_in_place(|| colonnade_eval::similar::run(&args))
        }
        Command::Models(args) => crate::models::run(args).await,
        Command::Certs(args) => crate::certs::run(&args),
        Command::Synth(args) => tokio::task::block_in_place(|| crate::synth::run(&args)),
        Command::Encode(args) => tokio::task::block_in_place(|| crate::encode::run(&args)),
        Command::Cluster(args) => crate::local::run(args).await,
    }
}
