//! Every `redis-cli` transcript in README.md and docs/ replayed against a live server, so the
//! documentation cannot drift from what the module does. The rules, also told to readers in
//! docs/README.md:
//!
//! - A transcript is a ```` ```text ```` block whose first line starts with the prompt
//!   `127.0.0.1:6379> `. Each runs, command by command, on a server of its own, started
//!   empty with the module loaded.
//! - Each reply must read exactly as `redis-cli` prints it, except for what time decides:
//!   - the time fields, `retry_after` and `reset_after` (the 4th and 5th integers of a limiter
//!     command's reply, and of each limiter's own reply after `DETAILS`), and what `TTL` and
//!     `PTTL` answer: `-1` and `0` match themselves; a positive value shown is what the
//!     transcript's first instant gives, and the server's may be up to 2 seconds less, in the
//!     command's unit (time only passes); where an `RL.WINDOW` window is involved, aligned to
//!     the clock, any value from 1 up to the one shown matches;
//!   - a lease id (the 6th integer of `RL.ACQUIRE`'s reply, and of `RL.ALL`'s with a `LEASE`)
//!     shown positive matches any positive id, and stands for it in the commands after;
//!   - an instant (the `since` of `RL.LOAD.STATUS`) shown positive matches any positive
//!     instant.

mod support;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use redis::{Connection, Value};
use support::{repository, Server};

const PROMPT: &str = "127.0.0.1:6379> ";

/// The commands whose reply is the limiter's five integers (or six, with a lease id).
const LIMITER_COMMANDS: &[&str] = &[
    "CL.THROTTLE",
    "CL.THROTTLE_RO",
    "RL.WINDOW",
    "RL.WINDOW_RO",
    "RL.LOG",
    "RL.LOG_RO",
    "RL.ALL",
    "RL.ALL_RO",
    "RL.ACQUIRE",
    "RL.ACQUIRE_RO",
];

/// One transcript: where it is, and its commands with the reply lines shown for each.
struct Transcript {
    file: PathBuf,
    line: usize,
    steps: Vec<(String, Vec<String>)>,
}

/// What a line of a reply holds, for matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Exact,
    Time,
    LeaseId,
    Instant,
}

/// How much less than shown a positive time may be, for a command line: 2 seconds in its
/// unit; `None` when a clock-aligned window is involved (any value down to 1).
fn time_slack(arguments: &[String]) -> Option<i64> {
    let name = arguments[0].to_uppercase();
    let has = |word: &str| arguments.iter().any(|a| a.eq_ignore_ascii_case(word));
    if name.starts_with("RL.WINDOW") || (name.starts_with("RL.ALL") && has("WINDOW")) {
        return None;
    }
    Some(match name.as_str() {
        "PTTL" => 2_000,
        "TTL" => 2,
        _ if has("MS") => 2_000,
        _ if has("US") => 2_000_000,
        _ => 2,
    })
}

/// The Markdown files: README.md and everything under docs/.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![repository().join("README.md")];
    walk(&repository().join("docs"), &mut files);
    files
}

/// The transcripts of one Markdown text.
fn transcripts(file: &Path, text: &str) -> Vec<Transcript> {
    let mut found = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        if line.trim_end() != "```text" {
            continue;
        }
        let block: Vec<&str> = lines
            .by_ref()
            .map(|(_, line)| line)
            .take_while(|line| line.trim_end() != "```")
            .collect();
        if !block.first().is_some_and(|first| first.starts_with(PROMPT)) {
            continue;
        }
        let mut steps: Vec<(String, Vec<String>)> = Vec::new();
        for line in block {
            match line.strip_prefix(PROMPT) {
                Some(command) => steps.push((command.to_owned(), Vec::new())),
                None => steps.last_mut().unwrap().1.push(line.trim_end().to_owned()),
            }
        }
        found.push(Transcript {
            file: file.to_owned(),
            line: number + 2,
            steps,
        });
    }
    found
}

