//! clients/conformance.json, the table every client package is tested against: the words
//! each limiter spec and option must produce, the result and HTTP fields each reply must
//! give (calls whose limits change between them too), and the leases', RL.TOP's, the shared
//! lists', the load reports' and the counts' words and replies (no server). Every part but `lua`, which the nginx package's test
//! reads. Read from the repository's checkout.

use std::path::Path;
use std::time::Duration;

use ratelimit_module::{
    add_words, command_words, counts_words, fields, lease_words, release_words, remove_words,
    renew_words, report_words, result, top_keys, Algorithm, Counts, Lease, Limiter, LoadStanding,
    Options, Priority, RateLimit,
};
use ratelimit_module::{ConcurrencyLimit, LimitOptions};
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
        "lease" => Limiter::slots(key, number(spec, "limit"), seconds(&spec["lease"])),
        "load" => Limiter::load(
            key,
            text(&spec["priority"])
                .parse::<Priority>()
                .expect("a priority class"),
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
        Json::String(text) => Value::BulkString(text.as_bytes().to_vec()),
        other => Value::Int(other.as_i64().unwrap_or_else(|| panic!("{other}"))),
    }
}

fn strings(json: &Json) -> Vec<String> {
    json.as_array().unwrap().iter().map(text).collect()
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
            "lease_id" => assert_eq!(Some(got.lease_id), value.as_i64(), "{case}"),
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
fn every_part_of_the_table_is_read() {
    // A part added to the table fails here until it is read.
    let table = table();
    let mut parts: Vec<&str> = table
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    parts.sort();
    let read = [
        "about",
        "changed_limits",
        "commands",
        "concurrency",
        "counts",
        "lease_replies",
        "leases",
        "lists",
        "load",
        "load_replies",
        "lua",
        "replies",
        "top",
    ];
    assert_eq!(parts, read);
}

/// The table's limit options (every package's names, times in whole µs).
fn limit_options(json: &Json) -> LimitOptions {
    let defaults = LimitOptions::default();
    let float =
        |name: &str, default: f64| given(json, name).map_or(default, |v| v.as_f64().unwrap());
    let micros = |name: &str, default: Duration| {
        given(json, name).map_or(default, |v| Duration::from_micros(v.as_u64().unwrap()))
    };
    let mut shares = defaults.shares;
    if let Some(given) = given(json, "shares") {
        for (share, value) in shares.iter_mut().zip(given.as_array().unwrap()) {
            *share = value.as_f64().unwrap();
        }
    }
    LimitOptions {
        initial: float("initial", defaults.initial),
        floor: float("floor", defaults.floor),
        ceiling: float("ceiling", defaults.ceiling),
        interval: micros("interval_us", defaults.interval),
        target: micros("target_us", defaults.target),
        enter: given(json, "enter").map_or(defaults.enter, |v| v.as_u64().unwrap() as u32),
        deep: float("deep", defaults.deep),
        epoch: micros("epoch_us", defaults.epoch),
        decay: float("decay", defaults.decay),
        sojourn: float("sojourn", defaults.sojourn),
        shares,
    }
}

#[test]
fn the_local_limit_replays_every_trace() {
    let table = table();
    let part = &table["concurrency"];
    assert_eq!(
        limit_options(&part["defaults"]),
        LimitOptions::default(),
        "the shipped defaults"
    );
    let mut steps = 0;
    for trace in part["traces"].as_array().unwrap() {
        let name = trace["name"].as_str().unwrap();
        let mut limit = ConcurrencyLimit::new(limit_options(&trace["options"]));
        let expect = trace["expect"].as_array().unwrap();
        for (step, (event, wanted)) in trace["events"]
            .as_array()
            .unwrap()
            .iter()
            .zip(expect)
            .enumerate()
        {
            let at = Duration::from_micros(event[0].as_u64().unwrap());
            let decision = match event[1].as_str().unwrap() {
                "admit" => {
                    let priority: Priority = event[2].as_str().unwrap().parse().unwrap();
                    let backlog =
                        Duration::from_micros(event.get(3).map_or(0, |b| b.as_u64().unwrap()));
                    Json::Bool(limit.admit_after(priority, at, backlog))
                }
                "leave" => {
                    limit.leave(at);
                    Json::Null
                }
                "back" => {
                    limit.back(at);
                    Json::Null
                }
                "level" => {
                    limit.shed_by_level(at);
                    Json::Null
                }
                _ => {
                    let latency = Duration::from_micros(event[2].as_u64().unwrap());
                    let route = event.get(3).and_then(Json::as_str);
                    match event.get(4).and_then(Json::as_u64) {
                        Some(backlog) => {
                            let backlog = Duration::from_micros(backlog);
                            limit.finish_behind(route, latency, at, backlog)
                        }
                        None => match route {
                            Some(route) => limit.finish_route(route, latency, at),
                            None => limit.finish(latency, at),
                        },
                    }
                    Json::Null
                }
            };
            let got = serde_json::json!([decision, limit.limit(), limit.congested()]);
            assert_eq!(&got, wanted, "{name}, step {step}: {event}");
            steps += 1;
        }
    }
    assert!(steps >= 1_000, "{steps} steps");
}

#[test]
fn leases_build_their_words_and_read_their_replies() {
    let table = table();
    for case in table["leases"].as_array().unwrap() {
        let key = case["key"].as_str().unwrap();
        let id = || case["id"].as_i64().unwrap();
        let built = match case["call"].as_str().unwrap() {
            call @ ("acquire" | "peek") => lease_words(
                key,
                number(case, "limit"),
                seconds(&case["lease"]),
                number(case, "quantity"),
                call == "peek",
            )
            .unwrap(),
            "release" => release_words(key, id()),
            _ => renew_words(key, id(), seconds(&case["lease"])).unwrap(),
        };
        assert_eq!(built, strings(&case["words"]), "{case}");
    }
    for case in table["lease_replies"].as_array().unwrap() {
        let lease = Lease::from_reply(&reply(&case["reply"])).unwrap();
        assert_eq!(Some(lease.allowed()), case["allowed"].as_bool());
        assert_eq!(Some(lease.id), case["id"].as_i64());
        assert_eq!(Some(lease.result.remaining), case["remaining"].as_i64());
        assert_eq!(
            lease.result.retry_after.map(|d| d.as_secs_f64()),
            case["retry_after"].as_f64()
        );
    }
}

#[test]
fn top_merges_every_primary() {
    for case in table()["top"].as_array().unwrap() {
        let replies: Vec<Value> = case["replies"]
            .as_array()
            .unwrap()
            .iter()
            .map(reply)
            .collect();
        let rows = top_keys(&replies, case["count"].as_u64().unwrap() as usize).unwrap();
        let got: Vec<Json> = rows
            .iter()
            .map(|row| serde_json::json!([row.key, row.refusals, row.error]))
            .collect();
        assert_eq!(Json::Array(got), case["rows"]);
    }
}

#[test]
fn the_lists_change_in_one_transaction() {
    for case in table()["lists"].as_array().unwrap() {
        let field = |name: &str| case[name].as_str().unwrap();
        let built = match field("change") {
            "add" => add_words(field("hash"), field("list"), field("item"), field("value")),
            _ => remove_words(field("hash"), field("list"), field("item")),
        };
        let wanted: Vec<Vec<String>> = case["commands"]
            .as_array()
            .unwrap()
            .iter()
            .map(strings)
            .collect();
        assert_eq!(built, wanted);
    }
}

#[test]
fn load_reports_build_their_words_and_read_their_replies() {
    let table = table();
    for case in table["load"].as_array().unwrap() {
        let factors: Vec<(String, f64)> = case["factors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| (text(&pair[0]), pair[1].as_f64().unwrap()))
            .collect();
        let built = report_words(
            case["service"].as_str().unwrap(),
            case["instance"].as_str().unwrap(),
            seconds(&case["ttl"]),
            &factors,
        );
        assert_eq!(built, strings(&case["words"]));
    }
    for case in table["load_replies"].as_array().unwrap() {
        let standing = LoadStanding::from_reply(&reply(&case["reply"])).unwrap();
        assert_eq!(Some(standing.level), case["level"].as_i64());
        assert_eq!(Some(standing.instances), case["instances"].as_i64());
        let shares: Vec<f64> = case["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|share| share.as_f64().unwrap())
            .collect();
        assert_eq!(standing.shares.to_vec(), shares);
    }
}

#[test]
fn counts_build_their_words_and_read_their_replies() {
    for case in table()["counts"].as_array().unwrap() {
        let spec = limiter(&case["limiter"]);
        assert_eq!(counts_words(&spec).unwrap(), strings(&case["words"]));
        let fields: Vec<i64> = case["reply"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let wanted = &case["counts"];
        let s = |name: &str| Duration::from_secs_f64(wanted[name].as_f64().unwrap());
        let expected = match &spec.kind {
            ratelimit_module::Kind::Log { .. } => Counts::Log {
                count: wanted["count"].as_i64().unwrap(),
                oldest_ends_in: s("oldest_ends_in"),
                newest_ends_in: s("newest_ends_in"),
            },
            _ => Counts::Window {
                previous: wanted["previous"].as_i64().unwrap(),
                previous_ends_in: s("previous_ends_in"),
                current: wanted["current"].as_i64().unwrap(),
                current_ends_in: s("current_ends_in"),
            },
        };
        assert_eq!(Counts::from_fields(&spec, &fields).unwrap(), expected);
    }
}

fn limiters_of(case: &Json) -> Vec<Limiter> {
    case["limiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(limiter)
        .collect()
}

fn check_words(case: &Json) {
    let words = command_words(&limiters_of(case), &options(&case["options"])).unwrap();
    let wanted: Vec<String> = case["words"].as_array().unwrap().iter().map(text).collect();
    assert_eq!(words, wanted, "{case}");
}

fn check_reply(case: &Json) {
    let limiters = limiters_of(case);
    let options = options(&case["options"]);
    let got = result(&reply(&case["reply"]), &limiters, &options).unwrap();
    let name = case.to_string();
    check_result(&got, &case["result"], &name);
    let mut fields: Vec<(String, String)> = fields(&got, &limiters)
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
    let mut wanted: Vec<(String, String)> = case["fields"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(n, v)| (n.clone(), text(v)))
        .collect();
    fields.sort();
    wanted.sort();
    assert_eq!(fields, wanted, "{name}");
}

#[test]
fn every_spec_builds_its_words() {
    let table = table();
    let cases = table["commands"].as_array().unwrap();
    assert!(cases.len() >= 10);
    cases.iter().for_each(check_words);
}

#[test]
fn every_reply_gives_its_result_and_fields() {
    table()["replies"]
        .as_array()
        .unwrap()
        .iter()
        .for_each(check_reply);
}

#[test]
fn calls_whose_limits_change_send_them_and_read_their_replies() {
    let table = table();
    let cases = table["changed_limits"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for case in cases {
        for step in case["steps"].as_array().unwrap() {
            check_words(step);
            check_reply(step);
        }
    }
}
