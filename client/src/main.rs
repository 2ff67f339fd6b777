use anyhow::Context;
use clap::Parser;
use colonnade_client::cli::Cli;
use colonnade_setup::Connector;

fn main() -> std::process::ExitCode {
    colonnade_setup::env::unset_empty_env();
    let cli = Cli::parse();
    colonnade_setup::log::init(cli.log.log_format);
    let result = Connector::from_args(&cli.auth, &cli.tls)
        .map_err(anyhow::Error::msg)
        .and_then(|connector| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?
                .block_on(colonnade_client::cli::run(cli, connector))
        });
    colonnade_setup::env::exit_code(result)
}
