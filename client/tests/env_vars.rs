//! Every flag of every `colonnade` subcommand can be set by an environment
//! variable named `COLONNADE_` + the long flag in upper snake case (README,
//! docs/cli.md), except the few listed below, whose older names stay because
//! deployments set them. Positional arguments and hidden flags have none.

use clap::CommandFactory;
use colonnade_client::cli::Cli;

/// (subcommand path, long flag, env name, why it differs from the rule).
const EXCEPTIONS: &[(&str, &str, &str, &str)] = &[
    (
        "colonnade vocab",
        "output",
        "COLONNADE_VOCAB_OUTPUT",
        "COLONNADE_OUTPUT is train's HDF5 output; a shared env (compose, a ConfigMap) sets both",
    ),
    (
        "colonnade train",
        "output-vectors",
        "COLONNADE_EXPORT_OUTPUT_VECTORS",
        "the deploy files set this name (deploy/compose, docs/deploy.md)",
    ),
    (
        "colonnade export",
        "output-vectors",
        "COLONNADE_EXPORT_OUTPUT_VECTORS",
        "the deploy files set this name (deploy/compose, docs/deploy.md)",
    ),
    (
        "colonnade health",
        "timeout-secs",
        "COLONNADE_HEALTH_TIMEOUT_SECS",
        "the Kubernetes ConfigMap sets this name; a bare COLONNADE_TIMEOUT_SECS would say nothing of health",
    ),
    (
        "colonnade cluster up",
        "shards",
        "COLONNADE_CLUSTER_SHARDS",
        "COLONNADE_SHARDS is the endpoint list train, export and models read; here it is a count",
    ),
    (
        "colonnade eval",
        "restrict",
        "COLONNADE_EVAL_RESTRICT",
        "a bare COLONNADE_RESTRICT would say nothing of which restriction",
    ),
    (
        "colonnade eval",
        "similarity-restrict",
        "COLONNADE_EVAL_SIMILARITY_RESTRICT",
        "named like COLONNADE_EVAL_RESTRICT, its sibling",
    ),
];

fn expected_env(path: &str, long: &str) -> String {
    EXCEPTIONS
        .iter()
        .find(|(p, l, _, _)| *p == path && *l == long)
        .map_or_else(
            || format!("COLONNADE_{}", long.to_uppercase().replace('-', "_")),
            |(_, _, env, _)| (*env).to_owned(),
        )
}

/// Checks every argument of `cmd` and its subcommands; returns the problems
/// and counts the flags checked.
fn check(cmd: &clap::Command, path: &str, problems: &mut Vec<String>, checked: &mut usize) {
    for arg in cmd.get_arguments() {
        // Hidden flags are not settings but traps for other tools' spellings
        // (train's --workers points to --threads and --num-workers).
        if arg.is_positional()
            || arg.is_hide_set()
            || matches!(
                arg.get_action(),
                clap::ArgAction::Help
                    | clap::ArgAction::HelpShort
                    | clap::ArgAction::HelpLong
                    | clap::ArgAction::Version
            )
        {
            continue;
        }
        let Some(long) = arg.get_long() else {
            problems.push(format!(
                "{path}: argument {} has no long flag",
                arg.get_id()
            ));
            continue;
        };
        *checked += 1;
        let want = expected_env(path, long);
        match arg.get_env().and_then(|e| e.to_str()) {
            None => problems.push(format!("{path} --{long}: no env var (want {want})")),
            Some(env) if env != want => {
                problems.push(format!("{path} --{long}: env {env}, want {want}"));
            }
            Some(_) => {}
        }
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        check(
            sub,
            &format!("{path} {}", sub.get_name()),
            problems,
            checked,
        );
    }
}

#[test]
fn every_flag_has_its_colonnade_env_var() {
    let cmd = Cli::command();
    let mut problems = Vec::new();
    let mut checked = 0;
    check(&cmd, "colonnade", &mut problems, &mut checked);
    assert!(
        problems.is_empty(),
        "flags without the expected environment variable:\n{}",
        problems.join("\n")
    );
    // The walk reached the subcommands (vocab, train, export, ...), not just the top.
    assert!(checked > 40, "only {checked} flags checked");
}

#[test]
fn exceptions_name_real_flags() {
    // A stale exception (the flag renamed or gone) must not linger.
    let cmd = Cli::command();
    for (path, long, env, _) in EXCEPTIONS {
        let mut c = &cmd;
        for name in path.split(' ').skip(1) {
            c = c
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no subcommand {path}"));
        }
        let arg = c
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap_or_else(|| panic!("{path} has no --{long}"));
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some(*env),
            "{path} --{long}"
        );
    }
}

/// README.md shows every subcommand in use and names every env-var exception,
/// so a user reading it meets all of them.
#[test]
fn readme_mentions_every_subcommand_and_exception() {
    let readme = fs_err::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md at the workspace root");
    let cli = Cli::command();
    let missing: Vec<String> = cli
        .get_subcommands()
        .map(|s| format!("colonnade {}", s.get_name()))
        .filter(|needle| !readme.contains(needle.as_str()))
        .collect();
    assert!(missing.is_empty(), "README.md never shows: {missing:?}");
    let unnamed: Vec<&str> = EXCEPTIONS
        .iter()
        .map(|&(_, _, env, _)| env)
        .filter(|env| !readme.contains(env))
        .collect();
    assert!(unnamed.is_empty(), "README.md does not name: {unnamed:?}");
}
