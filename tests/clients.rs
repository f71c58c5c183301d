//! The client packages under `clients/`, against a real server: each passes its own tests
//! (the Node package's include express-rate-limit in a real Express app and @nestjs/throttler
//! in a real NestJS app, over real HTTP), and the Python package's adapters hold their limit
//! exactly in their real frameworks over real HTTP: slowapi on FastAPI and Flask-Limiter on
//! Flask (through the `limits` storage, every strategy), the package's own FastAPI
//! dependency and Starlette middleware. Refused requests cost nothing where the strategy
//! says so. The Rust crate passes its own tests, its tower layer in a real axum app. Every
//! package also runs on a Cluster, sync and async, ioredis and node-redis.
//!
//! `make test` installs the frameworks, pinned (clients/python/requirements-test.txt,
//! clients/node/package-lock.json).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use redis::{Connection, Value};
use support::cluster::Cluster;
use support::listening::Listening;
use support::{clients_python as python, query, repository, wait_until, Server};

/// The outage test runs alone: the other tests of this file run the packages' whole suites
/// (Maven, `go test -race`, ...) side by side and keep both cores busy. A service on a
/// saturated machine does queue, and its local limit rightly sheds then; what the outage test
/// checks is that the limiter's own answers while the server is frozen are not counted as the
/// service's health. Every other test holds a share of this lock, the outage test all of it.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A share of the machine: the test runs beside the others, never beside the outage test.
fn beside_the_others() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The machine to itself: no other test of this file runs meanwhile.
fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn redis_url(server: &Server) -> String {
    format!("redis://127.0.0.1:{}", server.port())
}

