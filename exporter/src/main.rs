use anyhow::Context;
use clap::Parser;

/// Export a Colonnade model from running PS shards to HDF5 and word2vec formats.
#[derive(Parser, Debug)]
#[command(name = "colonnade-export", version)]
struct Cli {
    #[command(flatten)]
    args: colonnade_exporter::cli::ExportArgs,
    #[command(flatten)]
    log: colonnade_setup::log::LogArgs,
    #[command(flatten)]
    auth: colonnade_setup::AuthArgs,
    #[command(flatten)]
    tls: colonnade_setup::ClientTlsArgs,
}

fn main() -> std::process::ExitCode {
    colonnade_setup::env::unset_empty_env();
    let cli = Cli::parse();
    colonnade_setup::log::init(cli.log.log_format);
    let result = colonnade_setup::Connector::from_args(&cli.auth, &cli.tls)
        .map_err(anyhow::Error::msg)
        .and_then(|connector| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")
                .and_then(|rt| rt.block_on(colonnade_exporter::cli::run(cli.args, &connector)))
        });
    colonnade_setup::env::exit_code(result)
}
