use clap::Parser;

/// Export a Colonnade model from running PS shards to HDF5 and word2vec formats.
#[derive(Parser, Debug)]
#[command(name = "colonnade-export", version)]
struct Cli {
    #[command(flatten)]
    args: colonnade_exporter::cli::ExportArgs,
}

fn main() -> anyhow::Result<()> {
    colonnade_common::config::unset_empty_env();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    colonnade_exporter::cli::run(Cli::parse().args).await
}