/// Runs `command` against `server`, failing with its output if it fails.
fn run(server: &Server, mut command: Command) {
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .env("REDIS_URL", redis_url(server))
        .output()
        .unwrap_or_else(|error| panic!("{command:?} could not run: {error}"));
    assert!(
        status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
}

#[test]
fn the_python_package_passes_its_tests() {
    let _machine = beside_the_others();
    let server = Server::start();
    let mut command = Command::new(python());
    command
        .args(["-m", "unittest", "discover", "-s", "clients/python/tests"])
        .current_dir(repository());
    run(&server, command);
}

/// limits' own storage and strategy tests, sync and async, from its source distribution
/// (`$LIMITS_SUITE`, which `make test` unpacks), with every storage they test replaced by
/// `ratelimit://` and `async+ratelimit://` (clients/python/tests/limits_suite.py): what
/// slowapi and Flask-Limiter rely on of a storage.
#[test]
fn limits_own_tests_pass_against_the_sync_and_async_storages() {
    let _machine = beside_the_others();
    let suite = std::env::var_os("LIMITS_SUITE").map(PathBuf::from);
    let suite = suite
        .filter(|suite| suite.join("pytest.ini").exists())
        .expect("limits' own tests are not unpacked: run `make test`, which sets $LIMITS_SUITE");
    let server = Server::start();
    let mut command = Command::new(python());
    command
        .args([
            "-m",
            "pytest",
            "--noconftest",
            "-p",
            "limits_suite",
            "--reruns",
            "2",
        ])
        // limits' options for its CI (coverage, docker) are not this run's.
        .args([
            "-o",
            "addopts=",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
        ])
        .args(["-q", "-p", "no:cacheprovider", "-k", "ratelimit"])
        .args(["tests/test_storage.py", "tests/test_strategy.py"])
        .args(["tests/aio/test_storage.py", "tests/aio/test_strategy.py"])
        .env("PYTHONPATH", repository().join("clients/python/tests"))
        .current_dir(suite);
    run(&server, command);
}

#[test]
fn the_node_package_passes_its_tests_with_express_and_nestjs() {
    let _machine = beside_the_others();
    let server = Server::start();
    let modules = repository().join("clients/node/node_modules/express-rate-limit");
    assert!(
        modules.is_dir(),
        "the Node package's dependencies are not installed: run `make test`, which installs them"
    );
    let tests = [
        "client",
        "resilience",
        "conformance",
        "express",
        "nestjs",
        "load",
    ]
    .map(|name| format!("clients/node/test/{name}.test.js"));
    let mut command = Command::new("node");
    command.arg("--test").args(tests).current_dir(repository());
    run(&server, command);
}

/// The Rust crate's tests (`make test` builds them in target/rust-clients): its clients,
/// its quota leases, its metrics and its tower layer in a real axum app over real HTTP,
/// against a server of their own; the Cluster's are in `every_package_works_on_a_cluster`.
#[test]
fn the_rust_crate_passes_its_tests_with_axum() {
    let _machine = beside_the_others();
    let server = Server::start();
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command
        .args([
            "test",
            "--quiet",
            "--manifest-path",
            "clients/rust/Cargo.toml",
            "--",
        ])
        .args(["--skip", "on_a_cluster"])
        .env("CARGO_TARGET_DIR", repository().join("target/rust-clients"))
        .current_dir(repository());
    run(&server, command);
}

/// The Java packages' tests (clients/java, Maven; `make test` builds them first): the client
/// over Lettuce and Jedis, the conformance table, the frozen server, load shedding, the Guava
/// RateLimiter; the Spring Boot starter in real Spring MVC and WebFlux apps over real HTTP, a 5 s
/// outage under both policies; the Spring Cloud Gateway drop-in against the gateway's own script
/// and in a real gateway. A failing run prints the reports of the failed tests.
#[test]
fn the_java_packages_pass_their_tests_with_spring() {
    let _machine = beside_the_others();
    let server = Server::start();
    let java = repository().join("clients/java");
    let output = Command::new("mvn")
        .args(["-B", "-q", "-o", "test"])
        .env("REDIS_URL", redis_url(&server))
        .current_dir(&java)
        .output()
        .unwrap_or_else(|error| panic!("mvn could not run (`make test` installs Maven): {error}"));
    if !output.status.success() {
        let mut reports = String::new();
        for module in ["core", "spring-boot-starter", "spring-cloud-gateway"] {
            let dir = java.join(module).join("target/surefire-reports");
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                if entry.path().extension().is_some_and(|ext| ext == "txt")
                    && text.contains("FAILURE")
                {
                    reports.push_str(&text);
                }
            }
        }
        panic!(
            "the Java tests failed:\n{}\n{}\n{reports}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The Go packages' tests (clients/go and its compat module; `make test` builds them first),
/// with the race detector: the whole conformance table, the client on the server, a frozen
/// server under every policy, load shedding, net/http and gRPC over real connections, a 5 s
/// outage under the middleware; in compat/, the drop-ins against go-redis/redis_rate's and
/// go-zero's own scripts on the same server, and chi and gorilla/mux taking the middleware.
#[test]
fn the_go_packages_pass_their_tests_with_the_race_detector() {
    let _machine = beside_the_others();
    let server = Server::start();
    for module in ["clients/go", "clients/go/compat"] {
        let mut command = Command::new("go");
        command
            .args(["test", "-race", "-count=1", "./..."])
            .current_dir(repository().join(module));
        run(&server, command);
    }
}

/// A web app from clients/python/tests/apps, with `$PORT`, `$REDIS_URL` and `extra` in its
/// environment.
fn app(server: &Server, program: &str, args: &[&str], extra: &[(&str, &str)]) -> Listening {
    Listening::start("the app", |port| {
        let mut command = Command::new(python());
        command
            .arg(program)
            .args(
                args.iter()
                    .map(|arg| arg.replace("{port}", &port.to_string())),
            )
            .env("PORT", port.to_string())
            .env("REDIS_URL", redis_url(server))
            .envs(extra.iter().copied())
            .current_dir(repository().join("clients/python/tests/apps"));
        command
    })
}

fn uvicorn(server: &Server, app_name: &str, extra: &[(&str, &str)]) -> Listening {
    let args = [
        "uvicorn",
        app_name,
        "--port",
        "{port}",
        "--log-level",
        "warning",
    ];
    app(server, "-m", &args, extra)
}

fn flask(server: &Server, strategy: &str) -> Listening {
    app(server, "flask_app.py", &[], &[("STRATEGY", strategy)])
}

/// One HTTP response: its status and headers (names lowercased).
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

fn get(port: u16, path: &str) -> Response {
    fetch(port, path).0
}

/// One GET request: the response and its body.
fn fetch(port: u16, path: &str) -> (Response, String) {
    fetch_with(port, path, "")
}

/// One GET request with `fields` (whole lines, each ending in CRLF): the response and its
/// body.
fn fetch_with(port: u16, path: &str, fields: &str) -> (Response, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{fields}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a whole response");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let response = Response {
        status,
        headers: lines
            .filter_map(|line| line.split_once(": "))
            .map(|(name, value)| (name.to_lowercase(), value.to_owned()))
            .collect(),
    };
    (response, body.to_owned())
}

/// `count` requests to `path` at once, from as many threads.
fn burst(port: u16, path: &'static str, count: usize) -> Vec<Response> {
    let threads: Vec<_> = (0..count)
        .map(|_| std::thread::spawn(move || get(port, path)))
        .collect();
    threads
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .collect()
}

/// Checks that of 20 requests at once exactly 5 went through, the others refused with
/// `Retry-After` of 1 to 60 s; returns a refused response. A `Retry-After` of 0 is the
/// whole seconds to a window's end less than a second away (a fixed window's, which ends on
/// the minute: the burst fell in its last second), so it passes only when the response's
/// `X-RateLimit-Reset` is at most a second after the server's clock once the burst is over.
fn exactly_five<'r>(server: &Server, responses: &'r [Response]) -> &'r Response {
    let admitted = responses.iter().filter(|one| one.status == 200).count();
    let refused: Vec<_> = responses.iter().filter(|one| one.status == 429).collect();
    assert_eq!((admitted, refused.len()), (5, 15), "{responses:?}");
    let [after, _]: [u64; 2] = query::<Vec<String>, _>(&mut server.connect(), &["TIME"])
        .iter()
        .map(|part| part.parse().unwrap())
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    for one in &refused {
        let retry: u64 = one
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        let window_ending = || {
            one.header("x-ratelimit-reset")
                .and_then(|reset| reset.parse::<u64>().ok())
                .is_some_and(|reset| reset <= after + 1)
        };
        assert!(
            (1..=60).contains(&retry) || (retry == 0 && window_ending()),
            "{one:?}, the server's clock at {after} s after the burst"
        );
    }
    refused[0]
}

