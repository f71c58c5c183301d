//! Running the servers under valgrind's memcheck (`make valgrind`, which sets
//! `RATELIMIT_VALGRIND=1`): every server the tests start runs inside valgrind, with
//! jemalloc's allocation functions replaced by valgrind's so that Redis' heap (and so the
//! module's, which Redis allocates) is tracked. A server is stopped with SIGTERM so that
//! valgrind writes its report, and any error or definite leak whose stack passes through
//! the module fails the test. Redis' own known report (`lzf_compress` reading its hash table
//! uninitialised, by design) is suppressed by `valgrind.supp`.

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use super::wait_until;

/// How the module's frames appear in valgrind's stacks: its file, or its crate's symbols.
const MODULE_FRAMES: [&str; 2] = ["libredis_ratelimit", "redis_ratelimit::"];

/// Whether the servers run under valgrind.
pub fn enabled() -> bool {
    std::env::var_os("RATELIMIT_VALGRIND").is_some_and(|value| !value.is_empty() && value != "0")
}

/// How much longer the durations of a test that runs on real time are made under valgrind,
/// where a call takes milliseconds instead of microseconds: the same checks, at a pace the
/// slowed server keeps.
pub fn time_scale() -> i64 {
    if enabled() {
        10
    } else {
        1
    }
}

/// Whether a test that measures what keys cost in memory is left out: under valgrind the
/// server's allocations go through valgrind's allocator, which has none of jemalloc's size
/// classes, so the figures are not the server's; and writing the test's 10,000 to 100,000
/// keys at valgrind's pace takes minutes. The keys are written by the same code the other
/// tests run under valgrind. Says so on the test's output when it does.
pub fn leaves_out_memory_measurement() -> bool {
    if enabled() {
        eprintln!("left out under valgrind: it measures jemalloc's allocations");
    }
    enabled()
}

/// How long a server may take to answer: valgrind makes it ten times slower or more.
pub fn startup_timeout() -> Duration {
    Duration::from_secs(if enabled() { 120 } else { 20 })
}

/// The command that runs `server` for a test whose data lives in `dir`.
pub fn server_command(server: &Path, dir: &Path) -> Command {
    if !enabled() {
        return Command::new(server);
    }
    let mut command = Command::new("valgrind");
    command.args([
        "--tool=memcheck",
        "--soname-synonyms=somalloc=libjemalloc.so*",
        "--leak-check=full",
        "--show-leak-kinds=definite",
        "--errors-for-leak-kinds=definite",
        "--num-callers=40",
    ]);
    // Known reports in Redis itself (see the file).
    command.arg(format!(
        "--suppressions={}",
        super::repository()
            .join("tests/support/valgrind.supp")
            .display()
    ));
    command.arg(format!(
        "--log-file={}",
        dir.join("valgrind.%p.log").display()
    ));
    command.arg(server);
    command
}

/// Stops `process` so that valgrind writes its report: SIGTERM, then a bounded wait
/// (SIGKILL if it does not exit).
pub fn stop(process: &mut Child) {
    // SAFETY: signals a child process this harness started and has not reaped.
    unsafe { libc::kill(process.id() as libc::pid_t, libc::SIGTERM) };
    let exited = wait_until(Duration::from_secs(120), || {
        matches!(process.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = process.kill();
    }
    let _ = process.wait();
}

/// The reports in `dir` (one per server process) that show a problem in the module: an
/// invalid access, a use of uninitialised memory, or a definite leak, with the module in
/// its stack.
pub fn module_problems(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("valgrind.") {
            continue;
        }
        let report = fs::read_to_string(entry.path()).unwrap_or_default();
        // Records are separated by lines holding only the `==pid==` prefix.
        let mut record = String::new();
        for line in report.lines() {
            let text = line.split_once("== ").map_or("", |(_, text)| text);
            if text.trim().is_empty() {
                if in_module(&record) {
                    problems.push(std::mem::take(&mut record));
                }
                record.clear();
            } else {
                record.push_str(line);
                record.push('\n');
            }
        }
    }
    problems
}

/// Whether a record's stack passes through the module.
fn in_module(record: &str) -> bool {
    record.lines().any(|line| {
        (line.contains(" at 0x") || line.contains(" by 0x"))
            && MODULE_FRAMES.iter().any(|frame| line.contains(frame))
    })
}
