use anyhow::Context;
use clap::Parser;
use colonnade_client::cli::{run_train, run_vocab, Cli, Command};

fn main() -> std::process::ExitCode {
    colonnade_common::config::unset_empty_env();
    let cli = Cli::parse();
    colonnade_common::config::init_logging(cli.log.log_format);
    let result = colonnade_proto::use_auth(&cli.auth)
        .and_then(|()| colonnade_proto::use_tls(&cli.tls))
        .map_err(anyhow::Error::msg);
    colonnade_common::config::exit_code(result.and_then(|()| run(cli)))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Vocab(args) => tokio::task::block_in_place(|| run_vocab(&args)),
            Command::Train(args) => run_train(*args).await.map(|_| ()),
            Command::Export(args) => colonnade_exporter::cli::run(args).await,
            Command::Health(args) => colonnade_client::health::run(&args).await,
            Command::Eval(args) => {
                tokio::task::block_in_place(|| colonnade_eval::evaluate::run(&args))
            }
            Command::Similar(args) => {
                tokio::task::block_in_place(|| colonnade_eval::similar::run(&args))
            }
            Command::Models(args) => colonnade_client::models::run(args).await,
            Command::Certs(args) => colonnade_client::certs::run(&args),
            Command::Synth(args) => {
                tokio::task::block_in_place(|| colonnade_client::synth::run(&args))
            }
            Command::Encode(args) => {
                tokio::task::block_in_place(|| colonnade_client::encode::run(&args))
            }
        }
    })
}
