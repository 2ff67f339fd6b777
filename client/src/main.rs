use clap::Parser;
use colonnade_client::cli::{run_train, run_vocab, Cli, Command};

fn main() -> anyhow::Result<()> {
    colonnade_common::config::unset_empty_env();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Vocab(args) => tokio::task::block_in_place(|| run_vocab(&args)),
            Command::Train(args) => run_train(*args).await.map(|_| ()),
            Command::Export(args) => colonnade_exporter::cli::run(args).await,
            Command::Health(args) => colonnade_client::health::run(&args).await,
            Command::Eval(args) => {
                tokio::task::block_in_place(|| colonnade_client::eval::run(&args))
            }
            Command::Similar(args) => {
                tokio::task::block_in_place(|| colonnade_client::similar::run(&args))
            }
        }
    })
}