/// The one key the app wrote.
fn the_key(server: &Server) -> String {
    let keys: Vec<String> = query(&mut server.connect(), &["KEYS", "*"]);
    assert_eq!(keys.len(), 1, "{keys:?}");
    keys[0].clone()
}

/// What the module counted on `key` for `strategy`.
fn counted(server: &Server, key: &str, strategy: &str) -> i64 {
    let mut con = server.connect();
    match strategy {
        "moving-window" => query::<Vec<i64>, _>(&mut con, &["RL.LOG.COUNTS", key, "60"])[0],
        "sliding-window-counter" => {
            query::<Vec<i64>, _>(&mut con, &["RL.WINDOW.COUNTS", key, "60", "SLIDING"])[2]
        }
        _ => query::<Vec<i64>, _>(&mut con, &["RL.WINDOW.COUNTS", key, "60", "ANCHORED"])[2],
    }
}

const STRATEGIES: [&str; 3] = ["moving-window", "sliding-window-counter", "fixed-window"];

/// 20 requests at once to `path` of the app `start` runs, for each strategy: exactly 5 go
/// through, the others refused with `Retry-After` and `X-RateLimit-*`; the module counted
/// what the strategy says.
fn holds_exactly(start: impl Fn(&Server, &str) -> Listening, path: &'static str) {
    for strategy in STRATEGIES {
        let server = Server::start();
        let app = start(&server, strategy);
        let responses = burst(app.port, path, 20);
        let refused = exactly_five(&server, &responses);
        assert_eq!(refused.header("x-ratelimit-limit"), Some("5"), "{strategy}");
        assert_eq!(
            refused.header("x-ratelimit-remaining"),
            Some("0"),
            "{strategy}"
        );
        let key = the_key(&server);
        // limits' fixed window counts every hit; its other strategies only the admitted.
        let expected = if strategy == "fixed-window" { 20 } else { 5 };
        assert_eq!(
            counted(&server, &key, strategy),
            expected,
            "{strategy}: {key}"
        );
    }
}

#[test]
fn slowapi_on_fastapi_holds_its_limit_exactly_with_every_strategy() {
    let _machine = beside_the_others();
    holds_exactly(
        |server, strategy| uvicorn(server, "fastapi_app:app", &[("STRATEGY", strategy)]),
        "/slowapi",
    );
}

#[test]
fn flask_limiter_on_flask_holds_its_limit_exactly_with_every_strategy() {
    let _machine = beside_the_others();
    holds_exactly(flask, "/limited");
}

#[test]
fn the_fastapi_dependency_and_the_starlette_middleware_hold_their_limit_exactly() {
    let _machine = beside_the_others();
    for (app_name, path) in [
        ("fastapi_app:app", "/dependency"),
        ("fastapi_app:middleware_app", "/"),
    ] {
        let server = Server::start();
        let app = uvicorn(&server, app_name, &[]);
        let responses = burst(app.port, path, 20);
        let refused = exactly_five(&server, &responses);
        assert_eq!(
            refused.header("ratelimit-policy"),
            Some("\"minute\";q=5;w=60"),
            "{app_name}"
        );
        assert_eq!(
            refused.header("ratelimit"),
            Some("\"minute\";r=0;t=60"),
            "{app_name}"
        );
        let admitted = responses.iter().find(|one| one.status == 200).unwrap();
        assert!(
            admitted.header("ratelimit").is_some(),
            "{app_name}: {admitted:?}"
        );
        assert_eq!(
            counted(&server, &the_key(&server), "moving-window"),
            5,
            "{app_name}"
        );
    }
}

