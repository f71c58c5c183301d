//! Test harness: real `redis-server` processes with the freshly built module, each on a
//! free loopback port in its own directory, started with bounded waits, stopped on drop,
//! and with their log printed when a test fails.
//!
//! ```ignore
//! let server = Server::start();
//! let mut con = server.connect();
//! assert_eq!(ints(&mut con, &["CL.THROTTLE", "k", "4", "1", "1"]), [0, 5, 4, -1, 1]);
//! ```

#![allow(dead_code)] // Each test crate uses its own part of the harness.

pub mod cluster;
pub mod copies;
pub mod link;
pub mod listening;
pub mod nginx;
pub mod valgrind;
pub mod workload;

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, Value};

/// Attempts at finding a port no other test grabbed in the meantime.
const PORT_ATTEMPTS: usize = 5;

/// The module under test: `$RATELIMIT_MODULE`, or the release build in this repository.
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("RATELIMIT_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository().join("target/release/libredis_ratelimit.so"));
    assert!(
        path.is_file(),
        "the module is not built at {}: run `make test` (or `cargo build --release` first)",
        path.display()
    );
    let built = modified(&path);
    // Only the sources: a change to Cargo.toml's test dependencies does not relink it.
    assert!(
        newest_modification(&repository().join("src")) <= built,
        "the module at {} is older than the sources: run `make test` (or `cargo build --release` first)",
        path.display()
    );
    path
}

fn modified(path: &Path) -> std::time::SystemTime {
    fs::metadata(path).and_then(|meta| meta.modified()).unwrap()
}

/// The latest modification time of a file, or of any file below a directory, leaving out
/// unit-test modules (`tests.rs`, `shortfall_tests.rs`), which are not part of the module's
/// build: editing one does not rebuild the library.
fn newest_modification(path: &Path) -> std::time::SystemTime {
    match fs::read_dir(path) {
        Ok(entries) => entries
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                !name.ends_with("tests.rs")
            })
            .map(|path| newest_modification(&path))
            .fold(std::time::SystemTime::UNIX_EPOCH, std::cmp::max),
        Err(_) => modified(path),
    }
}

/// The redis-server the tests run: `$REDIS_SERVER` (to test another version or Valkey), or
/// the one on the PATH.
pub fn server_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER").map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// The cli the tests run: `$REDIS_CLI`, or the one beside `$REDIS_SERVER` (`redis-cli` beside
/// `redis-server`, `valkey-cli` beside `valkey-server`), or `redis-cli` on the PATH.
pub fn cli_binary() -> PathBuf {
    if let Some(cli) = std::env::var_os("REDIS_CLI") {
        return PathBuf::from(cli);
    }
    let server = server_binary();
    let name = server.file_name().unwrap_or_default().to_string_lossy();
    let beside_server = server.with_file_name(name.replace("server", "cli"));
    if beside_server.is_file() {
        beside_server
    } else {
        PathBuf::from("redis-cli")
    }
}

/// What the server under test is, from `INFO server`: Redis or Valkey, and its own release.
/// (Valkey reports `redis_version:7.2.4` whatever its release; its own is `valkey_version`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerRelease {
    /// Valkey rather than Redis.
    pub valkey: bool,
    /// The release as (major, minor).
    pub version: (u32, u32),
}

impl ServerRelease {
    /// The release of the server behind `con`.
    pub fn of(con: &mut impl ConnectionLike) -> ServerRelease {
        let info: String = query(con, &["INFO", "server"]);
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let valkey = field("server_name") == Some("valkey");
        let version = if valkey {
            field("valkey_version")
        } else {
            field("redis_version")
        }
        .expect("INFO server names the version");
        let mut numbers = version.split('.').map(|part| part.parse().unwrap());
        ServerRelease {
            valkey,
            version: (numbers.next().unwrap(), numbers.next().unwrap()),
        }
    }

    /// Whether modules can put their commands in ACL categories: Redis 7.2+, every Valkey.
    pub fn has_module_command_categories(self) -> bool {
        self.valkey || self.version >= (7, 2)
    }