/// Splits a command line as `redis-cli` does: on spaces, with "double" (escapes allowed) and
/// 'single' quotes.
fn split_arguments(line: &str) -> Vec<Vec<u8>> {
    let mut arguments = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let Some(&first) = chars.peek() else {
            return arguments;
        };
        let mut argument = String::new();
        if first == '"' || first == '\'' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' if first == '"' => match chars.next() {
                        Some('n') => argument.push('\n'),
                        Some('t') => argument.push('\t'),
                        Some(other) => argument.push(other),
                        None => break,
                    },
                    c if c == first => break,
                    c => argument.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                argument.push(c);
                chars.next();
            }
        }
        arguments.push(argument.into_bytes());
    }
}

/// A bulk string as `redis-cli` shows it: quoted, with escapes.
fn quoted(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for &byte in bytes {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(byte as char),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push('"');
    out
}

/// The reply as `redis-cli` prints it to a terminal, one line per scalar, each with its role.
/// `delayed`: the call has `DELAY`, whose wait (the 6th integer) is a time; `leased`: the call
/// takes a lease (`RL.ACQUIRE`, `RL.ALL ... LEASE`), whose id is the 6th integer.
fn format(value: &Value, command: &str, delayed: bool, leased: bool) -> Vec<(String, Role)> {
    let limiter = LIMITER_COMMANDS.contains(&command);
    let scalar_role = match command {
        "TTL" | "PTTL" => Role::Time,
        _ => Role::Exact,
    };
    // The counts commands: their times (how long a count lasts) at 2 and 4, and at 2 and 3.
    let times: &[usize] = match command {
        "RL.WINDOW.COUNTS" => &[1, 3],
        "RL.LOG.COUNTS" => &[1, 2],
        _ => &[],
    };
    // RL.LOAD.STATUS: `since`, an instant, is its 4th item.
    if let ("RL.LOAD.STATUS", Value::Array(items)) = (command, value) {
        let mut lines = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let mut current = String::new();
            let width = items.len().to_string().len();
            current.push_str(&format!("{:>width$}) ", i + 1));
            let role = if i == 3 { Role::Instant } else { Role::Exact };
            let prefix = " ".repeat(width + 2);
            format_into(
                item,
                &prefix,
                false,
                role,
                &mut current,
                &mut lines,
                (false, false),
            );
        }
        return lines;
    }
    if let (false, Value::Array(items)) = (times.is_empty(), value) {
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let width = items.len().to_string().len();
                let text = match item {
                    Value::Int(n) => format!("{:>width$}) (integer) {n}", i + 1),
                    other => format!("{:>width$}) {other:?}", i + 1),
                };
                (
                    text,
                    if times.contains(&i) {
                        Role::Time
                    } else {
                        Role::Exact
                    },
                )
            })
            .collect();
    }
    let mut lines = Vec::new();
    let mut current = String::new();
    format_into(
        value,
        "",
        limiter,
        scalar_role,
        &mut current,
        &mut lines,
        (delayed, leased),
    );
    lines
}

/// Appends `value` to `current` (what its line has so far) and the lines it completes to
/// `lines`, following redis-cli's cliFormatReplyTTY: an array's first element continues the
/// parent's line, the others start with `prefix`, each with its index right-aligned.
fn format_into(
    value: &Value,
    prefix: &str,
    limiter: bool,
    role: Role,
    current: &mut String,
    lines: &mut Vec<(String, Role)>,
    (delayed, leased): (bool, bool),
) {
    let mut finish = |text: String, role: Role, current: &mut String| {
        current.push_str(&text);
        lines.push((std::mem::take(current), role));
    };
    match value {
        Value::Nil => finish("(nil)".into(), Role::Exact, current),
        Value::Int(n) => finish(format!("(integer) {n}"), role, current),
        Value::BulkString(bytes) => finish(quoted(bytes), Role::Exact, current),
        Value::SimpleString(text) => finish(text.clone(), Role::Exact, current),
        Value::Okay => finish("OK".into(), Role::Exact, current),
        Value::ServerError(error) => {
            let text = match error.details() {
                Some(details) => format!("(error) {} {details}", error.code()),
                None => format!("(error) {}", error.code()),
            };
            finish(text, Role::Exact, current)
        }
        Value::Array(items) if items.is_empty() => {
            finish("(empty array)".into(), Role::Exact, current)
        }
        Value::Array(items) => {
            let width = items.len().to_string().len();
            let nested_prefix = format!("{prefix}{}", " ".repeat(width + 2));
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    current.push_str(prefix);
                }
                current.push_str(&format!("{:>width$}) ", i + 1));
                // A limiter's reply: its times at 4 and 5, a lease id at 6, and after
                // DETAILS, each limiter's own five at 6 on, laid out the same.
                let item_role = match (limiter, i, item) {
                    (true, 3 | 4, Value::Int(_)) => Role::Time,
                    (true, 5, Value::Int(_)) if leased => Role::LeaseId,
                    (true, 5, Value::Int(_)) if delayed => Role::Time,
                    _ => Role::Exact,
                };
                let nested_limiter = limiter && matches!(item, Value::Array(_));
                format_into(
                    item,
                    &nested_prefix,
                    nested_limiter,
                    item_role,
                    current,
                    lines,
                    (delayed, leased),
                );
            }
        }
        other => finish(format!("{other:?}"), Role::Exact, current),
    }
}

