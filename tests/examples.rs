//! The programs under `examples/`, run against a real server: the Python (redis-py),
//! Node.js (ioredis) and Rust (`redis` crate) clients print the same typed results, and the
//! HTTP service answers real HTTP requests with 429, `Retry-After` and the RateLimit
//! headers, per client IP.
//!
//! `make test` installs what they need (a virtualenv with redis-py, ioredis with npm).

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::mem::size_of;
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use support::{free_port, query, repository, wait_until, Server};

/// What each client example prints: the same in every language.
const CLIENT_OUTPUT: &str = "\
CL.THROTTLE: bursts of 2, then 1 per minute
  allowed: 1 of 2 left, full again in 60 s
  allowed: 0 of 2 left, full again in 120 s
  limited: retry in 60 s
RL.LOG: exactly 2 per minute
  allowed: 1 of 2 left, full again in 60 s
  allowed: 0 of 2 left, full again in 60 s
  limited: retry in 60 s
RL.WINDOW: 2 per minute, sliding
  allowed: 1 of 2 left
  allowed: 0 of 2 left
  limited
";

/// The Python with redis-py: `$EXAMPLES_PYTHON`, or the virtualenv `make test` makes.
fn python() -> PathBuf {
    let python = std::env::var_os("EXAMPLES_PYTHON").map_or_else(
        || repository().join("target/examples-venv/bin/python"),
        PathBuf::from,
    );
    assert!(
        python.exists(),
        "no Python with redis-py at {}: run `make test`, which installs it",
        python.display()
    );
    python
}

/// `node`, once ioredis is installed beside the example.
fn node() -> Command {
    let modules = repository().join("examples/node/node_modules/ioredis");
    assert!(
        modules.is_dir(),
        "ioredis is not installed in examples/node: run `make test`, which installs it"
    );
    Command::new("node")
}

/// Runs an example against `server` and returns what it printed, failing with its output
/// if it fails.
fn run_example(server: &Server, mut command: Command) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .env("REDIS_URL", format!("redis://127.0.0.1:{}", server.port()))
        .current_dir(repository())
        .output()
        .unwrap_or_else(|error| panic!("{command:?} could not run: {error}"));
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "{command:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

#[test]
fn the_python_client_example_reads_typed_results() {
    let server = Server::start();
    let mut command = Command::new(python());
    command.arg("examples/python/rate_limit.py");
    assert_eq!(run_example(&server, command), CLIENT_OUTPUT);
}

#[test]
fn the_node_client_example_reads_typed_results() {
    let server = Server::start();
    let mut command = node();
    command.arg("examples/node/rate-limit.js");
    assert_eq!(run_example(&server, command), CLIENT_OUTPUT);
}

#[test]
fn the_rust_client_example_reads_typed_results() {
    let server = Server::start();
    // `cargo test` builds the examples beside the test binaries.
    let program = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/rate_limit");
    assert!(program.is_file(), "{} is not built", program.display());
    assert_eq!(run_example(&server, Command::new(program)), CLIENT_OUTPUT);
}

/// The HTTP service, stopped on drop (with its log shown if the test failed).
struct Service {
    process: Child,
    port: u16,
}

impl Service {
    fn start(redis_port: u16) -> Service {
        let port = free_port();
        let process = Command::new(python())
            .arg("examples/http/server.py")
            .args(["--port", &port.to_string()])
            .args(["--redis-url", &format!("redis://127.0.0.1:{redis_port}")])
            .args(["--burst", "1", "--count", "1", "--period", "60"])
            .current_dir(repository())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the HTTP service could not run");
        let service = Service { process, port };
        let listening = wait_until(Duration::from_secs(20), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(listening, "the HTTP service did not start");
        service
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.process.kill();
        if std::thread::panicking() {
            let mut log = String::new();
            if let Some(stderr) = self.process.stderr.as_mut() {
                let _ = stderr.read_to_string(&mut log);
            }
            eprintln!("--- log of the HTTP service ---\n{log}");
        }
        let _ = self.process.wait();
    }
}

/// A TCP connection to 127.0.0.1:`port` from the loopback address `source`, so that the
/// service sees another client IP.
fn connect_from(source: Ipv4Addr, port: u16) -> TcpStream {
    let address = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let length = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, bound and connected with valid addresses, then owned by the
    // TcpStream.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(socket >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(socket);
        let local = address(source, 0);
        let bound = libc::bind(socket, (&raw const local).cast(), length);
        assert_eq!(bound, 0, "bind: {}", std::io::Error::last_os_error());
        let remote = address(Ipv4Addr::LOCALHOST, port);
        let connected = libc::connect(socket, (&raw const remote).cast(), length);
        assert_eq!(connected, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}

/// A response's status and headers (names lowercased).
struct Response {
    status: u16,
    headers: HashMap<String, String>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// `GET /` from the client IP `source`.
fn get(service: &Service, source: Ipv4Addr) -> Response {
    let mut stream = connect_from(source, service.port);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, _body) = response.split_once("\r\n\r\n").expect("a whole response");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    Response {
        status: status.parse().unwrap(),
        headers: lines
            .filter_map(|line| line.split_once(": "))
            .map(|(name, value)| (name.to_lowercase(), value.to_owned()))
            .collect(),
    }
}

#[test]
fn the_http_service_answers_429_with_retry_after_and_ratelimit_headers_per_ip() {
    let server = Server::start();
    let service = Service::start(server.port());
    let client = Ipv4Addr::new(127, 0, 0, 1);

    // Bursts of 2, then 1 a minute.
    let responses: Vec<Response> = (0..3).map(|_| get(&service, client)).collect();
    let summary: Vec<_> = responses
        .iter()
        .map(|response| {
            (
                response.status,
                response.header("ratelimit-limit"),
                response.header("ratelimit-remaining"),
                response.header("ratelimit-reset"),
                response.header("retry-after"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (200, Some("2"), Some("1"), Some("60"), None),
            (200, Some("2"), Some("0"), Some("120"), None),
            (429, Some("2"), Some("0"), Some("120"), Some("60")),
        ]
    );

    // Another client IP has its own limit.
    let other = get(&service, Ipv4Addr::new(127, 0, 0, 2));
    assert_eq!(other.status, 200);
    assert_eq!(other.header("ratelimit-remaining"), Some("1"));
    let mut con = server.connect();
    let mut keys: Vec<String> = query(&mut con, &["KEYS", "*"]);
    keys.sort();
    assert_eq!(keys, ["ratelimit:ip:127.0.0.1", "ratelimit:ip:127.0.0.2"]);
    let ttl: i64 = query(&mut con, &["PTTL", "ratelimit:ip:127.0.0.1"]);
    assert!((118_000..=120_000).contains(&ttl), "{ttl}");

    // Without Redis, the service lets requests through, without RateLimit headers.
    drop(server);
    let unlimited = get(&service, client);
    assert_eq!(unlimited.status, 200);
    assert_eq!(unlimited.header("ratelimit-limit"), None);
}