    /// The bytes a short string the module rewrites in place costs beyond the same string
    /// written by `SET`: Valkey 9 keeps `SET`'s short strings embedded in the key's own
    /// object, and a write through the module's direct memory access makes the value a
    /// separate allocation (8 bytes more, measured on Valkey 9.1; none on Valkey 8.1.1). Redis
    /// stores both alike. A key's first write is a new string, as `SET`'s, at parity everywhere.
    pub fn in_place_string_overhead(self) -> f64 {
        if self.valkey && self.version >= (9, 0) {
            8.0
        } else {
            0.0
        }
    }

    /// Whether modules can add ACL categories of their own: Redis 7.4+, Valkey 8+.
    pub fn has_module_acl_categories(self) -> bool {
        if self.valkey {
            self.version >= (8, 0)
        } else {
            self.version >= (7, 4)
        }
    }

    /// Whether `ACL CAT category` lists a module's commands: Redis 8+ (redis#13489), Valkey
    /// 8.1+ (valkey#1140). Redis 7.4 and Valkey 8.0 leave them out (measured on 7.4.1 and
    /// 8.0.1), though the category grants them.
    pub fn lists_module_commands_by_category(self) -> bool {
        if self.valkey {
            self.version >= (8, 1)
        } else {
            self.version >= (8, 0)
        }
    }
}

/// The version `MODULE LIST` shows for the module `name`, if it is loaded. Servers list
/// built-in modules too (Redis 8's `vectorset`, Valkey 9's `lua`), in no fixed order.
pub fn module_version(con: &mut impl ConnectionLike, name: &str) -> Option<i64> {
    let modules: Vec<HashMap<String, Value>> = query(con, &["MODULE", "LIST"]);
    modules.into_iter().find_map(|module| {
        let listed: String = redis::from_redis_value(module.get("name")?.clone()).ok()?;
        (listed == name).then(|| redis::from_redis_value(module.get("ver")?.clone()).ok())?
    })
}

/// The repository's root.
pub fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python with the client package and its frameworks: `$CLIENTS_PYTHON`, or the
/// virtualenv `make test` makes.
#[allow(dead_code)]
pub fn clients_python() -> PathBuf {
    let python = std::env::var_os("CLIENTS_PYTHON").map_or_else(
        || repository().join("target/clients-venv/bin/python"),
        PathBuf::from,
    );
    assert!(
        python.exists(),
        "no Python with the package at {}: run `make test`, which installs it",
        python.display()
    );
    python
}

/// How to start a server.
#[derive(Clone)]
pub struct ServerBuilder {
    module: bool,
    module_args: Vec<String>,
    args: Vec<String>,
    config_file: Option<PathBuf>,
    working_dir: Option<PathBuf>,
    /// Files written to the data directory before the server starts.
    files: Vec<(String, Vec<u8>)>,
}