/// The integer at the end of a `(integer) N` line, and what comes before it.
fn integer_line(line: &str) -> Option<(&str, i64)> {
    let (head, number) = line.rsplit_once("(integer) ")?;
    Some((head, number.parse().ok()?))
}

/// Whether an actual line matches the line shown, by its role (with `slack` for times); a
/// lease id is recorded.
fn matches(
    shown: &str,
    actual: &str,
    role: Role,
    slack: Option<i64>,
    ids: &mut HashMap<String, String>,
) -> bool {
    match role {
        Role::Exact => shown == actual,
        Role::Time => match (integer_line(shown), integer_line(actual)) {
            (Some((head, shown)), Some((actual_head, actual))) if head == actual_head => {
                if shown <= 0 {
                    actual == shown
                } else {
                    let least = slack.map_or(1, |slack| (shown - slack).max(1));
                    (least..=shown).contains(&actual)
                }
            }
            _ => false,
        },
        Role::Instant => match (integer_line(shown), integer_line(actual)) {
            (Some((head, shown)), Some((actual_head, actual))) if head == actual_head => {
                shown == actual || (shown > 0 && actual > 0)
            }
            _ => false,
        },
        Role::LeaseId => match (integer_line(shown), integer_line(actual)) {
            (Some((head, shown)), Some((actual_head, actual))) if head == actual_head => {
                if shown > 0 && actual > 0 {
                    ids.insert(shown.to_string(), actual.to_string());
                    true
                } else {
                    shown == actual
                }
            }
            _ => false,
        },
    }
}

/// Runs one command line, with the lease ids shown replaced by the ones the server gave:
/// the command's name, its time slack, and the reply.
fn run(
    con: &mut Connection,
    line: &str,
    ids: &HashMap<String, String>,
) -> (String, Option<i64>, Value) {
    let mut arguments = split_arguments(line);
    let words: Vec<String> = arguments
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let slack = time_slack(&words);
    for argument in arguments.iter_mut().skip(1) {
        if let Some(id) = std::str::from_utf8(argument).ok().and_then(|a| ids.get(a)) {
            *argument = id.clone().into_bytes();
        }
    }
    let name = String::from_utf8_lossy(&arguments[0]).to_uppercase();
    let value = match support::command(&arguments).query::<Value>(con) {
        Ok(value) => value,
        // An error reply: shown as `redis-cli` does, as a status line of its own.
        Err(error) => match (error.code(), error.detail()) {
            (Some(code), Some(detail)) => Value::SimpleString(format!("(error) {code} {detail}")),
            (Some(code), None) => Value::SimpleString(format!("(error) {code}")),
            _ => panic!("`{line}` failed without a server error: {error}"),
        },
    };
    (name, slack, value)
}

