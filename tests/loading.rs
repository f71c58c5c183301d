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
    assert_eq!(support::module_version(&mut con, "ratelimit"), Some(100));
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

#[test]
fn an_unknown_module_argument_stops_the_load() {
    let log = Server::builder()
        .module_arg("no-such-option")
        .try_start()
        .err()
        .expect("the server started with an unknown module argument");
    assert!(log.contains("unknown module argument"), "{log}");
}
