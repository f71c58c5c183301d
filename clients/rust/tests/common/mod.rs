//! What the crate's tests share: the server they run against (`REDIS_URL`: a live server
//! with the module; `tests/clients.rs` in the repository starts one), unique keys, a port
//! that never answers, and a plain HTTP client.

#![allow(dead_code)] // Each test binary uses its part.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server the tests run against.
pub fn url() -> String {
    std::env::var("REDIS_URL").expect(
        "REDIS_URL must name a server with the module (the repository's tests/clients.rs \
         starts one and sets it)",
    )
}

pub fn client() -> redis::Client {
    redis::Client::open(url()).unwrap()
}

pub async fn connection() -> redis::aio::MultiplexedConnection {
    client().get_multiplexed_async_connection().await.unwrap()
}

/// A prefix of keys no other test uses.
pub fn unique(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "rs:{name}:{}:{nanos}:{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A loopback port nothing listens on.
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A port that accepts connections and never answers: a frozen server as its clients see
/// it. Counts the connections made to it.
pub struct BlackHole {
    pub port: u16,
    accepted: Arc<Mutex<Vec<TcpStream>>>,
}

impl BlackHole {
    pub fn start() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let kept = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                kept.lock().unwrap().push(stream);
            }
        });
        BlackHole { port, accepted }
    }

    pub fn connections(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }
}

/// Whether `condition` holds within `bound` (polled).
pub fn wait_until(bound: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + bound;
    while std::time::Instant::now() < end {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

/// An HTTP response: its status and fields (names in lower case).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` on `port` with `headers` (lines), over a connection of its own.
pub fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Response { status, headers }
}

/// A service whose load policy sheds the sheddable classes at level 1 (a factor `hot` at
/// 0.5), and one instance reporting it hot for a minute: its key.
pub async fn hot_service(name: &str) -> String {
    let service = unique(name);
    let mut admin = connection().await;
    let _: String = redis::cmd("RL.LOAD.POLICY")
        .arg(&service)
        .arg(&["HOLD", "0", "FACTOR", "hot", "MAX", "LEVEL", "hot", "0.5"][..])
        .arg(&["SHARES", "1", "1", "0", "0"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("RL.LOAD.REPORT")
        .arg(&service)
        .arg(&["hot-1", "60000", "hot", "1"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    service
}

/// A no-load latency of 5 ms, then a queue that stands: 20 requests in flight, and every
/// one of the next interval taking 100 ms (over four times the target of 10 ms).
pub fn flood<C>(shedder: &ratelimit_module::LoadShedder<C>, now: &std::sync::atomic::AtomicU64) {
    use std::sync::atomic::Ordering::SeqCst;
    let ticket = shedder.admit(ratelimit_module::Priority::Critical).unwrap();
    now.fetch_add(5, SeqCst);
    shedder.finished(ticket, 200);
    let tickets: Vec<_> = (0..20)
        .map(|_| {
            shedder
                .admit(ratelimit_module::Priority::Critical)
                .expect("under the limit of 20")
        })
        .collect();
    now.fetch_add(100, SeqCst);
    for ticket in &tickets[..10] {
        shedder.finished(*ticket, 200);
    }
    now.fetch_add(100, SeqCst);
    shedder.finished(tickets[10], 200);
}

/// A clock the test moves: the milliseconds it reads, and the clock that reads them.
pub fn manual_clock() -> (
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    ratelimit_module::Clock,
) {
    let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read = now.clone();
    let clock: ratelimit_module::Clock = std::sync::Arc::new(move || {
        std::time::Duration::from_millis(read.load(std::sync::atomic::Ordering::SeqCst))
    });
    (now, clock)
}
