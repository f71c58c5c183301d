//! The programs under `examples/`, run against a real server: the Python and Node.js demos
//! (users of the client packages under `clients/`, whose own tests are tests/clients.rs) and
//! the Rust one (`redis` crate) print the same typed results, the worker pool shares its
//! slots, and the HTTP service answers real HTTP requests with 429, `Retry-After` and the
//! IETF RateLimit fields, per client IP and per policy.
//!
//! `make test` installs what they need (a virtualenv with the package and redis-py, the
//! Node package and ioredis with npm).

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::mem::size_of;
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use support::listening::Listening;
use support::{query, repository, Server};

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
RL.ALL: 2 per minute and 3 per hour, together
  allowed: 1 of 2 left, full again in 3600 s
  allowed: 0 of 2 left, full again in 3600 s
  limited: retry in 60 s
RL.ACQUIRE: 1 worker at a time
  first: got a lease
  second: refused
  released: True
";

/// The Python with the package: `$EXAMPLES_PYTHON`, or the virtualenv `make test` makes.
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
fn the_python_demo_prints_typed_results() {
    let server = Server::start();
    let mut command = Command::new(python());
    command.arg("examples/python/demo.py");
    assert_eq!(run_example(&server, command), CLIENT_OUTPUT);
}

#[test]
fn the_worker_pool_never_runs_more_jobs_than_its_slots() {
    let server = Server::start();
    let mut command = Command::new(python());
    command.arg("examples/python/worker_pool.py");
    assert_eq!(
        run_example(&server, command),
        "5 jobs at once, 2 slots: 2 ran, 3 refused, at most 2 at a time\nslots free afterwards: 2\n"
    );
}

#[test]
fn the_node_demo_prints_typed_results() {
    let server = Server::start();
    let mut command = node();
    command.arg("examples/node/demo.js");
    assert_eq!(run_example(&server, command), CLIENT_OUTPUT);
}

#[test]
fn the_rust_client_example_reads_typed_results() {
    let server = Server::start();
    // The example is a package of its own over the crate under clients/rust: `make test`
    // builds it in target/rust-clients (`make rust-clients`).
    let program = repository().join("target/rust-clients/debug/rate_limit");
    assert!(
        program.is_file(),
        "{} is not built: run `make test` (or `make rust-clients`)",
        program.display()
    );
    assert_eq!(run_example(&server, Command::new(program)), CLIENT_OUTPUT);
}