impl ServerBuilder {
    /// Adds `--name value` to the command line.
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push(format!("--{name}"));
        self.args.push(value.to_owned());
        self
    }

    /// Passes `arg` to the module when it loads.
    pub fn module_arg(mut self, arg: &str) -> Self {
        self.module_args.push(arg.to_owned());
        self
    }

    /// Starts the server without loading the module.
    pub fn without_module(mut self) -> Self {
        self.module = false;
        self
    }

    /// Makes the server a replica of `master`.
    pub fn replica_of(self, master: &Server) -> Self {
        self.arg("replicaof", &format!("127.0.0.1 {}", master.port))
    }

    /// Appends to an AOF, fsynced at every write.
    pub fn aof(self) -> Self {
        self.arg("appendonly", "yes").arg("appendfsync", "always")
    }

    /// Writes `contents` to the file `name` (a path within the server's data directory)
    /// before it starts: an AOF or an RDB to load.
    pub fn file(mut self, name: &str, contents: &[u8]) -> Self {
        self.files.push((name.to_owned(), contents.to_vec()));
        self
    }

    /// Starts `redis-server <file>` from `working_dir` instead of a bare command line (the
    /// harness still sets the port, the directory for data and the log).
    pub fn config_file(mut self, file: &Path, working_dir: &Path) -> Self {
        self.config_file = Some(file.to_owned());
        self.working_dir = Some(working_dir.to_owned());
        self.module = false;
        self
    }

    /// Starts the server and waits until it answers `PING`.
    pub fn start(self) -> Server {
        self.try_start()
            .unwrap_or_else(|log| panic!("redis-server did not start; its log:\n{log}"))
    }

    /// Starts the server, or returns its log if it exits or never answers.
    pub fn try_start(self) -> Result<Server, String> {
        let mut log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let (port, dir) = (free_port(), fresh_dir());
            match self.launch(port, &dir) {
                Ok(process) => {
                    return Ok(Server {
                        process: Some(process),
                        port,
                        dir,
                        builder: self,
                    })
                }
                Err(failure) => {
                    let _ = fs::remove_dir_all(&dir);
                    log = failure;
                    if !log.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        Err(log)
    }

    /// Runs redis-server on `port` with `dir` for its data and log, and waits until it
    /// answers; on failure, stops it and returns its log.
    fn launch(&self, port: u16, dir: &Path) -> Result<Child, String> {
        for (name, contents) in &self.files {
            let path = dir.join(name);
            if !path.exists() {
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, contents).unwrap();
            }
        }
        let log_path = dir.join("server.log");
        let mut command = valgrind::server_command(&server_binary(), dir);
        if let Some(file) = &self.config_file {
            command.arg(file);
        }
        command.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
        command.args(["--daemonize", "no", "--logfile", log_path.to_str().unwrap()]);
        match &self.working_dir {
            // `--dir` changes the directory before modules load, which would break the
            // relative `loadmodule` path of a config file.
            Some(working_dir) => command.current_dir(working_dir),
            None => command.args(["--dir", dir.to_str().unwrap()]),
        };
        command.args(["--save", "", "--enable-debug-command", "yes"]);
        command.args(["--enable-module-command", "yes"]);
        // Replicas sync at once instead of after the default 5 s wait for more of them.
        command.args(["--repl-diskless-sync-delay", "0"]);
        if self.module {
            command.arg("--loadmodule").arg(module_path());
            command.args(&self.module_args);
        }
        command.args(&self.args);
        let mut process = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("stderr.log")).unwrap())
            .spawn()
            .expect("redis-server could not be run: is it installed? (`make test` installs it)");
        let mut exited = false;
        let ready = wait_until(valgrind::startup_timeout(), || {
            exited = matches!(process.try_wait(), Ok(Some(_)));
            exited || ping(port)
        });
        if ready && !exited {
            return Ok(process);
        }
        let _ = process.kill();
        let _ = process.wait();
        Err(read_log(dir))
    }
}

/// A running `redis-server`.
pub struct Server {
    process: Option<Child>,
    port: u16,
    dir: PathBuf,
    builder: ServerBuilder,
}

