//! A replication link to another machine, on loopback: a TCP proxy between a replica and its
//! master that holds every chunk a while each way. When the master's side closes, what the
//! link still holds is dropped, as when the master's machine fails: only what had reached
//! the replica survives.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A proxy on a loopback port, forwarding to a master's port with a delay.
pub struct DelayedLink {
    port: u16,
}

impl DelayedLink {
    /// A link to the server on `master_port`, each chunk held `delay` each way.
    pub fn start(master_port: u16, delay: Duration) -> DelayedLink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for replica in listener.incoming() {
                let Ok(replica) = replica else { return };
                let Ok(master) = TcpStream::connect(("127.0.0.1", master_port)) else {
                    // The master is gone: the replica's retries find nothing.
                    let _ = replica.shutdown(Shutdown::Both);
                    continue;
                };
                for (from, to) in [
                    (master.try_clone().unwrap(), replica.try_clone().unwrap()),
                    (replica, master),
                ] {
                    thread::spawn(move || pump(from, to, delay));
                }
            }
        });
        DelayedLink { port }
    }

    /// The port a replica connects to instead of the master's.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Chunks read and not yet delivered, with when each is due; `None` once the source closed.
type Held = Arc<(Mutex<Option<VecDeque<(Instant, Vec<u8>)>>>, Condvar)>;

/// Forwards `from` to `to`, each chunk `delay` after it was read; drops what it holds when
/// `from` closes.
fn pump(mut from: TcpStream, to: TcpStream, delay: Duration) {
    let held: Held = Arc::new((Mutex::new(Some(VecDeque::new())), Condvar::new()));
    let delivering = held.clone();
    let mut to_writer = to.try_clone().unwrap();
    thread::spawn(move || loop {
        let (lock, ready) = &*delivering;
        let mut queue = lock.lock().unwrap();
        let chunk = loop {
            match queue.as_mut() {
                None => return,
                Some(queue_now) => match queue_now.pop_front() {
                    Some(chunk) => break chunk,
                    None => queue = ready.wait(queue).unwrap(),
                },
            }
        };
        drop(queue);
        let (due, bytes) = chunk;
        thread::sleep(due.saturating_duration_since(Instant::now()));
        // Dropped if the source closed meanwhile: it never reached the other side.
        if lock.lock().unwrap().is_none() || to_writer.write_all(&bytes).is_err() {
            return;
        }
    });
    let mut buffer = vec![0; 1 << 16];
    loop {
        match from.read(&mut buffer) {
            Ok(read) if read > 0 => {
                let (lock, ready) = &*held;
                if let Some(queue) = lock.lock().unwrap().as_mut() {
                    queue.push_back((Instant::now() + delay, buffer[..read].to_vec()));
                }
                ready.notify_one();
            }
            _ => break,
        }
    }
    let (lock, ready) = &*held;
    *lock.lock().unwrap() = None;
    ready.notify_one();
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