/// Replays a transcript; the first difference, described, if any.
fn replay(transcript: &Transcript) -> Result<(), String> {
    let server = Server::start();
    let mut con = server.connect();
    let mut ids = HashMap::new();
    for (line, shown) in &transcript.steps {
        let (name, slack, value) = run(&mut con, line, &ids);
        let delayed = line
            .split_whitespace()
            .any(|word| word.eq_ignore_ascii_case("DELAY"));
        let leased = name.starts_with("RL.ACQUIRE")
            || (name.starts_with("RL.ALL")
                && line
                    .split_whitespace()
                    .any(|word| word.eq_ignore_ascii_case("LEASE")));
        let actual = format(&value, &name, delayed, leased);
        let fits = actual.len() == shown.len()
            && actual
                .iter()
                .zip(shown)
                .all(|((actual, role), shown)| matches(shown, actual, *role, slack, &mut ids));
        if !fits {
            let actual: Vec<&str> = actual.iter().map(|(line, _)| line.as_str()).collect();
            return Err(format!(
                "{}:{}: `{line}` replied\n{}\ninstead of\n{}",
                transcript.file.display(),
                transcript.line,
                actual.join("\n"),
                shown.join("\n")
            ));
        }
    }
    Ok(())
}

#[test]
fn every_transcript_in_the_docs_replays_on_a_live_server() {
    let mut count = 0;
    let mut failures = Vec::new();
    for file in documents() {
        let text = fs::read_to_string(&file).unwrap();
        for transcript in transcripts(&file, &text) {
            count += 1;
            if let Err(failure) = replay(&transcript) {
                failures.push(failure);
            }
        }
    }
    assert!(count >= 15, "only {count} transcripts found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The lines of a Markdown text outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// GitHub's anchor for a heading: lowercased, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings.
fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| slug(heading.trim_start_matches('#')))
        .collect()
}

/// The targets of a text's inline links, `[...](target)`, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            targets.push(rest[..end].to_owned());
            rest = &rest[end..];
        }
    }
    targets
}

#[test]
fn every_link_in_the_docs_leads_somewhere() {
    let mut files = documents();
    for extra in ["CHANGELOG.md", "BENCHMARKS.md", "examples/README.md"] {
        files.push(repository().join(extra));
    }
    for package in fs::read_dir(repository().join("clients")).unwrap() {
        let readme = package.unwrap().path().join("README.md");
        if readme.exists() {
            files.push(readme);
        }
    }
    let mut broken = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        for target in link_targets(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if !anchor.is_empty() {
                let target_text = fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&target_text).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_transcript_that_differs_is_caught() {
    let good = "```text\n127.0.0.1:6379> CL.THROTTLE k 4 1 60\n1) (integer) 0\n2) (integer) 5\n3) (integer) 4\n4) (integer) -1\n5) (integer) 60\n```\n";
    let found = transcripts(Path::new("self-test"), good);
    assert_eq!(found.len(), 1);
    assert_eq!(replay(&found[0]), Ok(()));
    // A wrong count, a time longer or shorter than the server's, a wrong -1: each caught.
    for wrong in [
        good.replace("3) (integer) 4", "3) (integer) 3"),
        good.replace("5) (integer) 60", "5) (integer) 65"),
        good.replace("5) (integer) 60", "5) (integer) 59"),
        good.replace("4) (integer) -1", "4) (integer) 0"),
    ] {
        let found = transcripts(Path::new("self-test"), &wrong);
        assert!(replay(&found[0]).is_err(), "not caught:\n{wrong}");
    }
}

#[test]
fn replies_read_as_redis_cli_prints_them() {
    let nested = Value::Array(vec![
        Value::Int(0),
        Value::Array(vec![Value::Int(1), Value::BulkString(b"a\"b\n".to_vec())]),
        Value::Nil,
    ]);
    let lines: Vec<String> = format(&nested, "X", false, false)
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    assert_eq!(
        lines,
        [
            "1) (integer) 0",
            "2) 1) (integer) 1",
            "   2) \"a\\\"b\\n\"",
            "3) (nil)"
        ]
    );
    let ten = Value::Array((0..10).map(Value::Int).collect());
    let lines: Vec<String> = format(&ten, "X", false, false)
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    assert_eq!(
        (lines[0].as_str(), lines[9].as_str()),
        (" 1) (integer) 0", "10) (integer) 9")
    );
    assert_eq!(
        split_arguments(r#"SET "a b" 'c d' e"#),
        [
            b"SET".to_vec(),
            b"a b".to_vec(),
            b"c d".to_vec(),
            b"e".to_vec()
        ]
    );
}
