//! bench/overload.py's load generator. Reads a schedule on stdin, one request a line:
//! `<seconds after the start> <port> <priority>`; sends each at its instant, on a new
//! connection (`GET / HTTP/1.0` with `X-Priority`), and gives up after `TIMEOUT` (the first
//! argument, in seconds). Writes one line a request, in the schedule's order:
//! `<status> <latency in seconds>`, the status 0 when the request was given up on or failed,
//! the latency from the instant it was due (so that a late start counts against it, as it
//! would for a client).

use std::io::{BufRead, Write};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, timeout, Instant};

struct Due {
    at: Duration,
    port: u16,
    priority: String,
}

fn schedule() -> Vec<Due> {
    std::io::stdin()
        .lock()
        .lines()
        .map_while(Result::ok)
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut words = line.split_whitespace();
            let mut next = || words.next().expect("<seconds> <port> <priority>");
            let at = Duration::from_secs_f64(next().parse().expect("seconds"));
            let port = next().parse().expect("a port");
            Due {
                at,
                port,
                priority: next().to_owned(),
            }
        })
        .collect()
}

/// One request's status: 0 when it failed.
async fn exchange(port: u16, priority: &str) -> u16 {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return 0;
    };
    let request = format!("GET / HTTP/1.0\r\nX-Priority: {priority}\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return 0;
    }
    let mut response = Vec::new();
    if stream.read_to_end(&mut response).await.is_err() {
        return 0;
    }
    std::str::from_utf8(&response)
        .ok()
        .and_then(|text| text.split(' ').nth(1))
        .and_then(|status| status.parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let limit: f64 = std::env::args()
        .nth(1)
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or(2.0);
    let limit = Duration::from_secs_f64(limit);
    let due = schedule();
    let began = Instant::now();
    let mut requests = Vec::with_capacity(due.len());
    for one in due {
        let at = began + one.at;
        sleep_until(at).await;
        requests.push(tokio::spawn(async move {
            let status = timeout(limit, exchange(one.port, &one.priority))
                .await
                .unwrap_or(0);
            (status, at.elapsed())
        }));
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for request in requests {
        let (status, latency) = request.await.unwrap_or((0, limit));
        writeln!(out, "{status} {:.6}", latency.as_secs_f64()).unwrap();
    }
}
