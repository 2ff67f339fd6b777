//! The `colonnade` command line: its flags ([`Cli`], [`Command`]; those of
//! `train` in [`train`], of `vocab` in [`vocab`]) and the dispatch of each command to the
//! module that runs it ([`run`]). Flags follow word2vec's names; every flag
//! can also be set by a `COLONNADE_*` environment variable (compose and
//! Kubernetes set env most easily).

pub mod train;
pub mod vocab;

use clap::{Parser, Subcommand};
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
    #[command(flatten)]
    pub auth: colonnade_setup::AuthArgs,
    #[command(flatten)]
    pub tls: colonnade_setup::ClientTlsArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Count a corpus and write the vocabulary file.
    Vocab(vocab::VocabArgs),
    /// Train through PS shards (embedded or running) and export the vectors.
    Train(Box<train::TrainArgs>),
    /// Export a trained model from running shards.
    Export(ExportArgs),
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
}

/// Runs `cli`'s command; `connector` reaches shards with the process's TLS
/// settings and token.
pub async fn run(cli: Cli, connector: Connector) -> anyhow::Result<()> {
    match cli.command {
        Command::Vocab(args) => tokio::task::block_in_place(|| crate::vocab::run_vocab(&args)),
        Command::Train(args) => crate::run::run_train(*args, &connector).await.map(|_| ()),
        Command::Export(args) => colonnade_exporter::cli::run(args, &connector).await,
        Command::Health(args) => crate::health::run(&args, &connector).await,
        Command::Eval(args) => tokio::task::block_in_place(|| colonnade_eval::evaluate::run(&args)),
        Command::Similar(args) => {
            tokio::task::block_in_place(|| colonnade_eval::similar::run(&args))
        }
        Command::Models(args) => crate::models::run(args, &connector).await,
        Command::Certs(args) => crate::certs::run(&args),
        Command::Synth(args) => tokio::task::block_in_place(|| crate::synth::run(&args)),
        Command::Encode(args) => tokio::task::block_in_place(|| crate::encode::run(&args)),
    }
}