/// Graded limiting by load over HTTP, in every framework: the app reports its own signals
/// to the service's key (`load:http`) every 0.1 s and sheds by the level the server
/// answers, per priority (`X-Priority`): 503 with `Retry-After` for what its level does not
/// admit, the rest through; its metrics show the level and the decisions; in shadow mode
/// nothing is shed and what would be is counted. The hot instances that raise the level are
/// reports the test makes itself; the app learns the level at its next report (the waits
/// are bounded, and end on what the server and the app answer).
fn sheds_by_priority_over_http(app: &Listening, shadow: &Listening, server: &Server) {
    let mut con = server.connect();
    let policy = [
        "RL.LOAD.POLICY",
        "load:http",
        "HOLD",
        "0",
        "LEVEL",
        "cpu",
        "0.5",
        "SHARES",
        "1",
        "1",
        "0",
        "0",
    ];
    assert_eq!(query::<String, _>(&mut con, &policy), "OK");
    let with = |priority: &str| format!("X-Priority: {priority}\r\n");
    // The first requests start the apps' reports.
    fetch_with(app.port, "/", &with("critical"));
    fetch_with(shadow.port, "/", &with("critical"));
    let instances = |con: &mut Connection| -> i64 {
        let status: Vec<Value> = query(con, &["RL.LOAD.STATUS", "load:http"]);
        redis::from_redis_value(status[5].clone()).unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(20), || instances(&mut con) >= 2),
        "the apps never reported"
    );
    // Three hot instances: the mean CPU is past 0.5 whatever the apps' own.
    for hot in ["hot-1", "hot-2", "hot-3"] {
        ints_or_items(
            &mut con,
            &["RL.LOAD.REPORT", "load:http", hot, "60000", "cpu", "1"],
        );
    }
    let shed = || fetch_with(app.port, "/", &with("sheddable")).0;
    assert!(
        wait_until(Duration::from_secs(20), || shed().status == 503),
        "the app never shed a sheddable request"
    );
    let refused = shed();
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        fetch_with(app.port, "/", &with("critical_plus")).0.status,
        200
    );
    assert_eq!(fetch_with(app.port, "/", &with("critical")).0.status, 200);
    // In shadow mode the same request goes through, counted.
    assert!(
        wait_until(Duration::from_secs(20), || {
            fetch_with(shadow.port, "/", &with("sheddable")).0.status == 200
                && fetch_with(shadow.port, "/metrics/", &with("critical_plus"))
                    .1
                    .contains("outcome=\"shadow\"")
        }),
        "shadow mode shed, or did not count"
    );
    // Scraped as critical_plus, which the level never sheds.
    let (_, metrics) = fetch_with(app.port, "/metrics/", &with("critical_plus"));
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("ratelimit_load_level{service=\"load:http\"} 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains("priority=\"sheddable\"") && metrics.contains("outcome=\"shed\""),
        "{metrics}"
    );
    // The load falls: the hot instances report cool, and the app admits everything again.
    for hot in ["hot-1", "hot-2", "hot-3"] {
        ints_or_items(
            &mut con,
            &["RL.LOAD.REPORT", "load:http", hot, "60000", "cpu", "0"],
        );
    }
    assert!(
        wait_until(Duration::from_secs(20), || shed().status == 200),
        "the app kept shedding after the load fell"
    );
}

/// Runs an `RL.LOAD.*` command, whatever its reply.
fn ints_or_items(con: &mut Connection, args: &[&str]) {
    let _: Value = query(con, args);
}

#[test]
fn starlette_sheds_by_load_and_priority() {
    let _machine = beside_the_others();
    let server = Server::start();
    let app = uvicorn(&server, "fastapi_app:shedding_app", &[]);
    let shadow = uvicorn(&server, "fastapi_app:shadow_shedding_app", &[]);
    // The local limit keeps each route's latency apart, named by the pattern the router
    // matched (here Starlette's endpoint), not by the path.
    for path in ["/", "/items/1", "/items/2"] {
        assert_eq!(get(app.port, path).status, 200, "{path}");
    }
    let (_, routes) = fetch(app.port, "/routes");
    let mut routes: Vec<&str> = routes.lines().collect();
    routes.sort_unstable();
    assert_eq!(
        routes,
        ["GET _shedding_app.<locals>.item", "GET hello"],
        "the routes the local limit keeps apart"
    );
    sheds_by_priority_over_http(&app, &shadow, &server);
}

