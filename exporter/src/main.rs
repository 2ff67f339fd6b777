use anyhow::Context;
use clap::Parser;

/// Export a Colonnade model from running PS shards to HDF5 and word2vec formats.
#[derive(Parser, Debug)]
#[command(name = "colonnade-export", version)]
struct Cli {
    #[command(flatten)]
    args: colonnade_exporter::cli::ExportArgs,
    #[command(flatten)]
    log: colonnade_common::config::LogArgs,
    #[command(flatten)]
    auth: colonnade_common::config::AuthArgs,
    #[command(flatten)]
    tls: colonnade_common::config::ClientTlsArgs,
}

fn main() -> std::process::ExitCode {
    colonnade_common::config::unset_empty_env();
    let cli = Cli::parse();
    colonnade_common::config::init_logging(cli.log.log_format);
    let result = colonnade_proto::use_auth(&cli.auth)
        .and_then(|()| colonnade_proto::use_tls(&cli.tls))
        .map_err(anyhow::Error::msg)
        .and_then(|()| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")
        })
        .and_then(|rt| rt.block_on(colonnade_exporter::cli::run(cli.args)));
    colonnade_common::config::exit_code(result)
}
