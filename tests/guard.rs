//! No panic crosses into Redis: a panic inside a command (injected with the test-only
//! `RL.DEBUG.PANIC`, which exists only when the module is loaded with `debug-commands`)
//! becomes an error reply, is written to the server log, and Redis carries on.

mod support;

use support::{error, ints, query, Server};

#[test]
fn a_panic_becomes_an_error_reply_and_redis_keeps_running() {
    let server = Server::builder().module_arg("debug-commands").start();
    let mut con = server.connect();
    for _ in 0..3 {
        assert_eq!(
            error(&mut con, &["RL.DEBUG.PANIC", "some-key"]),
            "ERR internal error in the ratelimit module (see the server log)"
        );
    }
    let pong: String = query(&mut con, &["PING"]);
    assert_eq!(pong, "PONG");
    assert_eq!(
        ints(&mut con, &["CL.THROTTLE", "some-key", "1", "1", "1"]),
        [0, 2, 1, -1, 1]
    );
    assert!(
        server.log().contains("ratelimit module panic")
            && server.log().contains("RL.DEBUG.PANIC was called"),
        "{}",
        server.log()
    );
}

#[test]
fn the_fault_injection_command_exists_only_on_request() {
    let server = Server::start();
    let mut con = server.connect();
    let reply = error(&mut con, &["RL.DEBUG.PANIC", "k"]);
    assert!(reply.starts_with("ERR unknown command"), "{reply}");
}
