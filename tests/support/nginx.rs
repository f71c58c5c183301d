//! Real nginx with its Lua module (Debian's `nginx`, `libnginx-mod-http-lua`,
//! `lua-nginx-redis`), started on a free loopback port in a directory of its own with the
//! Lua package of `clients/lua/lib` on its path, waited for with a bound, stopped on drop
//! (its whole process group), and its error log printed when a test fails. Plain HTTP/1.1
//! requests over `TcpStream`.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::{free_port, repository, wait_until};

/// The nginx binary: `$NGINX`, or `nginx` on the PATH (`make test` installs Debian's).
pub fn nginx_binary() -> PathBuf {
    std::env::var_os("NGINX").map_or_else(|| PathBuf::from("nginx"), PathBuf::from)
}

/// Where Debian keeps nginx's dynamic modules: `$NGINX_MODULES`, or `/usr/lib/nginx/modules`.
fn modules_dir() -> PathBuf {
    std::env::var_os("NGINX_MODULES")
        .map_or_else(|| PathBuf::from("/usr/lib/nginx/modules"), PathBuf::from)
}

/// The `lua_package_path` the tests give nginx: the package, the examples' own modules, and
/// where Debian keeps lua-resty-core and lua-nginx-redis.
pub fn lua_package_path() -> String {
    let root = repository();
    format!(
        "{}/clients/lua/lib/?.lua;{}/examples/nginx/lua/?.lua;/usr/share/lua/5.1/?.lua;;",
        root.display(),
        root.display()
    )
}

/// A running nginx.
pub struct Nginx {
    process: Option<Child>,
    port: u16,
    dir: PathBuf,
}

/// One HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Its status code.
    pub status: u16,
    /// Its header fields, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: String,
}

impl Response {
    /// The value of the header `name` (any case), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }
}

impl Nginx {
    /// Starts nginx with two workers and `http` as the body of its `http` block, in which
    /// `{listen}` stands for the address it listens on.
    pub fn start(http: &str) -> Nginx {
        Nginx::start_with(http, 2)
    }

    /// [`Nginx::start`] with `workers` worker processes.
    pub fn start_with(http: &str, workers: usize) -> Nginx {
        Nginx::launch(|dir, port| {
            config(
                dir,
                workers,
                &http.replace("{listen}", &format!("127.0.0.1:{port}")),
            )
        })
    }

    /// Starts nginx on a whole configuration file's text, as a user runs it (`nginx -p
    /// <prefix> -c nginx.conf`), with `edit` applied to it given the port to listen on (the
    /// prefix is a directory of the test's own).
    pub fn start_config(edit: impl Fn(u16) -> String) -> Nginx {
        Nginx::launch(|_, port| edit(port))
    }

