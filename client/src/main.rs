use anyhow::Context;

fn main() -> std::process::ExitCode {
    colonnade_setup::env::unset_empty_env();
    let cli = match colonnade_client::cli::parse() {
        Ok(cli) => cli,
        Err(status) => return status,
    };
    colonnade_setup::log::init(cli.log.log_format);
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|runtime| runtime.block_on(colonnade_client::cli::run(cli)));
    // An interrupted run that wrote what it trained says so and exits as
    // an interrupted process does.
    if let Err(e) = &result {
        if let Some(i) = e.downcast_ref::<colonnade_client::interrupt::Interrupted>() {
            eprintln!("{i}");
            return std::process::ExitCode::from(colonnade_client::interrupt::EXIT_INTERRUPTED);
        }
    }
    colonnade_setup::env::exit_code(result)
}
