use super::*;
use crate::core::windows::Algorithm;

fn parse_words(words: &[&str]) -> Result<Parsed<MAX_LIMITERS>, CommandError> {
    let args: Vec<&[u8]> = words.iter().map(|word| word.as_bytes()).collect();
    let keys = numkeys(args.first().copied())?;
    parse(keys, &args[1..])
}

/// The error a call with `words` gets, from parsing or from building its limiters.
fn error(words: &[&str]) -> &'static str {
    let built = parse_words(words).and_then(|parsed| {
        parsed.params[..parsed.keys]
            .iter()
            .try_for_each(|params| params.unwrap().limiter(parsed.options.unit).map(|_| ()))
    });
    match built {
        Ok(()) => panic!("{words:?} parsed"),
        Err(error) => error.text(),
    }
}

#[test]
fn one_limiter_per_key_in_order_keywords_in_any_case() {
    let parsed = parse_words(&[
        "3", "a", "b", "c", "throttle", "4", "1", "60", "Window", "10", "60", "buckets", "6",
        "LOG", "3", "60", "2", "MS", "details",
    ])
    .unwrap();
    assert_eq!(parsed.keys, 3);
    assert!(parsed.details);
    assert_eq!(parsed.options.request.quantity, 2);
    assert_eq!(parsed.options.unit, Unit::Milliseconds);
    let limiters: Vec<Limiter> = parsed.params[..3]
        .iter()
        .map(|params| params.unwrap().limiter(Unit::Seconds).unwrap())
        .collect();
    let Limiter::Window(window) = limiters[1] else {
        panic!("{limiters:?}")
    };
    assert_eq!(
        window,
        crate::core::windows::WindowLimiter::new(10, 60, Unit::Seconds, Algorithm::Buckets(6))
            .unwrap()
    );
    assert!(matches!(limiters[0], Limiter::Throttle(_)));
    assert!(matches!(limiters[2], Limiter::Log(_)));
    // A quantity right after a window: not an algorithm, the quantity.
    let parsed = parse_words(&["1", "a", "WINDOW", "10", "60", "5", "REFUND"]).unwrap();
    assert_eq!(parsed.options.request.quantity, 5);
    assert_eq!(
        parsed.options.request.action,
        crate::core::request::Action::Refund
    );
    assert_eq!(
        parsed.params[0],
        Some(Params::Window(window::Params::parse(b"10", b"60").unwrap()))
    );
}

#[test]
fn every_mistake_has_its_own_error() {
    assert_eq!(error(&[]), "ERR wrong number of arguments");
    for numkeys in ["0", "17", "-1", "x", ""] {
        assert_eq!(
            error(&[numkeys, "a", "LOG", "1", "1"]),
            "ERR numkeys must be an integer from 1 to 16"
        );
    }
    assert_eq!(
        error(&["3", "a", "b"]),
        "ERR numkeys is more than the keys given"
    );
    assert_eq!(
        error(&["2", "a", "a", "LOG", "1", "1", "LOG", "1", "1"]),
        "ERR RL.ALL names the same key twice"
    );
    assert_eq!(
        error(&["2", "a", "b", "LOG", "1", "1"]),
        "ERR fewer limiters than keys: give one limiter per key"
    );
    assert_eq!(
        error(&["1", "a", "LOG", "1", "1", "LOG", "2", "2"]),
        "ERR more limiters than keys: give one limiter per key"
    );
    assert_eq!(
        error(&["1", "a", "BUCKET", "1", "1"]),
        "ERR unknown limiter: expected THROTTLE, WINDOW, LOG, LEASE or LOAD"
    );
    assert_eq!(
        error(&["1", "a", "THROTTLE", "1", "1"]),
        "ERR THROTTLE takes max_burst count period [WARMUP period]"
    );
    assert_eq!(
        error(&["2", "a", "b", "THROTTLE", "1", "1", "LOG", "1", "1"]),
        "ERR THROTTLE takes max_burst count period [WARMUP period]"
    );
    assert_eq!(
        error(&["1", "a", "WINDOW", "1"]),
        "ERR WINDOW takes limit window [FIXED|SLIDING|BUCKETS n|ANCHORED]"
    );
    assert_eq!(error(&["1", "a", "LOG", "1"]), "ERR LOG takes limit window");
    assert_eq!(
        error(&["1", "a", "LOG", "x", "1"]),
        "ERR limit is not an integer or out of range"
    );
    assert_eq!(
        error(&["1", "a", "THROTTLE", "1", "1", "1.5"]),
        "ERR period is not an integer or out of range"
    );
    assert_eq!(
        error(&["1", "a", "WINDOW", "1", "1", "BUCKETS", "0"]),
        "ERR BUCKETS must be an integer from 1 to 3600"
    );
    assert_eq!(
        error(&["1", "a", "LOG", "1", "1", "DETAILS", "DETAILS"]),
        CommandError::Syntax.text()
    );
    assert_eq!(
        error(&["1", "a", "LOG", "1", "1", "FIXED"]),
        CommandError::Syntax.text()
    );
    assert_eq!(
        error(&["1", "a", "LOG", "1", "1", "-2"]),
        "ERR quantity must not be negative"
    );
}

/// The errors that say what a limiter takes are rendered from the arguments `COMMAND DOCS`
/// gives, as is the grammar the module's documentation opens with for each of them.
#[test]
fn each_limiters_grammar_is_rendered_from_the_arguments() {
    let expected = [
        "ERR THROTTLE takes max_burst count period [WARMUP period]",
        "ERR WINDOW takes limit window [FIXED|SLIDING|BUCKETS n|ANCHORED]",
        "ERR LOG takes limit window",
        "ERR LEASE takes limit lease",
        "ERR LOAD takes priority: critical_plus, critical, sheddable_plus or sheddable (or 0 to 3)",
    ];
    for (index, message) in expected.iter().enumerate() {
        assert_eq!(takes(index).to_str().unwrap(), *message);
    }
    assert_eq!(
        unknown_limiter().to_str().unwrap(),
        "ERR unknown limiter: expected THROTTLE, WINDOW, LOG, LEASE or LOAD"
    );
    let docs: String = include_str!("../all.rs")
        .lines()
        .take_while(|line| line.starts_with("//!"))
        .map(|line| line.trim_start_matches("//!").trim())
        .collect::<Vec<_>>()
        .join(" ");
    for message in expected {
        let grammar = message
            .trim_start_matches("ERR ")
            .replacen(" takes ", " ", 1);
        let grammar = grammar.split(':').next().unwrap().replace('|', " | ");
        assert!(
            docs.contains(&format!("- `{grammar}`")),
            "the docs list `{grammar}`"
        );
    }
}
