//! clients/conformance.json, the table every client package is tested against: the words
//! each limiter spec and option must produce, and the result and HTTP fields each reply must
//! give (no server). Read from the repository's checkout.

use std::path::Path;
use std::time::Duration;

use ratelimit_module::{
    command_words, fields, result, Algorithm, Limiter, Options, Priority, RateLimit,
};
use redis::Value;
use serde_json::Value as Json;

fn table() -> Json {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn seconds(value: &Json) -> Duration {
    Duration::from_secs_f64(value.as_f64().unwrap())
}

fn number(spec: &Json, name: &str) -> u64 {
    spec[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} of {spec}"))
}

fn text(value: &Json) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{value}"))
        .to_owned()
}

fn given<'a>(spec: &'a Json, name: &str) -> Option<&'a Json> {
    spec.get(name).filter(|value| !value.is_null())
}

fn limiter(spec: &Json) -> Limiter {
    let key = text(&spec["key"]);
    let limiter = match spec["kind"].as_str().unwrap() {
        "throttle" => {
            let mut one = Limiter::throttle(
                key,
                number(spec, "max_burst"),
                number(spec, "count"),
                seconds(&spec["period"]),
            );
            if let Some(warmup) = given(spec, "warmup") {
                one = one.warmup(seconds(warmup));
            }
            one
        }
        "window" => {
            let one = Limiter::window(key, number(spec, "limit"), seconds(&spec["window"]));
            let algorithm = given(spec, "algorithm").map(text);
            let algorithm = match algorithm.as_deref() {
                None | Some("SLIDING") => Algorithm::Sliding,
                Some("FIXED") => Algorithm::Fixed,
                Some("ANCHORED") => Algorithm::Anchored,
                Some(buckets) => Algorithm::Buckets(
                    buckets
                        .strip_prefix("BUCKETS ")
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("{buckets}")),
                ),
            };
            one.algorithm(algorithm)
        }
        "log" => Limiter::log(key, number(spec, "limit"), seconds(&spec["window"])),
        "load" => Limiter::load(
            key,
            Priority::parse(given(spec, "priority").and_then(Json::as_str).unwrap_or("")),
        ),
        other => panic!("a limiter kind the table has and this crate has not: {other}"),
    };
    match given(spec, "name") {
        Some(name) => limiter.named(text(name)),
        None => limiter,
    }
}

fn options(spec: &Json) -> Options {
    let mut options = Options::new();
    let flag = |name: &str| given(spec, name).and_then(Json::as_bool) == Some(true);
    if given(spec, "quantity").is_some() {
        options = options.quantity(number(spec, "quantity"));
    }
    if flag("refund") {
        options = options.refund();
    }
    if let Some(block) = given(spec, "block") {
        options = options.block(seconds(block));
    }
    if let Some(delay) = given(spec, "delay") {
        options = options.delay(seconds(delay));
    }
    if flag("at_most") {
        options = options.at_most();
    }
    if flag("force") {
        options = options.force();
    }
    if flag("read_only") {
        options = options.read_only();
    }
    options
}

fn reply(json: &Json) -> Value {
    match json {
        Json::Array(items) => Value::Array(items.iter().map(reply).collect()),
        other => Value::Int(other.as_i64().unwrap_or_else(|| panic!("{other}"))),
    }
}

fn check_result(got: &RateLimit, wanted: &Json, case: &str) {
    let seconds_of = |d: Duration| d.as_secs_f64();
    for (name, value) in wanted.as_object().unwrap() {
        match name.as_str() {
            "allowed" => assert_eq!(Some(got.allowed), value.as_bool(), "{case}"),
            "limit" => assert_eq!(Some(got.limit), value.as_i64(), "{case}"),
            "remaining" => assert_eq!(Some(got.remaining), value.as_i64(), "{case}"),
            "retry_after" => assert_eq!(got.retry_after.map(seconds_of), value.as_f64(), "{case}"),
            "reset_after" => {
                assert_eq!(Some(seconds_of(got.reset_after)), value.as_f64(), "{case}")
            }
            "wait" => assert_eq!(Some(seconds_of(got.wait)), value.as_f64(), "{case}"),
            "granted" => assert_eq!(got.granted, value.as_u64(), "{case}"),
            "shed_level" => assert_eq!(Some(got.shed_level), value.as_i64(), "{case}"),
            "each" => {
                let each = value.as_array().unwrap();
                assert_eq!(got.each.len(), each.len(), "{case}");
                for (one, wanted) in got.each.iter().zip(each) {
                    check_result(one, wanted, case);
                }
            }
            other => panic!("a result field the table has and this crate has not: {other}"),
        }
    }
}

#[test]
fn every_spec_builds_its_words() {
    let table = table();
    let cases = table["commands"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let limiters: Vec<Limiter> = case["limiters"]
            .as_array()
            .unwrap()
            .iter()
            .map(limiter)
            .collect();
        let words = command_words(&limiters, &options(&case["options"]));
        let wanted: Vec<String> = case["words"].as_array().unwrap().iter().map(text).collect();
        assert_eq!(words, wanted, "{case}");
    }
}

#[test]
fn every_reply_gives_its_result_and_fields() {
    let table = table();
    for case in table["replies"].as_array().unwrap() {
        let limiters: Vec<Limiter> = case["limiters"]
            .as_array()
            .unwrap()
            .iter()
            .map(limiter)
            .collect();
        let options = options(&case["options"]);
        let got = result(&reply(&case["reply"]), &limiters, &options).unwrap();
        let name = case.to_string();
        check_result(&got, &case["result"], &name);
        let fields: Vec<(String, String)> = fields(&got, &limiters)
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v))
            .collect();
        let mut wanted: Vec<(String, String)> = case["fields"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(n, v)| (n.clone(), text(v)))
            .collect();
        let mut sorted = fields.clone();
        sorted.sort();
        wanted.sort();
        assert_eq!(sorted, wanted, "{name}");
    }
}