#[test]
fn every_package_works_on_a_cluster() {
    let _machine = beside_the_others();
    let cluster = Cluster::start(3, 0);
    // RL.TOP on, on every primary, as an operator turns it on: top() merges them.
    for master in cluster.masters() {
        let mut con = cluster.node(master.port).connect();
        query::<String, _>(&mut con, &["CONFIG", "SET", "ratelimit.top-keys", "128"]);
    }
    let node = &cluster.masters()[0];
    let url = format!("redis://127.0.0.1:{}", node.port);
    let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    let rust = [
        "test",
        "--quiet",
        "--manifest-path",
        "clients/rust/Cargo.toml",
        "--test",
        "cluster",
    ];
    for (program, args) in [
        (python(), vec!["clients/python/tests/cluster_check.py"]),
        (PathBuf::from("node"), vec!["clients/node/test/cluster.js"]),
        (cargo, rust.to_vec()),
        (
            PathBuf::from("go"),
            vec![
                "test",
                "-C",
                "clients/go/compat",
                "-count=1",
                "-run",
                "TestOnACluster",
                ".",
            ],
        ),
    ] {
        let output = Command::new(&program)
            .args(&args)
            .env("REDIS_URL", &url)
            .env("REDIS_CLUSTER_URL", &url)
            .env("CARGO_TARGET_DIR", repository().join("target/rust-clients"))
            .current_dir(repository())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{program:?} {args:?} failed:\n{}\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            cluster.logs()
        );
    }
}

/// An app, its route, and the status a request gets while the server fails.
type Faulty<'a> = (&'a Listening, &'static str, u16);

/// The server frozen (`SIGSTOP`), then killed, then restarted: every request to every app
/// is answered within the call's timeout (0.2 s) and a margin, with what its policy says, and
/// service resumes once the server is back.
fn survives_a_failing_server(mut server: Server, faulty: &[Faulty]) {
    for (app, path, _) in faulty {
        assert_eq!(get(app.port, path).status, 200, "{path}");
    }
    // The call's timeout (0.2 s) and a margin of 1 s for a busy machine: below the 2 s that
    // the first of the client libraries' own defaults would wait (Jedis' socket timeout;
    // go-redis' read timeout is 3 s, Lettuce's 60 s, redis-py's and ioredis' none), so an
    // answer within it is the package's deadline at work.
    let bound = Duration::from_millis(200 + 1_000);
    for (fault, signal) in [("frozen", libc::SIGSTOP), ("gone", libc::SIGKILL)] {
        if signal == libc::SIGKILL {
            server.kill();
        } else {
            server.signal(signal);
        }
        for round in 0..3 {
            for &(app, path, while_failing) in faulty {
                let started = std::time::Instant::now();
                let response = get(app.port, path);
                let took = started.elapsed();
                assert!(took < bound, "{fault}, round {round}, {path}: {took:?}");
                assert_eq!(response.status, while_failing, "{fault}, {path}");
                if response.status == 503 {
                    let retry: u64 = response.header("retry-after").unwrap().parse().unwrap();
                    assert!((1..=1).contains(&retry), "Retry-After {retry}");
                }
            }
        }
        if signal == libc::SIGKILL {
            server.restart();
        } else {
            server.signal(libc::SIGCONT);
        }
        for (app, path, _) in faulty {
            let resumed =
                support::wait_until(Duration::from_secs(3), || get(app.port, path).status == 200);
            assert!(resumed, "{fault}: {path} did not resume");
        }
    }
}

#[test]
fn the_python_adapters_answer_within_their_timeout_when_the_server_fails() {
    let _machine = beside_the_others();
    let server = Server::start();
    let swallow = [("SWALLOW", "1")];
    let fastapi = uvicorn(&server, "fastapi_app:app", &swallow);
    let middleware = uvicorn(&server, "fastapi_app:deny_middleware_app", &[]);
    let flask = app(&server, "flask_app.py", &[], &swallow);
    let faulty = [
        (&fastapi, "/allow", 200),
        (&fastapi, "/deny", 503),
        (&middleware, "/", 503),
        (&fastapi, "/slowapi", 200),
        (&flask, "/limited", 200),
    ];
    survives_a_failing_server(server, &faulty);
}

/// The Node adapters' app (clients/node/test/apps/failing.js) as `which` ("express" or
/// "nestjs").
fn node_app(server: &Server, which: &str) -> Listening {
    node_app_named(server, "failing.js", which)
}

/// One of the Node adapters' apps (clients/node/test/apps/`file`) as `which`.
fn node_app_named(server: &Server, file: &str, which: &str) -> Listening {
    Listening::start("the Node app", |port| {
        let mut command = Command::new("node");
        command
            .arg(format!("test/apps/{file}"))
            .env("APP", which)
            .env("PORT", port.to_string())
            .env("REDIS_URL", redis_url(server))
            .current_dir(repository().join("clients/node"));
        command
    })
}