/// Every Rust example of clients/rust/README.md is a whole program that builds when pasted: each
/// one, as it stands on the page, is the `main.rs` of a package whose dependencies are the
/// README's own `[dependencies]` lines (the crate's path made this checkout's), built offline
/// with the versions of the crate's lock file in the crate's target directory.
#[test]
fn the_rust_crates_readme_examples_build_when_pasted() {
    let crate_dir = repository().join("clients/rust");
    let readme = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
    let fenced = |tag: &str| -> Vec<String> {
        let mut blocks = Vec::new();
        let mut lines = readme.lines();
        while let Some(line) = lines.next() {
            if line.trim_end() == format!("```{tag}") {
                let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
                blocks.push(body.join("\n") + "\n");
            }
        }
        blocks
    };
    let dependencies = fenced("toml");
    assert_eq!(dependencies.len(), 1, "one [dependencies] block");
    let programs = fenced("rust,no_run");
    assert!(
        programs.len() >= 3,
        "the README's examples: {}",
        programs.len()
    );
    let package = repository().join("target/readme-pasted");
    let _ = std::fs::remove_dir_all(&package);
    std::fs::create_dir_all(package.join("src/bin")).unwrap();
    let path = format!("path = \"{}\"", crate_dir.display());
    let manifest = format!(
        "[package]\nname = \"pasted\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n{}",
        dependencies[0].replace("path = \"clients/rust\"", &path)
    );
    assert!(manifest.contains(&path), "the crate's path in {manifest}");
    std::fs::write(package.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(crate_dir.join("Cargo.lock"), package.join("Cargo.lock")).unwrap();
    for (number, program) in programs.iter().enumerate() {
        assert!(
            program.contains("fn main()"),
            "example {number} is a program:\n{program}"
        );
        std::fs::write(
            package.join(format!("src/bin/example_{number}.rs")),
            program,
        )
        .unwrap();
    }
    let built = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--offline", "--bins", "--quiet"])
        .env("CARGO_TARGET_DIR", repository().join("target/rust-clients"))
        .current_dir(&package)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "the pasted examples do not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// examples/rust's axum service, the crate's README setup with only the crate as a
/// dependency: each API key's bucket of 5, then 429 with `Retry-After` and the fields; a
/// request with no key is not limited; load shedding lets a healthy service's traffic by.
#[test]
fn the_rust_axum_service_limits_each_caller_behind_load_shedding() {
    let server = Server::start();
    let program = repository().join("target/rust-clients/debug/axum_service");
    assert!(
        program.is_file(),
        "{} is not built: run `make test` (or `make rust-clients`)",
        program.display()
    );
    let url = format!("redis://127.0.0.1:{}", server.port());
    let service = Listening::start("the axum service", |port| {
        let mut command = Command::new(&program);
        command.env("REDIS_URL", &url).env("PORT", port.to_string());
        command
    });
    let client = Ipv4Addr::LOCALHOST;
    let alice = |_| get_with(service.port, client, "/", "x-api-key: alice\r\n");
    let responses: Vec<Response> = (0..6).map(alice).collect();
    let statuses: Vec<u16> = responses.iter().map(|response| response.status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    let fields = responses[0].items("ratelimit");
    assert_eq!(fields[0], item("burst", &[("r", 4), ("t", 1)]));
    // A sliding day resets when what it counted no longer weighs: the end of the next
    // window on the clock, 1 to 2 days away.
    let day = &fields[1];
    assert_eq!(
        (day.name.as_str(), &day.parameters[0]),
        ("day", &("r".to_owned(), 999))
    );
    assert!(
        (86_400..=172_800).contains(&day.parameters[1].1),
        "{fields:?}"
    );
    let refused = &responses[5];
    assert_eq!(
        refused.headers.get("retry-after").map(String::as_str),
        Some("1")
    );
    for _ in 0..3 {
        assert_eq!(get_path(service.port, client, "/").status, 200);
    }
}

/// The HTTP service, stopped on drop.
struct Service(Listening);

impl Service {
    /// The service with the extra arguments `args` (its policies).
    fn start(redis_port: u16, args: &[&str]) -> Service {
        Service(Listening::start("the HTTP service", |port| {
            let mut command = Command::new(python());
            command
                .arg("examples/http/server.py")
                .args(["--port", &port.to_string()])
                .args(["--redis-url", &format!("redis://127.0.0.1:{redis_port}")])
                .args(args)
                .current_dir(repository());
            command
        }))
    }
}

impl std::ops::Deref for Service {
    type Target = Listening;

    fn deref(&self) -> &Listening {
        &self.0
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

/// One item of a structured-field list: `"name";key=value;...` with integer values.
#[derive(Debug, PartialEq, Eq)]
struct Item {
    name: String,
    parameters: Vec<(String, i64)>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// A header holding a structured-field list of named items (RFC 9651), parsed: the
    /// shape of `RateLimit-Policy` and `RateLimit`.
    fn items(&self, name: &str) -> Vec<Item> {
        let Some(value) = self.header(name) else {
            return Vec::new();
        };
        value
            .split(',')
            .map(|item| {
                let mut parts = item.trim().split(';');
                let quoted = parts.next().unwrap();
                let name = quoted
                    .strip_prefix('"')
                    .and_then(|rest| rest.strip_suffix('"'))
                    .unwrap_or_else(|| panic!("{name}: an item named by a string: {value}"));
                let parameters = parts
                    .map(|parameter| {
                        let (key, number) = parameter.split_once('=').unwrap();
                        (key.to_owned(), number.parse().unwrap())
                    })
                    .collect();
                Item {
                    name: name.to_owned(),
                    parameters,
                }
            })
            .collect()
    }
}

/// An item, for comparisons.
fn item(name: &str, parameters: &[(&str, i64)]) -> Item {
    Item {
        name: name.to_owned(),
        parameters: parameters
            .iter()
            .map(|&(key, value)| (key.to_owned(), value))
            .collect(),
    }
}

/// `GET /` from the client IP `source`.
fn get(service: &Service, source: Ipv4Addr) -> Response {
    get_path(service.port, source, "/")
}

/// `GET path` on the service at `port`, from the loopback address `source`.
fn get_path(port: u16, source: Ipv4Addr, path: &str) -> Response {
    get_with(port, source, path, "")
}

/// `GET path` with more header lines (`headers`, each ending in CRLF).
fn get_with(port: u16, source: Ipv4Addr, path: &str, headers: &str) -> Response {
    let mut stream = connect_from(source, port);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\r\n");
    stream.write_all(request.as_bytes()).unwrap();
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
fn the_http_service_answers_429_with_retry_after_and_the_ratelimit_fields_per_ip() {
    let server = Server::start();
    // Bursts of 2, then 1 a minute: a bucket of 2 that fills in 120 s.
    let service = Service::start(server.port(), &["--policy", "burst=THROTTLE:1:1:60"]);
    let client = Ipv4Addr::new(127, 0, 0, 1);
    let responses: Vec<Response> = (0..3).map(|_| get(&service, client)).collect();
    let policy = [item("burst", &[("q", 2), ("w", 120)])];
    for response in &responses {
        assert_eq!(response.items("ratelimit-policy"), policy);
        assert_eq!(
            response.header("ratelimit-limit"),
            None,
            "the legacy fields are off"
        );
    }
    let states: Vec<_> = responses
        .iter()
        .map(|response| {
            (
                response.status,
                response.items("ratelimit"),
                response.header("retry-after"),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (200, vec![item("burst", &[("r", 1), ("t", 60)])], None),
            (200, vec![item("burst", &[("r", 0), ("t", 120)])], None),
            (
                429,
                vec![item("burst", &[("r", 0), ("t", 120)])],
                Some("60")
            ),
        ]
    );

    // Another client IP has its own limit.
    let other = get(&service, Ipv4Addr::new(127, 0, 0, 2));
    assert_eq!(other.status, 200);
    assert_eq!(
        other.items("ratelimit"),
        [item("burst", &[("r", 1), ("t", 60)])]
    );
    let mut con = server.connect();
    let mut keys: Vec<String> = query(&mut con, &["KEYS", "*"]);
    keys.sort();
    assert_eq!(
        keys,
        ["ratelimit:{127.0.0.1}:burst", "ratelimit:{127.0.0.2}:burst"]
    );
    let ttl: i64 = query(&mut con, &["PTTL", "ratelimit:{127.0.0.1}:burst"]);
    assert!((118_000..=120_000).contains(&ttl), "{ttl}");

    // Without Redis, the service lets requests through, without RateLimit fields.
    drop(server);
    let unlimited = get(&service, client);
    assert_eq!(unlimited.status, 200);
    assert_eq!(unlimited.header("ratelimit"), None);
}

#[test]
fn several_policies_are_named_fields_counted_all_or_nothing() {
    let server = Server::start();
    let service = Service::start(
        server.port(),
        &[
            "--policy",
            "burst=THROTTLE:4:1:1",
            "--policy",
            "minute=LOG:3:60",
            "--legacy-headers",
        ],
    );
    let client = Ipv4Addr::new(127, 0, 0, 1);
    let responses: Vec<Response> = (0..4).map(|_| get(&service, client)).collect();
    for response in &responses {
        assert_eq!(
            response.items("ratelimit-policy"),
            [
                item("burst", &[("q", 5), ("w", 5)]),
                item("minute", &[("q", 3), ("w", 60)])
            ]
        );
    }
    let remaining: Vec<_> = responses
        .iter()
        .map(|response| {
            let items = response.items("ratelimit");
            (
                response.status,
                items[0].parameters[0].1,
                items[1].parameters[0].1,
                response.header("retry-after"),
            )
        })
        .collect();
    // The minute's log refuses the fourth request, and the burst is not charged for it (a
    // token a second would have come back only after a second).
    assert_eq!(
        remaining,
        [
            (200, 4, 2, None),
            (200, 3, 1, None),
            (200, 2, 0, None),
            (429, 2, 0, Some("60")),
        ]
    );
    // The older fields, behind the switch: the binding limiter's.
    let last = &responses[3];
    assert_eq!(last.header("ratelimit-limit"), Some("3"));
    assert_eq!(last.header("ratelimit-remaining"), Some("0"));
    assert_eq!(last.header("ratelimit-reset"), Some("60"));
}

#[test]
fn a_shaped_route_waits_for_its_turn_up_to_a_bound_then_answers_429() {
    let server = Server::start();
    // One a second, no burst; /slow waits up to 2.5 seconds for its turn.
    let service = Service::start(
        server.port(),
        &["--policy", "steady=THROTTLE:0:1:1", "--shape", "/slow=2.5"],
    );
    let port = service.port;
    let started = std::time::Instant::now();
    let requests: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let response = get_path(port, Ipv4Addr::new(127, 0, 0, 1), "/slow");
                (
                    response.status,
                    started.elapsed(),
                    response.header("retry-after").map(str::to_owned),
                )
            })
        })
        .collect();
    let mut answers: Vec<_> = requests.into_iter().map(|r| r.join().unwrap()).collect();
    answers.sort_by_key(|(_, elapsed, _)| *elapsed);
    let statuses: Vec<u16> = answers.iter().map(|(status, ..)| *status).collect();
    let mut sorted = statuses.clone();
    sorted.sort();
    // Three go, at their turns 0, 1 and 2 seconds on; the fourth's would be 3 seconds on,
    // beyond the bound: refused at once.
    assert_eq!(sorted, [200, 200, 200, 429], "{answers:?}");
    // Refused at once, not held to a turn: answered before the request admitted at its turn
    // one second on (in the order of answers, not against the test's clock).
    let refused = statuses.iter().position(|&status| status == 429).unwrap();
    assert!(refused < 2, "{answers:?}");
    let (_, _, retry_after) = &answers[refused];
    assert!(retry_after.is_some(), "{answers:?}");
    let last_admitted = answers
        .iter()
        .filter(|(status, ..)| *status == 200)
        .map(|(_, at, _)| *at)
        .max()
        .unwrap();
    assert!(
        last_admitted >= Duration::from_millis(1_900),
        "the last one waited its turn: {answers:?}"
    );
    // A route that is not shaped answers 429 at once.
    let plain = get_path(port, Ipv4Addr::new(127, 0, 0, 1), "/");
    assert_eq!(plain.status, 429);
}

#[test]
fn the_http_service_sheds_by_priority_when_its_service_is_hot_and_reports_its_backend() {
    let server = Server::start();
    let mut con = server.connect();
    let policy = [
        "RL.LOAD.POLICY",
        "load:http",
        "HOLD",
        "0",
        "FACTOR",
        "backend_ms",
        "MAX",
        "FACTOR",
        "hot",
        "MAX",
        // Only the test reports `hot`: the level does not follow this machine's CPU, which
        // other tests may keep busy.
        "LEVEL",
        "hot",
        "0.5",
        "SHARES",
        "1",
        "1",
        "0",
        "0",
    ];
    assert_eq!(query::<String, _>(&mut con, &policy), "OK");
    let backend = Service::start(server.port(), &["--policy", "none", "--quiet"]);
    let url = format!("http://127.0.0.1:{}/", backend.port);
    let service = Service::start(
        server.port(),
        &[
            "--policy",
            "none",
            "--load-service",
            "load:http",
            "--backend",
            &url,
            "--cpu-ms",
            "1",
        ],
    );
    let client = Ipv4Addr::new(127, 0, 0, 1);
    let with = |priority: &str| {
        get_with(
            service.port,
            client,
            "/",
            &format!("X-Priority: {priority}\r\n"),
        )
    };
    // The service reports what it served and what its backend cost.
    let factor = |con: &mut redis::Connection, wanted: &str| -> Option<f64> {
        let status: Vec<redis::Value> = query(con, &["RL.LOAD.STATUS", "load:http"]);
        let words: Vec<String> = redis::from_redis_value(status[11].clone()).unwrap();
        words
            .chunks(2)
            .find(|pair| pair[0] == wanted)
            .map(|pair| pair[1].parse().unwrap())
    };
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            assert_eq!(with("sheddable").status, 200);
            factor(&mut con, "backend_ms").is_some() && factor(&mut con, "requests") >= Some(1.0)
        }),
        "the service never reported its backend"
    );
    // A hot instance: the level rises whatever the service's own health.
    let _: Vec<redis::Value> = query(
        &mut con,
        &["RL.LOAD.REPORT", "load:http", "hot-1", "60000", "hot", "1"],
    );
    assert!(
        support::wait_until(Duration::from_secs(20), || with("sheddable").status == 503),
        "the service never shed"
    );
    let shed = with("sheddable_plus");
    assert_eq!(shed.status, 503);
    assert_eq!(shed.header("retry-after"), Some("1"));
    assert_eq!(with("critical").status, 200);
    assert_eq!(with("critical_plus").status, 200);
}
