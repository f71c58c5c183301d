//! A program under test that serves on a loopback port (an example service, a web app in its
//! framework), stopped on drop, with what it wrote to stderr shown when the test failed.

use std::io::Read;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, wait_until};

pub struct Listening {
    process: Child,
    /// The port it serves on.
    pub port: u16,
    what: &'static str,
}

impl Listening {
    /// Runs the command `command` makes for a free port, and waits (bounded) until it listens
    /// there. A program that exits first (its port taken meanwhile by another test) is tried
    /// again on another port.
    pub fn start(what: &'static str, command: impl Fn(u16) -> Command) -> Listening {
        let mut log = String::new();
        for _ in 0..3 {
            let port = free_port();
            let mut process = command(port)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|error| panic!("{what} could not run: {error}"));
            let up = wait_until(Duration::from_secs(30), || {
                process.try_wait().ok().flatten().is_some()
                    || TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            if up && process.try_wait().ok().flatten().is_none() {
                return Listening {
                    process,
                    port,
                    what,
                };
            }
            let _ = process.kill();
            if let Some(stderr) = process.stderr.as_mut() {
                let _ = stderr.read_to_string(&mut log);
            }
            let _ = process.wait();
        }
        panic!("{what} did not start:\n{log}");
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.process.kill();
        if std::thread::panicking() {
            let mut log = String::new();
            if let Some(stderr) = self.process.stderr.as_mut() {
                let _ = stderr.read_to_string(&mut log);
            }
            eprintln!("--- log of {} ---\n{log}", self.what);
        }
        let _ = self.process.wait();
    }
}