#[test]
fn the_node_adapters_answer_within_their_timeout_when_the_server_fails() {
    let _machine = beside_the_others();
    let server = Server::start();
    let (express, nestjs) = (node_app(&server, "express"), node_app(&server, "nestjs"));
    let faulty = [
        (&express, "/allow", 200),
        (&express, "/deny", 503),
        (&nestjs, "/", 503),
    ];
    survives_a_failing_server(server, &faulty);
}

/// The value of `ratelimit_decisions_total` for `policy` and `outcome` in a scrape (0 when
/// absent), whatever the order of its labels and the format of its number.
fn decisions(scrape: &str, policy: &str, outcome: &str) -> f64 {
    scrape
        .lines()
        .filter(|line| line.starts_with("ratelimit_decisions_total{"))
        .find(|line| {
            line.contains(&format!("policy=\"{policy}\""))
                && line.contains(&format!("outcome=\"{outcome}\""))
        })
        .map_or(0.0, |line| {
            line.rsplit(' ').next().unwrap().parse().unwrap()
        })
}

/// The statuses of `count` requests to `path`, one after another.
fn statuses(app: &Listening, path: &str, count: usize) -> Vec<u16> {
    (0..count).map(|_| get(app.port, path).status).collect()
}

#[test]
fn metrics_scraped_over_http_count_every_decision_and_shadow_mode_lets_refusals_through() {
    let _machine = beside_the_others();
    let server = Server::start();
    // FastAPI: the package's dependency, in shadow mode too, and slowapi on the storage.
    let fastapi = uvicorn(&server, "fastapi_app:app", &[]);
    assert_eq!(statuses(&fastapi, "/metered", 3), [200, 200, 429]);
    assert_eq!(statuses(&fastapi, "/shadowed", 3), [200, 200, 200]);
    assert_eq!(
        statuses(&fastapi, "/slowapi", 7),
        [200, 200, 200, 200, 200, 429, 429]
    );
    let (_, scrape) = fetch(fastapi.port, "/metrics/");
    for (policy, outcome, count) in [
        ("metered", "allowed", 2.0),
        ("metered", "refused", 1.0),
        ("shadowed", "allowed", 1.0),
        ("shadowed", "shadow", 2.0),
        ("shadowed", "refused", 0.0),
        ("limits", "allowed", 5.0),
        ("limits", "refused", 2.0),
    ] {
        assert_eq!(
            decisions(&scrape, policy, outcome),
            count,
            "{policy} {outcome}:\n{scrape}"
        );
    }
    // Six calls of the dependency; slowapi reads the window after each of its seven hits.
    assert!(
        scrape.contains("ratelimit_server_call_duration_seconds_count 20.0"),
        "{scrape}"
    );
    // Flask-Limiter on the storage.
    let flask = app(&server, "flask_app.py", &[], &[]);
    assert_eq!(
        statuses(&flask, "/limited", 7),
        [200, 200, 200, 200, 200, 429, 429]
    );
    let (_, scrape) = fetch(flask.port, "/metrics");
    assert_eq!(decisions(&scrape, "limits", "allowed"), 5.0, "{scrape}");
    assert_eq!(decisions(&scrape, "limits", "refused"), 2.0, "{scrape}");
    // express-rate-limit and NestJS on the Node package.
    let express = node_app_named(&server, "metered.js", "express");
    assert_eq!(statuses(&express, "/metered", 3), [200, 200, 429]);
    assert_eq!(statuses(&express, "/shadowed", 3), [200, 200, 200]);
    let (_, scrape) = fetch(express.port, "/metrics");
    assert_eq!(decisions(&scrape, "express", "allowed"), 3.0, "{scrape}");
    assert_eq!(decisions(&scrape, "express", "refused"), 1.0, "{scrape}");
    assert_eq!(decisions(&scrape, "express", "shadow"), 2.0, "{scrape}");
    assert!(
        scrape.contains("ratelimit_server_call_duration_seconds_count 6"),
        "{scrape}"
    );
    let nestjs = node_app_named(&server, "metered.js", "nestjs");
    assert_eq!(statuses(&nestjs, "/", 3), [200, 200, 429]);
    let (_, scrape) = fetch(nestjs.port, "/metrics");
    assert_eq!(decisions(&scrape, "default", "allowed"), 2.0, "{scrape}");
    assert_eq!(decisions(&scrape, "default", "refused"), 1.0, "{scrape}");
}

/// One package's service for the outage test: both middlewares at their defaults (the
/// rate limit on `/limited`, load shedding on everything), its shedder reporting under
/// `service`; `/limited` answers `while_frozen` while the server is frozen.
struct OutageService {
    name: String,
    port: u16,
    service: String,
    while_frozen: u16,
    _running: Box<dyn std::any::Any>,
}