impl Server {
    /// How to start a server with the module loaded.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            module: true,
            module_args: Vec::new(),
            args: Vec::new(),
            config_file: None,
            working_dir: None,
            files: Vec::new(),
        }
    }

    /// A server with the module loaded.
    pub fn start() -> Server {
        Server::builder().start()
    }

    /// A replica of `master`, once its replication link is up.
    pub fn start_replica(master: &Server) -> Server {
        let replica = Server::builder().replica_of(master).start();
        replica.wait_for_replication_link();
        replica
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new connection.
    pub fn connect(&self) -> Connection {
        self.try_connect()
            .unwrap_or_else(|error| panic!("cannot connect to {}: {error}", self.port))
    }

    /// A new connection, or why there is none: for waits that poll a server which may be
    /// too busy to answer for a while (a cluster node applying a new configuration).
    pub fn try_connect(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        con.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(con)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        read_log(&self.dir)
    }

    /// One line of `INFO`, such as `master_link_status`.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.connect())
            .ok()?;
        info.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .map(str::to_owned)
    }

    /// Waits (bounded) until this replica's link to its master is up.
    pub fn wait_for_replication_link(&self) {
        let ready = wait_until(valgrind::startup_timeout(), || {
            self.info_field("replication", "master_link_status")
                .as_deref()
                == Some("up")
        });
        assert!(ready, "the replica did not sync; its log:\n{}", self.log());
    }

    /// Starts `BGREWRITEAOF` and waits until the rewrite is done.
    pub fn rewrite_aof(&self) {
        let _: String = query(&mut self.connect(), &["BGREWRITEAOF"]);
        let field = |name| self.info_field("persistence", name);
        let rewritten = wait_until(valgrind::startup_timeout(), || {
            field("aof_rewrite_in_progress").as_deref() == Some("0")
                && field("aof_rewrite_scheduled").as_deref() == Some("0")
                && field("aof_last_bgrewrite_status").as_deref() == Some("ok")
                && field("aof_rewrites").is_some_and(|count| count != "0")
        });
        assert!(rewritten, "the AOF rewrite did not finish");
    }

    /// A server started on a copy of this one's AOF (its `appendonlydir`, as it is now), with
    /// `appendonly yes`: what a restart from the AOF loads, on a fresh server.
    pub fn start_from_aof_copy(&self) -> Server {
        let mut builder = Server::builder().aof();
        for entry in fs::read_dir(self.dir().join("appendonlydir")).unwrap() {
            let path = entry.unwrap().path();
            let name = format!(
                "appendonlydir/{}",
                path.file_name().unwrap().to_string_lossy()
            );
            builder = builder.file(&name, &fs::read(&path).unwrap());
        }
        builder.start()
    }

    /// The AOF's contents (every file the manifest lists, in name order), lowercased.
    pub fn aof(&self) -> String {
        let mut files: Vec<_> = fs::read_dir(self.dir().join("appendonlydir"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| !path.to_string_lossy().ends_with(".manifest"))
            .collect();
        files.sort();
        let bytes: Vec<u8> = files
            .iter()
            .flat_map(|file| fs::read(file).unwrap())
            .collect();
        String::from_utf8_lossy(&bytes).to_lowercase()
    }

    /// Restarts it as [`Server::restart`] does, with `args` added to its command line.
    pub fn restart_with(&mut self, args: &[(&str, &str)]) {
        for (name, value) in args {
            self.builder = self.builder.clone().arg(name, value);
        }
        self.restart();
    }

    /// Stops the server (as a crash would: no save), if it runs, and starts it again on the
    /// same port and directory, waiting until it answers.
    pub fn restart(&mut self) {
        self.stop();
        for _ in 0..PORT_ATTEMPTS {
            match self.builder.launch(self.port, &self.dir) {
                Ok(process) => {
                    self.process = Some(process);
                    return;
                }
                Err(log) if log.contains("Address already in use") => {
                    thread::sleep(Duration::from_millis(200))
                }
                Err(log) => panic!("redis-server did not restart; its log:\n{log}"),
            }
        }
        panic!("the port stayed busy after the restart");
    }

    /// Sends the server the signal `signal` (`SIGSTOP` freezes it, `SIGCONT` thaws it).
    pub fn signal(&self, signal: libc::c_int) {
        if let Some(process) = &self.process {
            // SAFETY: signals a child process this harness started and has not reaped.
            unsafe { libc::kill(process.id() as libc::pid_t, signal) };
        }
    }

    /// Kills the server with SIGKILL, as a crash would; `restart` brings it back.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Stops the server: killed, or under valgrind terminated so that valgrind reports,
    /// and then any problem it found in the module fails the test.
    fn stop(&mut self) {
        if !valgrind::enabled() {
            return self.kill();
        }
        if let Some(mut process) = self.process.take() {
            valgrind::stop(&mut process);
            let problems = valgrind::module_problems(&self.dir);
            if !problems.is_empty() && !thread::panicking() {
                panic!(
                    "valgrind found problems in the module ({}):\n{}",
                    self.dir.display(),
                    problems.join("\n")
                );
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        if thread::panicking() {
            eprintln!(
                "--- log of the redis-server on port {} ({}) ---\n{}",
                self.port,
                self.dir.display(),
                self.log()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn read_log(dir: &Path) -> String {
    let mut log = fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    if let Ok(mut stderr) = fs::File::open(dir.join("stderr.log")) {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        if !text.is_empty() {
            log.push_str("\n--- stderr ---\n");
            log.push_str(&text);
        }
    }
    log
}

fn ping(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut con).is_ok()
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback port nothing listens on at the moment.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("no free loopback port")
}

fn fresh_dir() -> PathBuf {
    static SERVERS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-ratelimit-test-{}-{}",
        std::process::id(),
        SERVERS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A command built from `args`: the name first, then its arguments, as text or bytes.
pub fn command<A: AsRef<[u8]>>(args: &[A]) -> redis::Cmd {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0].as_ref()).unwrap());
    for arg in &args[1..] {
        cmd.arg(arg.as_ref());
    }
    cmd
}

/// Runs a command that must reply with integers, and returns them.
#[track_caller]
pub fn ints<A: AsRef<[u8]>>(con: &mut impl ConnectionLike, args: &[A]) -> Vec<i64> {
    command(args)
        .query(con)
        .unwrap_or_else(|error| panic!("{} failed: {error}", describe(args)))
}

/// Runs a command that must fail, and returns its error as the server sent it
/// (`ERR ...`, `WRONGTYPE ...`).
#[track_caller]
pub fn error<A: AsRef<[u8]>>(con: &mut impl ConnectionLike, args: &[A]) -> String {
    match command(args).query::<Value>(con) {
        Ok(value) => panic!("{} replied {value:?} instead of an error", describe(args)),
        Err(error) => match (error.code(), error.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_owned(),
            _ => panic!("{} failed without a server error: {error}", describe(args)),
        },
    }
}

/// Runs any command and returns its reply.
#[track_caller]
pub fn query<T: redis::FromRedisValue, A: AsRef<[u8]>>(
    con: &mut impl ConnectionLike,
    args: &[A],
) -> T {
    command(args)
        .query(con)
        .unwrap_or_else(|error| panic!("{} failed: {error}", describe(args)))
}

/// A key's raw value and absolute expiry (ms), or `None` when it does not exist.
pub fn snapshot(con: &mut Connection, key: &[u8]) -> Option<(Vec<u8>, i64)> {
    let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(con).unwrap();
    let expire_at: i64 = redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap();
    value.map(|value| (value, expire_at))
}

/// Waits (bounded) until `replicas` replicas have acknowledged every write made through
/// `con`. It must be the connection that wrote: `WAIT` waits for its own client's writes.
pub fn wait_for_replicas(con: &mut Connection, replicas: i64) {
    let acknowledged: i64 = query(con, &["WAIT", &replicas.to_string(), "10000"]);
    assert_eq!(
        acknowledged, replicas,
        "replicas did not acknowledge in time"
    );
}

/// Milliseconds since the epoch, by the server's clock.
pub fn server_millis(con: &mut Connection) -> i64 {
    server_micros(con) / 1_000
}

/// Microseconds since the epoch, by the server's clock: the real-time clock the module reads,
/// which a test's own monotonic clock need not keep pace with (a step or a slew of the
/// machine's time moves one and not the other).
pub fn server_micros(con: &mut Connection) -> i64 {
    let (seconds, micros): (i64, i64) = query(con, &["TIME"]);
    seconds * 1_000_000 + micros
}

/// Runs `write` and checks that it left `key` expiring `ttl_ms` after it ran, by the
/// server's clock: `PEXPIRETIME` lies between the server's time before the write plus
/// `ttl_ms` and its time after plus `ttl_ms` and the millisecond an expiry rounds up to. A
/// bound by what the server reports, not by the test's clock, so that it holds under
/// valgrind or on a busy machine.
pub fn assert_expires_after<R>(
    con: &mut Connection,
    key: &str,
    ttl_ms: i64,
    write: impl FnOnce(&mut Connection) -> R,
) -> R {
    let before = server_millis(con);
    let result = write(con);
    let after = server_millis(con);
    let expire_at: i64 = query(con, &["PEXPIRETIME", key]);
    assert!(
        (before + ttl_ms..=after + ttl_ms + 1).contains(&expire_at),
        "{key} expires at {expire_at}, not {ttl_ms} ms after the write (server time {before} to {after})"
    );
    result
}

/// Writes the server has counted since the last save.
pub fn changes(con: &mut Connection) -> i64 {
    let info: String = query(con, &["INFO", "persistence"]);
    info.lines()
        .find_map(|line| line.strip_prefix("rdb_changes_since_last_save:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `used_memory` growth per key over `keys` keys named `NNNNNNNN` (8 characters), each
/// made by one `command`.
pub fn bytes_per_key(
    con: &mut Connection,
    keys: usize,
    command: impl Fn(&str) -> redis::Cmd,
) -> f64 {
    bytes_per_key_after(con, keys, 1, command)[0]
}

/// `used_memory` growth per key over `keys` keys named `NNNNNNNN`, after each of `passes`
/// passes of `command` over all of them (from the second on, the same keys rewritten).
pub fn bytes_per_key_after(
    con: &mut Connection,
    keys: usize,
    passes: usize,
    command: impl Fn(&str) -> redis::Cmd,
) -> Vec<f64> {
    let before = used_memory(con);
    (0..passes)
        .map(|_| {
            let mut pipe = redis::pipe();
            for i in 0..keys {
                pipe.add_command(command(&format!("{i:08}"))).ignore();
            }
            let _: () = pipe.query(con).unwrap();
            (used_memory(con) - before) as f64 / keys as f64
        })
        .collect()
}

/// The least of three runs of `measure`, a cost read from `used_memory`: what the server holds
/// for a while besides the keys (a client's query buffer, a hash table until its rehash ends:
/// 128 KB at times, seen to outlast two agreeing readings) only ever adds to a reading.
pub fn least_of_three(mut measure: impl FnMut() -> f64) -> f64 {
    (0..3).map(|_| measure()).fold(f64::INFINITY, f64::min)
}

/// `used_memory` from `INFO memory`, without what the clients' buffers hold
/// (`mem_clients_normal`: a pipeline's query and reply buffers shrink on the server's own
/// schedule), once it has settled.
///
/// A keyspace that just grew may still be rehashing into a table twice the size, holding both
/// for a while; the server finishes in its next cron (every 100 ms), so the figure is read
/// until two readings 110 ms apart agree (a few times at most).
pub fn used_memory(con: &mut Connection) -> i64 {
    // Redis allocates a command's latency histogram (tens of KB) after its first call: the
    // first INFO's would land in whatever is measured next.
    let _: String = query(con, &["INFO", "memory"]);
    // Until two readings a cron tick apart agree (a rehash the cron finishes, a client's
    // buffers): bounded, 20 ticks.
    let mut reading = used_memory_now(con);
    for _ in 0..20 {
        thread::sleep(Duration::from_millis(110));
        let next = used_memory_now(con);
        if next == reading {
            break;
        }
        reading = next;
    }
    reading
}

fn used_memory_now(con: &mut Connection) -> i64 {
    let info: String = query(con, &["INFO", "memory"]);
    let field = |name: &str| -> i64 {
        let line = info.lines().find_map(|line| line.strip_prefix(name));
        line.unwrap().trim().parse().unwrap()
    };
    field("used_memory:") - field("mem_clients_normal:")
}

/// `INFO keyspace`'s keys and expires in db0 (zeros when it is empty).
pub fn keyspace(con: &mut Connection) -> (u64, u64) {
    let info: String = query(con, &["INFO", "keyspace"]);
    let Some(line) = info.lines().find_map(|line| line.strip_prefix("db0:")) else {
        return (0, 0);
    };
    let field = |name: &str| {
        line.split(',')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("keys"), field("expires"))
}

/// Checks what `COMMAND INFO`, `COMMAND GETKEYS` and `COMMAND DOCS` say about `command`:
/// `info` and `docs` words appear in them, and the key of `call` (a full call, key "user:1")
/// is found.
pub fn assert_command_metadata(con: &mut Connection, info: &[&str], call: &[&str], docs: &[&str]) {
    let command = call[0];
    let described = format!(
        "{:?}",
        query::<Value, _>(con, &["COMMAND", "INFO", command])
    );
    for expected in info {
        assert!(described.contains(expected), "{expected}: {described}");
    }
    let mut getkeys = vec!["COMMAND", "GETKEYS"];
    getkeys.extend_from_slice(call);
    let keys: Vec<String> = query(con, &getkeys);
    assert_eq!(keys, ["user:1"]);
    let documented = format!(
        "{:?}",
        query::<Value, _>(con, &["COMMAND", "DOCS", command])
    );
    for expected in docs {
        assert!(documented.contains(expected), "{expected}: {documented}");
    }
}

fn describe<A: AsRef<[u8]>>(args: &[A]) -> String {
    args.iter()
        .map(|arg| String::from_utf8_lossy(arg.as_ref()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