    /// Writes the configuration `config` makes for a prefix and a port, and starts nginx on
    /// it in the foreground.
    fn launch(config: impl Fn(&Path, u16) -> String) -> Nginx {
        let mut last_log = String::new();
        for _ in 0..5 {
            let (port, dir) = (free_port(), fresh_dir());
            fs::create_dir_all(dir.join("tmp")).unwrap();
            fs::create_dir_all(dir.join("logs")).unwrap();
            fs::write(dir.join("nginx.conf"), config(&dir, port)).unwrap();
            let mut command = Command::new(nginx_binary());
            command
                .args(["-p", dir.to_str().unwrap(), "-c", "nginx.conf"])
                .args(["-g", "daemon off;"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(dir.join("stderr.log")).unwrap())
                .process_group(0);
            let mut process = command
                .spawn()
                .expect("nginx could not be run: is it installed? (`make test` installs it)");
            let mut exited = false;
            let ready = wait_until(Duration::from_secs(20), || {
                exited = matches!(process.try_wait(), Ok(Some(_)));
                exited || TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            let nginx = Nginx {
                process: Some(process),
                port,
                dir,
            };
            if ready && !exited {
                return nginx;
            }
            last_log = nginx.log();
            if !last_log.contains("Address already in use") {
                break;
            }
        }
        panic!("nginx did not start; its log:\n{last_log}");
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its error log (and stderr) so far.
    pub fn log(&self) -> String {
        let mut log = fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
        log.push_str(&fs::read_to_string(self.dir.join("logs/error.log")).unwrap_or_default());
        let stderr = fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
        if !stderr.is_empty() {
            log.push_str("\n--- stderr ---\n");
            log.push_str(&stderr);
        }
        log
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Response {
        request(self.port, "GET", path, &[], "")
    }

    /// `GET path` with header fields.
    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        request(self.port, "GET", path, headers, "")
    }

    /// `POST path` with `body`.
    pub fn post(&self, path: &str, body: &str) -> Response {
        request(self.port, "POST", path, &[], body)
    }

    /// Reloads its configuration as `nginx -s reload` does (SIGHUP to the master): new
    /// workers start, the old ones finish what they hold and exit; shared dicts are kept.
    pub fn reload(&self) {
        if let Some(process) = &self.process {
            // SAFETY: signals the master process this harness started and has not reaped.
            unsafe { libc::kill(process.id() as libc::pid_t, libc::SIGHUP) };
        }
    }

    /// The pids of its master's children (its workers, and old ones still finishing after a
    /// reload), from /proc.
    pub fn workers(&self) -> Vec<u32> {
        let Some(master) = self.process.as_ref().map(|process| process.id()) else {
            return Vec::new();
        };
        let Ok(entries) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                // The parent is the fourth field of stat, after the command in parentheses.
                fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| {
                        let (_, rest) = stat.rsplit_once(") ")?;
                        rest.split(' ').nth(1)?.parse::<u32>().ok()
                    })
                    == Some(master)
            })
            .collect()
    }

    /// Kills the master and every worker with SIGKILL, as a crash of the machine's nginx
    /// would: nothing runs its log phase.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            // SAFETY: signals the process group this harness made for its own child.
            unsafe { libc::kill(-(process.id() as libc::pid_t), libc::SIGKILL) };
            let _ = process.wait();
        }
    }

    /// Stops it gracefully (SIGQUIT, bounded), then kills what is left.
    fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let group = -(process.id() as libc::pid_t);
            // SAFETY: signals the process group this harness made for its own child.
            unsafe { libc::kill(group, libc::SIGQUIT) };
            let stopped = wait_until(Duration::from_secs(10), || {
                matches!(process.try_wait(), Ok(Some(_)))
            });
            // SAFETY: as above; the workers may outlive a master that did not wait for them.
            unsafe { libc::kill(group, libc::SIGKILL) };
            if !stopped {
                let _ = process.wait();
            }
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
        if thread::panicking() {
            eprintln!(
                "--- error log of the nginx on port {} ({}) ---\n{}",
                self.port,
                self.dir.display(),
                self.log()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The whole configuration: the Lua module loaded, the package on its path, `http` in the
/// `http` block.
fn config(dir: &Path, workers: usize, http: &str) -> String {
    let modules = modules_dir();
    let dir = dir.display();
    format!(
        "load_module {modules}/ndk_http_module.so;
load_module {modules}/ngx_http_lua_module.so;
master_process on;
worker_processes {workers};
error_log {dir}/error.log info;
pid {dir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    lua_package_path \"{path}\";
{http}
}}
",
        modules = modules.display(),
        path = lua_package_path(),
    )
}

fn fresh_dir() -> PathBuf {
    static NGINXES: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-ratelimit-nginx-{}-{}",
        std::process::id(),
        NGINXES.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// One HTTP/1.1 request to 127.0.0.1:`port`, on a new connection, within 30 s.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    try_request(port, method, path, headers, body, Duration::from_secs(30))
        .unwrap_or_else(|error| panic!("{method} {path} on port {port}: {error}"))
}

/// [`request`], or why it failed within `timeout`.
pub fn try_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> std::io::Result<Response> {
    let deadline = Instant::now() + timeout;
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if Instant::now() > deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no full answer",
            ));
        }
        match stream.read(&mut chunk)? {
            0 => break,
            read => raw.extend_from_slice(&chunk[..read]),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// A chunked body, joined.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}
