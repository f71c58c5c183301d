//! The three ways Redis loads the module: `loadmodule` in a config file (the repository's
//! redis.conf, as `make run` uses it), `--loadmodule` on the command line (every other
//! test), and `MODULE LOAD` at runtime.

mod support;

use support::{ints, query, repository, Server};

#[test]
fn module_load_at_runtime_registers_the_commands() {
    let server = Server::builder().without_module().start();
    let mut con = server.connect();
    let path = support::module_path();
    let _: () = query(&mut con, &["MODULE", "LOAD", path.to_str().unwrap()]);
    assert_eq!(
        support::module_version(&mut con, "ratelimit"),
        Some(crate_version())
    );
    assert_eq!(
        ints(&mut con, &["CL.THROTTLE", "k", "15", "30", "60"]),
        [0, 16, 15, -1, 2]
    );
}

#[test]
fn the_repositorys_redis_conf_loads_the_module() {
    let root = repository();
    let server = Server::builder()
        .config_file(&root.join("redis.conf"), &root)
        .start();
    let mut con = server.connect();
    assert_eq!(
        ints(&mut con, &["CL.THROTTLE", "k", "5", "5", "3600"]),
        [0, 6, 5, -1, 720]
    );
    assert!(server.log().contains("Module 'ratelimit' loaded"));
}

/// The module's own lines in a server log: `<ratelimit> ...` at any level, and the line of
/// a failed load, which Redis writes under `<module>` since the name is not yet known.
fn module_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains("<ratelimit>") || line.contains("<module>"))
        .collect()
}

#[test]
fn an_unknown_module_argument_stops_the_load_naming_it() {
    // A `%` is data, not a format; a control byte is shown escaped.
    let log = Server::builder()
        .module_arg("no-such%s-option\x01")
        .try_start()
        .err()
        .expect("the server started with an unknown module argument");
    let lines = module_lines(&log);
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].ends_with(
            "# <ratelimit> unknown module argument 'no-such%s-option\\x01': the arguments are top-keys <n> and debug-commands"
        ),
        "{log}"
    );
    assert!(!log.contains("ratelimit: "), "a doubled prefix: {log}");
}

#[test]
fn a_second_load_is_refused_and_the_log_says_why() {
    let server = Server::start();
    let mut con = server.connect();
    let path = support::module_path();
    let refused = support::error(&mut con, &["MODULE", "LOAD", path.to_str().unwrap()]);
    assert!(refused.starts_with("ERR"), "{refused}");
    let log = server.log();
    assert!(
        log.contains("# <module> ratelimit is already loaded (see MODULE LIST): a module is loaded once per server"),
        "{log}"
    );
    // The first one is untouched.
    assert_eq!(
        support::module_version(&mut con, "ratelimit"),
        Some(crate_version())
    );
    assert_eq!(
        ints(&mut con, &["CL.THROTTLE", "k", "15", "30", "60"]),
        [0, 16, 15, -1, 2]
    );
}

#[test]
fn a_normal_load_logs_no_warning() {
    let server = Server::start();
    let _ = server.connect();
    let log = server.log();
    let warnings: Vec<&str> = module_lines(&log)
        .into_iter()
        .filter(|line| line.contains(" # "))
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(log.contains("Module 'ratelimit' loaded"), "{log}");
}

/// The crate's version as `MODULE LIST` shows it: major * 10000 + minor * 100 + patch.
fn crate_version() -> i64 {
    let part = |text: &str| text.parse::<i64>().unwrap();
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}