impl OutageService {
    fn new(
        name: String,
        service: String,
        while_frozen: u16,
        running: impl std::any::Any,
        port: u16,
    ) -> OutageService {
        OutageService {
            name,
            port,
            service,
            while_frozen,
            _running: Box::new(running),
        }
    }
}

/// When the outage test's requests were sent.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Phase {
    Before,
    Frozen,
    Back,
}

/// The package services of the outage test: each package's failure policy at its default,
/// under deny and under allow (whose requests wait for the failing server, then go on to the
/// service).
fn outage_services(server: &Server) -> Vec<OutageService> {
    let mut services = Vec::new();
    for (policy, status) in [("raise", 500), ("deny", 503), ("allow", 200)] {
        let service = format!("load:outage:python:{policy}");
        let args = [
            "uvicorn",
            "outage_app:app",
            "--port",
            "{port}",
            "--log-level",
            "critical",
        ];
        let extra = [("SERVICE", service.as_str()), ("ON_ERROR", policy)];
        let app = app(server, "-m", &args, &extra);
        let port = app.port;
        services.push(OutageService::new(
            format!("Python, {policy}"),
            service,
            status,
            app,
            port,
        ));
    }
    for (policy, status) in [("throw", 500), ("deny", 503), ("allow", 200)] {
        let service = format!("load:outage:node:{policy}");
        let app = Listening::start("the Node outage app", |port| {
            let mut command = Command::new("node");
            command
                .arg("test/apps/outage.js")
                .env("PORT", port.to_string())
                .env("REDIS_URL", redis_url(server))
                .env("SERVICE", &service)
                .env("ON_ERROR", policy)
                .current_dir(repository().join("clients/node"));
            command
        });
        let port = app.port;
        services.push(OutageService::new(
            format!("Node, {policy}"),
            service,
            status,
            app,
            port,
        ));
    }
    let outage = repository().join("target/rust-clients/debug/examples/outage");
    for (policy, status) in [("raise", 503), ("deny", 503), ("allow", 200)] {
        let service = format!("load:outage:rust:{policy}");
        let app = Listening::start("the Rust outage app", |port| {
            let mut command = Command::new(&outage);
            command
                .env("PORT", port.to_string())
                .env("REDIS_URL", redis_url(server))
                .env("SERVICE", &service)
                .env("ON_ERROR", policy);
            command
        });
        let port = app.port;
        services.push(OutageService::new(
            format!("Rust, {policy}"),
            service,
            status,
            app,
            port,
        ));
    }
    // nginx, as lua-resty-limit-traffic's README wires a limiter: 503 when rejected (which
    // `on_error = "deny"` answers while the server fails), 500 on an error (unset).
    for (policy, on_error, status) in [
        ("unset", "", 500),
        ("deny", ", on_error = \"deny\"", 503),
        ("allow", ", on_error = \"allow\"", 200),
    ] {
        let service = format!("load:outage:nginx:{policy}");
        let redis = format!(
            "{{ host = \"127.0.0.1\", port = {} {on_error} }}",
            server.port()
        );
        let http = format!(
            "    lua_shared_dict ratelimit_load 1m;
    init_worker_by_lua_block {{
        require(\"resty.ratelimit_module.load\").start({{ host = \"127.0.0.1\", port = {port} }},
            {{ service = \"{service}\", dict = \"ratelimit_load\" }})
        LIMIT = assert(require(\"resty.ratelimit_module.req\").new({redis}, 100, 100))
    }}
    server {{
        listen {{listen}};
        location / {{
            access_by_lua_block {{
                require(\"resty.ratelimit_module.load\").shed(ngx.var.http_x_priority)
                if ngx.var.uri == \"/limited\" then
                    local delay, err = LIMIT:incoming(ngx.var.binary_remote_addr, true)
                    if not delay then
                        return ngx.exit(err == \"rejected\" and 503 or 500)
                    end
                end
            }}
            content_by_lua_block {{ ngx.say(\"ok\") }}
            log_by_lua_block {{ require(\"resty.ratelimit_module.load\").record() }}
        }}
    }}",
            port = server.port()
        );
        let nginx = support::nginx::Nginx::start(&http);
        let port = nginx.port();
        services.push(OutageService::new(
            format!("nginx, on_error {policy}"),
            service,
            status,
            nginx,
            port,
        ));
    }
    services
}

/// Issue 58: a 5 s outage of the server under a service with both middlewares at their
/// defaults (and under deny, and allow) sheds nothing once the server is back. The limiter's
/// own answers while it failed (its 500s and 503s) are not the service failing: no report
/// carries them, and no level rises. Under allow, the requests that waited for the failing
/// server go on to the service, and nothing is shed either. What is asserted is what the
/// server reports (the level of each service, polled) and what each service answered.
#[test]
fn an_outage_of_the_server_sheds_nothing_once_it_is_back() {
    let _machine = alone();
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    use std::sync::{Arc, Mutex};

    let server = Server::start();
    let services = outage_services(&server);
    let phase = Arc::new(AtomicU8::new(Phase::Before as u8));
    let running = Arc::new(AtomicBool::new(true));
    // (service, phase, path, status) of every request sent.
    type Answered = Vec<(usize, Phase, &'static str, u16)>;
    let answers: Arc<Mutex<Answered>> = Arc::default();
    // 30 requests a second to each service, over /limited and /open in turn.
    let senders: Vec<_> = services
        .iter()
        .enumerate()
        .map(|(index, one)| {
            let (port, phase, running, answers) =
                (one.port, phase.clone(), running.clone(), answers.clone());
            std::thread::spawn(move || {
                let mut sent = Vec::new();
                for number in 0.. {
                    if !running.load(Ordering::SeqCst) {
                        break;
                    }
                    let path = if number % 2 == 0 { "/limited" } else { "/open" };
                    let at = match phase.load(Ordering::SeqCst) {
                        0 => Phase::Before,
                        1 => Phase::Frozen,
                        _ => Phase::Back,
                    };
                    let answers = answers.clone();
                    sent.push(std::thread::spawn(move || {
                        let status = try_get(port, path).unwrap_or(0);
                        answers.lock().unwrap().push((index, at, path, status));
                    }));
                    std::thread::sleep(Duration::from_millis(33));
                }
                for one in sent {
                    one.join().unwrap();
                }
            })
        })
        .collect();
    // Every service reports before the outage.
    let mut con = server.connect();
    let level_of = |con: &mut Connection, service: &str| -> (i64, i64) {
        let status: Vec<Value> = query(con, &["RL.LOAD.STATUS", service]);
        let int = |value: &Value| match value {
            Value::Int(number) => *number,
            other => panic!("{other:?}"),
        };
        (int(&status[1]), int(&status[5]))
    };
    for one in &services {
        let reported = wait_until(Duration::from_secs(10), || {
            level_of(&mut con, &one.service).1 > 0
        });
        assert!(reported, "{} never reported", one.name);
    }
    std::thread::sleep(Duration::from_secs(2));
    phase.store(Phase::Frozen as u8, Ordering::SeqCst);
    server.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(5));
    server.signal(libc::SIGCONT);
    phase.store(Phase::Back as u8, Ordering::SeqCst);
    // Once the server is back, every service's level stays 0 while the reports of the
    // outage's seconds come in (a report's window is 10 s: all of them carry it).
    let mut highest = vec![0; services.len()];
    let mut reported_after = vec![false; services.len()];
    for _ in 0..40 {
        for (index, one) in services.iter().enumerate() {
            let (level, instances) = level_of(&mut con, &one.service);
            highest[index] = highest[index].max(level);
            reported_after[index] |= instances > 0;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    running.store(false, Ordering::SeqCst);
    for sender in senders {
        sender.join().unwrap();
    }
    let answers = answers.lock().unwrap();
    let mut failures = Vec::new();
    for (index, one) in services.iter().enumerate() {
        let of = |phase: Phase, path: &str| -> Vec<u16> {
            answers
                .iter()
                .filter(|(i, at, p, _)| *i == index && *at == phase && *p == path)
                .map(|(_, _, _, status)| *status)
                .collect()
        };
        let frozen = of(Phase::Frozen, "/limited");
        if !frozen.contains(&one.while_frozen) {
            failures.push(format!(
                "{}: /limited answered {frozen:?} while frozen",
                one.name
            ));
        }
        for phase in [Phase::Before, Phase::Frozen, Phase::Back] {
            let open = of(phase, "/open");
            let shed = open.iter().filter(|status| **status != 200).count();
            if shed > 0 {
                failures.push(format!(
                    "{}: /open answered {shed} of {} with other than 200 ({phase:?}): {open:?}",
                    one.name,
                    open.len()
                ));
            }
        }
        if !reported_after[index] {
            failures.push(format!("{}: no report after the outage", one.name));
        }
        if highest[index] != 0 {
            failures.push(format!(
                "{}: the level rose to {} after the outage",
                one.name, highest[index]
            ));
        }
        let back = of(Phase::Back, "/limited");
        if !back.contains(&200) {
            failures.push(format!("{}: /limited answered {back:?} after", one.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One GET request's status; None when the service did not answer.
fn try_get(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split(' ').nth(1)?.parse().ok()
}
