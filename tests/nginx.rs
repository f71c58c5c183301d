//! The Lua package (`clients/lua`) in real nginx with its Lua module, against real servers
//! with the module, over real HTTP: `req`, `count` and `conn` holding their limits across
//! two nginx sharing one server, `req`'s delays against lua-resty-limit-traffic's formula,
//! leases released in the log phase and freed when an nginx is killed, `traffic.combine`
//! all or nothing, the failure policy with the server frozen and gone, a Cluster with a slot
//! moving under traffic, and the deny cache under a flood.

mod support;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use support::cluster::Cluster;
use support::nginx::{try_request, Nginx, Response};
use support::{ints, query, Server};

/// The options table every location of a test uses, as Lua: `{ host, port, ... }` plus
/// `extra` (more fields, Lua syntax).
fn redis_options(port: u16, extra: &str) -> String {
    format!("{{ host = \"127.0.0.1\", port = {port}, timeout = 500{extra} }}")
}

/// An http block: the options as the global `REDIS`, then `locations` in one server on
/// `{listen}`.
fn http(options: &str, locations: &str) -> String {
    format!(
        "    lua_shared_dict ratelimit_deny 1m;
    lua_shared_dict ratelimit_quota 1m;
    init_by_lua_block {{ REDIS = {options} }}
    server {{
        listen {{listen}};
{locations}
    }}"
    )
}

/// A location that runs `limiter` (Lua: `lim`, made once per worker) on the key of the
/// `k` argument and answers 200 with the delay and the state in `X-Delay` and `X-State`,
/// 503 when rejected and 500 on an error (in `X-Error`).
fn location(path: &str, make: &str) -> String {
    format!(
        "        location {path} {{
            access_by_lua_block {{
                local lim = LIMITERS and LIMITERS[\"{path}\"]
                if not lim then
                    LIMITERS = LIMITERS or {{}}
                    lim = assert({make})
                    LIMITERS[\"{path}\"] = lim
                end
                local delay, state = lim:incoming(ngx.var.arg_k or \"k\", ngx.var.arg_dry ~= \"1\")
                require(\"resty.ratelimit_module.fields\").set()
                if not delay then
                    ngx.header[\"X-Error\"] = state
                    return ngx.exit(state == \"rejected\" and 503 or 500)
                end
                if lim.is_committed and lim:is_committed() then
                    ngx.ctx.conn = lim
                end
                ngx.header[\"X-Delay\"] = string.format(\"%.6f\", delay)
                ngx.header[\"X-State\"] = tostring(state)
            }}
            content_by_lua_block {{
                local wait = tonumber(ngx.var.arg_sleep)
                if wait then ngx.sleep(wait) end
                ngx.say(\"ok\")
            }}
            log_by_lua_block {{
                local lim = ngx.ctx.conn
                if lim then lim:leaving(ngx.var.arg_k or \"k\", 0.1) end
            }}
        }}
"
    )
}

/// The responses to `count` requests of `path`, sent at once, spread over `nginxes`.
fn burst(nginxes: &[&Nginx], path: &str, count: usize) -> Vec<Response> {
    let ports: Vec<u16> = nginxes.iter().map(|nginx| nginx.port()).collect();
    let handles: Vec<_> = (0..count)
        .map(|i| {
            let (port, path) = (ports[i % ports.len()], path.to_owned());
            thread::spawn(move || support::nginx::request(port, "GET", &path, &[], ""))
        })
        .collect();
    handles
        .into_iter()
        .map(|handle| handle.join().unwrap())
        .collect()
}

fn statuses(responses: &[Response], status: u16) -> usize {
    responses.iter().filter(|one| one.status == status).count()
}

fn delay(response: &Response) -> f64 {
    response.header("X-Delay").unwrap().parse().unwrap()
}

#[test]
fn two_nginx_sharing_one_server_hold_count_and_req_exactly() {
    let server = Server::start();
    let locations = [
        location(
            "/count",
            "require(\"resty.ratelimit_module.count\").new(REDIS, 20, 60)",
        ),
        location(
            "/req",
            "require(\"resty.ratelimit_module.req\").new(REDIS, 5, 10)",
        ),
    ]
    .concat();
    let config = http(&redis_options(server.port(), ""), &locations);
    let (a, b) = (Nginx::start(&config), Nginx::start(&config));
    // count: 20 a minute from the first request, whichever nginx the requests reach.
    let responses = burst(&[&a, &b], "/count?k=shared", 80);
    assert_eq!(statuses(&responses, 200), 20);
    assert_eq!(statuses(&responses, 503), 60);
    let mut remaining: Vec<i64> = responses
        .iter()
        .filter(|one| one.status == 200)
        .map(|one| one.header("X-State").unwrap().parse().unwrap())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..20).collect::<Vec<i64>>());
    let refused = responses.iter().find(|one| one.status == 503).unwrap();
    assert_eq!(
        refused.header("RateLimit-Policy"),
        Some("\"count\";q=20;w=60")
    );
    assert!(refused.header("Retry-After").is_some());
    // req: 5 a second with a queue of 10: 11 admitted at once across both, each delayed to
    // its turn in the queue (a fifth of a second apart), as limit_req delays them.
    let mut con = server.connect();
    let start = support::server_micros(&mut con);
    let responses = burst(&[&a, &b], "/req?k=queue", 40);
    let span = (support::server_micros(&mut con) - start) as f64 / 1e6;
    assert_eq!(statuses(&responses, 200), 11);
    let mut delays: Vec<f64> = responses
        .iter()
        .filter(|one| one.status == 200)
        .map(delay)
        .collect();
    delays.sort_by(f64::total_cmp);
    for (turn, delay) in delays.iter().enumerate() {
        let due = turn as f64 * 0.2;
        assert!(
            *delay <= due + 1e-6 && *delay >= due - span - 0.002,
            "turn {turn}: delay {delay}, due {due}, the burst took {span} s"
        );
    }
}

/// lua-resty-limit-traffic's `req`: the excess after a request at `elapsed` seconds since the
/// last admitted one, whose excess was `excess` (`None`: the first request, excess 0).
fn original_excess(rate: f64, excess: Option<f64>, elapsed: f64) -> f64 {
    excess.map_or(0.0, |excess| (excess - rate * elapsed + 1.0).max(0.0))
}

#[test]
fn req_delays_follow_lua_resty_limit_traffics_formula() {
    let server = Server::start();
    let locations = location(
        "/req",
        "require(\"resty.ratelimit_module.req\").new(REDIS, 10, 4)",
    );
    let nginx = Nginx::start(&http(&redis_options(server.port(), ""), &locations));
    let (rate, burst) = (10.0, 4.0);
    // The last admitted request: the excess the server's delay says it left (delay = excess /
    // rate), and the instants between which the server decided it. Anchoring each step on
    // the server's own reply keeps the model from drifting on a busy machine, and reading
    // those instants from the server's clock (TIME before the request and after its answer)
    // keeps it on the clock the module reads: the test's own clock ran 1.4 ms behind it over
    // a 0.4 s pause in a CI run.
    let mut last: Option<(f64, f64, f64)> = None;
    let mut con = server.connect();
    let mut server_seconds = move || support::server_micros(&mut con) as f64 / 1e6;
    // Bursts and pauses: some requests delayed, some rejected, some after the queue drained.
    let pauses = [
        0, 0, 0, 0, 0, 0, 0, 150, 0, 30, 0, 0, 0, 0, 400, 0, 0, 90, 0, 0, 0, 0, 0,
    ];
    for (i, pause) in pauses.iter().enumerate() {
        thread::sleep(Duration::from_millis(*pause));
        let sent = server_seconds();
        let response = nginx.get("/req?k=formula");
        let answered = server_seconds();
        // The server decided this request between `sent` and `answered`, the last one between
        // its own two instants: the most and the least time that can have passed bracket it.
        let excess = last.map(|(excess, _, _)| excess);
        let most = last.map_or(0.0, |(_, last_sent, _)| answered - last_sent);
        let least = last.map_or(0.0, |(_, _, last_answered)| sent - last_answered);
        let (lenient, strict) = (
            original_excess(rate, excess, most),
            original_excess(rate, excess, least.max(0.0)),
        );
        match response.status {
            200 => {
                let got = delay(&response);
                assert!(
                    lenient <= burst,
                    "request {i} admitted, the formula rejects it"
                );
                let (low, high) = (lenient / rate, strict.min(burst) / rate);
                assert!(
                    got >= low - 1e-3 && got <= high + 1e-3,
                    "request {i}: delay {got}, the formula gives {low} to {high}"
                );
                last = Some((got * rate, sent, answered));
            }
            503 => assert!(
                strict > burst,
                "request {i} rejected, the formula admits it"
            ),
            other => panic!("request {i}: {other}: {}", nginx.log()),
        }
    }
}

#[test]
fn conn_admits_max_releases_in_the_log_phase_and_a_killed_nginx_frees_its_slots() {
    let server = Server::start();
    let locations = location(
        "/conn",
        "require(\"resty.ratelimit_module.conn\").new(REDIS, 2, 0, 0.5)",
    );
    let config = http(&redis_options(server.port(), ", lease = 2"), &locations);
    let (mut a, b) = (Nginx::start(&config), Nginx::start(&config));
    let mut con = server.connect();
    let held = |con: &mut redis::Connection| {
        let peek = ints(con, &["RL.ACQUIRE_RO", "k", "2", "2", "0"]);
        2 - peek[2]
    };
    // Five at once, each holding its slot for half a second: two go in.
    let responses = burst(&[&a, &b], "/conn?sleep=0.5", 5);
    assert_eq!(statuses(&responses, 200), 2);
    assert_eq!(statuses(&responses, 503), 3);
    // Both left: their slots were freed in the log phase (through a timer).
    let freed = support::wait_until(Duration::from_secs(2), || held(&mut con) == 0);
    assert!(freed, "the slots were not freed: {}", a.log());
    // Two held through nginx a, which is then killed: nothing runs its log phase.
    let port = a.port();
    let holders: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                try_request(
                    port,
                    "GET",
                    "/conn?sleep=30",
                    &[],
                    "",
                    Duration::from_secs(40),
                )
            })
        })
        .collect();
    assert!(support::wait_until(Duration::from_secs(5), || held(
        &mut con
    ) == 2));
    let killed = Instant::now();
    a.kill();
    for holder in holders {
        assert!(holder.join().unwrap().is_err(), "a killed nginx answered");
    }
    assert_eq!(b.get("/conn").status, 503, "the slots are still held");
    // The leases (2 s) end on their own: nginx b admits again.
    let freed = support::wait_until(Duration::from_secs(5), || b.get("/conn").status == 200);
    let after = killed.elapsed();
    assert!(freed, "the killed nginx's slots were never freed");
    assert!(
        after >= Duration::from_millis(1_500),
        "freed after {after:?}, before its lease ended"
    );
}

#[test]
fn combine_is_all_or_nothing_in_one_call() {
    let server = Server::start();
    let combine = "        location /combine {
            access_by_lua_block {
                local req = require \"resty.ratelimit_module.req\"
                local count = require \"resty.ratelimit_module.count\"
                local conn = require \"resty.ratelimit_module.conn\"
                local traffic = require \"resty.ratelimit_module.traffic\"
                LIMS = LIMS or { assert(req.new(REDIS, 100, 50)), assert(count.new(REDIS, 3, 60)),
                    assert(conn.new(REDIS, 2, 0, 1)) }
                local keys = { \"{c}:req\", \"{c}:count\", \"{c}:conn\" }
                local states = {}
                local delay, err = traffic.combine(LIMS, keys, states)
                require(\"resty.ratelimit_module.fields\").set()
                if not delay then
                    ngx.header[\"X-Error\"] = err
                    return ngx.exit(err == \"rejected\" and 503 or 500)
                end
                ngx.ctx.keys = keys
                ngx.header[\"X-State\"] = string.format(\"%.6f %s %s\", states[1], states[2], states[3])
            }
            content_by_lua_block {
                local wait = tonumber(ngx.var.arg_sleep)
                if wait then ngx.sleep(wait) end
                ngx.say(\"ok\")
            }
            log_by_lua_block {
                if ngx.ctx.keys then LIMS[3]:leaving(ngx.ctx.keys[3], 0.1) end
            }
        }
";
    let nginx = Nginx::start(&http(
        &redis_options(server.port(), ", lease = 30"),
        combine,
    ));
    let mut con = server.connect();
    let standing = |con: &mut redis::Connection| {
        (
            ints(
                con,
                &[
                    "CL.THROTTLE_RO",
                    "{c}:req",
                    "50",
                    "100000",
                    "1000000000",
                    "0",
                    "US",
                ],
            )[2],
            ints(
                con,
                &["RL.WINDOW_RO", "{c}:count", "3", "60", "0", "ANCHORED"],
            )[2],
            ints(con, &["RL.ACQUIRE_RO", "{c}:conn", "2", "30", "0"])[2],
        )
    };
    // Two requests in flight hold both slots: a third is refused by conn alone, and charged
    // to neither rate.
    let port = nginx.port();
    let holders: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || support::nginx::request(port, "GET", "/combine?sleep=1", &[], ""))
        })
        .collect();
    assert!(support::wait_until(Duration::from_secs(5), || standing(
        &mut con
    )
    .2 == 0));
    let before = standing(&mut con);
    let refused = nginx.get("/combine");
    assert_eq!(refused.status, 503);
    assert_eq!(
        standing(&mut con),
        before,
        "a refused call charged something"
    );
    for holder in holders {
        assert_eq!(holder.join().unwrap().status, 200);
    }
    // Released: a third request fits the count's 3; a fourth is refused by count, and its
    // lease is not taken nor the rate charged.
    assert!(support::wait_until(Duration::from_secs(5), || standing(
        &mut con
    )
    .2 == 2));
    let third = nginx.get("/combine");
    assert_eq!(third.status, 200, "{third:?}");
    assert!(support::wait_until(Duration::from_secs(5), || standing(
        &mut con
    )
    .2 == 2));
    let before = standing(&mut con);
    assert_eq!(before.1, 0);
    let fourth = nginx.get("/combine");
    assert_eq!(fourth.status, 503);
    assert_eq!(
        standing(&mut con),
        before,
        "a refused call charged something"
    );
    assert_eq!(
        fourth.header("RateLimit-Policy"),
        Some("\"req\";q=51;w=1, \"count\";q=3;w=60, \"conn\";q=2;w=30")
    );
    // One call each, whatever the number of limiters.
    let calls: String = query(&mut con, &["INFO", "commandstats"]);
    assert!(calls.contains("cmdstat_rl.all:calls=5,"), "{calls}");
}

/// lua-resty-limit-traffic keeps each limiter's keys in its shared dict; here they share the
/// server's keys, and `prefix` is the dict. Its own combine example calls a `req` and a
/// `conn` with one key: without prefixes the call names one key twice, which `RL.ALL` refuses;
/// with them, each limiter holds its own key and one `RL.ALL` decides.
#[test]
fn a_prefix_keeps_limiters_called_with_one_key_apart() {
    let server = Server::start();
    let combine = |path: &str, req_options: &str, conn_options: &str| {
        format!(
            "        location {path} {{
            access_by_lua_block {{
                local lim1 = assert(require(\"resty.ratelimit_module.req\").new({req_options}, 300, 200))
                local lim2 = assert(require(\"resty.ratelimit_module.req\").new({req_options}, 200, 100))
                local lim3 = assert(require(\"resty.ratelimit_module.conn\").new({conn_options}, 10, 0, 0.5))
                local client = ngx.var.arg_k
                local states = {{}}
                local delay, err = require(\"resty.ratelimit_module.traffic\").combine(
                    {{ lim1, lim2, lim3 }}, {{ \"site\", client, client }}, states)
                if not delay then
                    ngx.header[\"X-Error\"] = err
                    return ngx.exit(err == \"rejected\" and 503 or 500)
                end
                ngx.header[\"X-State\"] = states[3]
                if ngx.var.arg_release then
                    ngx.ctx.conn, ngx.ctx.key = lim3, client
                end
            }}
            content_by_lua_block {{ ngx.say(\"ok\") }}
            log_by_lua_block {{
                if ngx.ctx.conn then ngx.ctx.conn:leaving(ngx.ctx.key, 0.1) end
            }}
        }}
"
        )
    };
    let (req, conn) = (
        redis_options(server.port(), ", prefix = \"my_req_store:\""),
        redis_options(server.port(), ", prefix = \"my_conn_store:\", lease = 30"),
    );
    let bare = redis_options(server.port(), ", lease = 30");
    let nginx = Nginx::start(&http(
        &bare,
        &(combine("/prefixed", &req, &conn) + &combine("/bare", &bare, &bare)),
    ));
    let mut con = server.connect();
    let holding = |con: &mut redis::Connection| {
        let remaining = ints(
            con,
            &[
                "RL.ACQUIRE_RO",
                "my_conn_store:203.0.113.7",
                "10",
                "30",
                "0",
            ],
        )[2];
        10 - remaining
    };
    // Each request holds its slot (none is released): the conn counts them.
    for held in 1..=3 {
        let response = nginx.get("/prefixed?k=203.0.113.7");
        assert_eq!(response.status, 200, "{response:?}\n{}", nginx.log());
        assert_eq!(response.header("X-State"), Some(held.to_string().as_str()));
    }
    let mut keys: Vec<String> = query(&mut con, &["KEYS", "*"]);
    keys.sort();
    assert_eq!(
        keys,
        [
            "my_conn_store:203.0.113.7",
            "my_req_store:203.0.113.7",
            "my_req_store:site"
        ]
    );
    assert_eq!(holding(&mut con), 3);
    // `leaving` is given the key as `combine` was, and frees the prefixed key's slot.
    let response = nginx.get("/prefixed?k=203.0.113.7&release=1");
    assert_eq!(response.header("X-State"), Some("4"));
    assert!(
        support::wait_until(Duration::from_secs(5), || holding(&mut con) == 3),
        "the slot was not released: {}",
        nginx.log()
    );
    // Without them, the second req and the conn name one key, and nothing is charged.
    let response = nginx.get("/bare?k=198.51.100.1");
    assert_eq!(response.status, 500, "{response:?}");
    assert!(
        response
            .header("X-Error")
            .is_some_and(|error| error == "ERR RL.ALL names the same key twice"),
        "{response:?}"
    );
    let exists: i64 = query(&mut con, &["EXISTS", "site", "198.51.100.1"]);
    assert_eq!(exists, 0);
}

/// A constructor given options it cannot use returns nil and says which, as the original
/// does for a missing shared dict.
#[test]
fn new_refuses_options_it_cannot_use_and_says_which() {
    let nginx = Nginx::start(&http(
        "{}",
        "        location /new {
            content_by_lua_block {
                local req = require \"resty.ratelimit_module.req\"
                for _, options in ipairs({ { on_error = \"open\" }, { prefix = 7 },
                        { deny_cache = \"nowhere\" }, { metrics = \"nowhere\" } }) do
                    local lim, err = req.new(options, 10, 5)
                    ngx.say(tostring(lim), \": \", err)
                end
                ngx.say(tostring(select(2, req.new(\"my_req_store\", 10, 5))))
            }
        }
",
    ));
    let response = nginx.get("/new");
    assert_eq!(
        response.body,
        "nil: on_error is \"allow\", \"deny\" or unset\n\
         nil: prefix is a string or unset\n\
         nil: deny_cache: shared dict not found\n\
         nil: metrics: shared dict not found\n\
         the first argument is a table of Redis options\n"
    );
}

/// Requests within `timeout` plus a margin, answered as the policy says.
fn answered_within(nginx: &Nginx, path: &str, bound: Duration) -> (u16, Duration) {
    let start = Instant::now();
    let response = try_request(nginx.port(), "GET", path, &[], "", Duration::from_secs(10))
        .unwrap_or_else(|error| panic!("{path}: {error}"));
    let took = start.elapsed();
    assert!(took <= bound, "{path} took {took:?}");
    (response.status, took)
}

#[test]
fn a_frozen_or_gone_server_costs_at_most_the_timeout_and_service_resumes() {
    let mut server = Server::start();
    let locations = [
        location(
            "/allow",
            "require(\"resty.ratelimit_module.count\").new(ALLOW, 1000, 60)",
        ),
        location(
            "/deny",
            "require(\"resty.ratelimit_module.count\").new(DENY, 1000, 60)",
        ),
        location(
            "/plain",
            "require(\"resty.ratelimit_module.count\").new(REDIS, 1000, 60)",
        ),
    ]
    .concat();
    let options = redis_options(server.port(), ", timeout = 200, cooldown = 500");
    let allow = options.replace("timeout = 200", "timeout = 200, on_error = \"allow\"");
    let deny = options.replace("timeout = 200", "timeout = 200, on_error = \"deny\"");
    let config = http(&options, &locations).replace(
        "init_by_lua_block { REDIS",
        &format!("init_by_lua_block {{ ALLOW = {allow}; DENY = {deny}; REDIS"),
    );
    let nginx = Nginx::start(&config);
    for path in ["/allow", "/deny", "/plain"] {
        assert_eq!(nginx.get(path).status, 200);
    }
    // 200 ms of timeout and a margin of 1 s for a busy machine: without the timeout, a
    // cosocket waits lua_socket_read_timeout (60 s by default), so an answer within it is the
    // package's deadline at work.
    let bound = Duration::from_millis(200 + 1_000);
    for (fault, signal) in [("frozen", libc::SIGSTOP), ("gone", libc::SIGKILL)] {
        if signal == libc::SIGKILL {
            server.kill();
        } else {
            server.signal(signal);
        }
        for round in 0..3 {
            for (path, expected) in [("/allow", 200), ("/deny", 503), ("/plain", 500)] {
                let (status, _) = answered_within(&nginx, path, bound);
                assert_eq!(status, expected, "{fault}, round {round}, {path}");
            }
        }
        // The server back: within the cool-down, then the next call, service resumes.
        if signal == libc::SIGKILL {
            server.restart();
        } else {
            server.signal(libc::SIGCONT);
        }
        // Bounded by the cool-down (500 ms) and a margin that holds on a busy machine.
        let resumed = support::wait_until(Duration::from_secs(10), || {
            nginx.get("/deny").status == 200 && nginx.get("/plain").status == 200
        });
        assert!(resumed, "{fault}: service did not resume: {}", nginx.log());
    }
    // Errors are logged at most once a second per worker, not once per request.
    let logged = nginx.log().matches("ratelimit_module:").count();
    assert!(logged <= 20, "{logged} lines:\n{}", nginx.log());
}

/// After the cool-down, one request probes the server and the others keep the policy: a
/// server that stays frozen is asked once per cool-down, not once per request waiting. The
/// "server" is a port that accepts connections and never answers (a frozen server as its
/// clients see it), counting the connections made to it.
#[test]
fn after_the_cool_down_one_request_probes_a_frozen_server_and_the_others_keep_the_policy() {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    let accepted = Arc::new(Mutex::new(Vec::new()));
    {
        let accepted = accepted.clone();
        thread::spawn(move || {
            for conn in hole.incoming().flatten() {
                accepted.lock().unwrap().push(conn);
            }
        });
    }
    let connections = || accepted.lock().unwrap().len();
    let options = redis_options(
        port,
        ", timeout = 200, cooldown = 4000, on_error = \"deny\"",
    );
    let locations = location(
        "/deny",
        "require(\"resty.ratelimit_module.count\").new(REDIS, 1000, 60)",
    );
    let nginx = Nginx::start_with(&http(&options, &locations), 1);
    // The first request waits its timeout and opens the circuit.
    assert_eq!(nginx.get("/deny").status, 503);
    assert!(support::wait_until(Duration::from_secs(5), || connections() == 1));
    // Within the cool-down: nobody asks.
    let refused = burst(&[&nginx], "/deny", 8);
    assert!(refused.iter().all(|response| response.status == 503));
    assert_eq!(connections(), 1, "asked within the cool-down");
    // After it, eight at once: one probes, on a connection of its own; the others are
    // answered by the policy, within its timeout and the next cool-down.
    thread::sleep(Duration::from_millis(4_100));
    let answers = burst(&[&nginx], "/deny", 8);
    assert!(answers.iter().all(|response| response.status == 503));
    // Every request is answered: the probe's connection is the only new one.
    assert!(support::wait_until(Duration::from_secs(5), || connections() >= 2));
    assert_eq!(connections(), 2, "{}", nginx.log());
}

#[test]
fn on_a_cluster_keys_are_routed_by_slot_and_a_slot_moving_under_traffic_stays_exact() {
    let cluster = Cluster::start(3, 0);
    let masters = cluster.masters();
    let seeds: Vec<String> = masters
        .iter()
        .map(|master| format!("\"127.0.0.1:{}\"", master.port))
        .collect();
    let options = format!("{{ cluster = {{ {} }}, timeout = 2000 }}", seeds.join(", "));
    let locations = location(
        "/count",
        "require(\"resty.ratelimit_module.count\").new(REDIS, 100000, 600)",
    );
    let nginx = Nginx::start(&http(&options, &locations));
    // A key in the lowest slots of the master serving slot 0, which a reshard moves first.
    let first = masters[0].port;
    let owner = cluster.owner(first, 0).unwrap();
    let from = masters
        .iter()
        .find(|master| master.port == owner)
        .unwrap()
        .clone();
    let mut con = cluster.node(from.port).connect();
    let key = (0..)
        .map(|i| format!("moved{i}"))
        .find(|key| query::<i64, _>(&mut con, &["CLUSTER", "KEYSLOT", key]) < 64)
        .unwrap();
    let to = masters
        .iter()
        .find(|master| master.port != from.port)
        .unwrap()
        .clone();
    let admitted = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(Mutex::new(false));
    let traffic = {
        let (admitted, stop, port, key) =
            (admitted.clone(), stop.clone(), nginx.port(), key.clone());
        thread::spawn(move || {
            let mut failures = Vec::new();
            while !*stop.lock().unwrap() {
                let response =
                    support::nginx::request(port, "GET", &format!("/count?k={key}"), &[], "");
                match response.status {
                    200 => *admitted.lock().unwrap() += 1,
                    other => failures.push((other, response.header("X-Error").map(str::to_owned))),
                }
            }
            failures
        })
    };
    // Traffic under way before the move, and still after it.
    let admitted_now = || *admitted.lock().unwrap();
    assert!(support::wait_until(
        Duration::from_secs(10),
        || admitted_now() >= 20
    ));
    cluster.reshard_slots(&from, &to, 64);
    let moved_at = admitted_now();
    assert!(support::wait_until(
        Duration::from_secs(10),
        || admitted_now() >= moved_at + 20
    ));
    *stop.lock().unwrap() = true;
    let failures = traffic.join().unwrap();
    assert!(
        failures.is_empty(),
        "requests failed during the move: {failures:?}"
    );
    // The key moved, and counts exactly what nginx admitted.
    let mut on_target = cluster.node(to.port).connect();
    let counts: Vec<i64> = query(
        &mut on_target,
        &["RL.WINDOW.COUNTS", &key, "600", "ANCHORED"],
    );
    let admitted = *admitted.lock().unwrap();
    assert!(admitted > 0);
    assert_eq!(counts[2] as u64, admitted, "{}", nginx.log());
}

#[test]
fn the_deny_cache_spares_the_server_under_a_flood() {
    let server = Server::start();
    let locations = location(
        "/req",
        "require(\"resty.ratelimit_module.req\").new(REDIS, 0.1, 1)",
    );
    let nginx = Nginx::start(&http(
        &redis_options(server.port(), ", deny_cache = \"ratelimit_deny\""),
        &locations,
    ));
    let mut con = server.connect();
    let calls = |con: &mut redis::Connection| -> u64 {
        let info: String = query(con, &["INFO", "commandstats"]);
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_cl.throttle:calls="))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    };
    // One a ten seconds with a queue of one: two admitted, the third refused for seconds.
    assert_eq!(nginx.get("/req?k=flood").status, 200);
    assert_eq!(nginx.get("/req?k=flood").status, 200);
    let refused = nginx.get("/req?k=flood");
    assert_eq!(refused.status, 503);
    let retry: u64 = refused.header("Retry-After").unwrap().parse().unwrap();
    assert!(retry >= 9, "{refused:?}");
    let before = calls(&mut con);
    assert_eq!(before, 3);
    // A flood of 1,000 on the refused key: answered from the cache, the same refusal.
    let responses = burst(&[&nginx], "/req?k=flood", 1_000);
    assert_eq!(statuses(&responses, 503), 1_000);
    for response in &responses {
        let retry_after: u64 = response.header("Retry-After").unwrap().parse().unwrap();
        assert!(
            retry_after <= retry && retry_after >= retry - 2,
            "{response:?}"
        );
    }
    assert_eq!(calls(&mut con), before, "the flood reached the server");
    // Another key is not refused from the cache.
    assert_eq!(nginx.get("/req?k=other").status, 200);
    assert_eq!(calls(&mut con), before + 1);
}

/// The articles' gateway (`examples/nginx`) on a server loaded with its lists, as a user runs
/// it, on `port`.
fn gateway(redis_port: u16) -> Nginx {
    gateway_of(redis_port, 2)
}

/// The articles' gateway with one worker, once it has read the lists: its first read of the
/// hash (an `HGETALL`, which the server counts) has come. A worker answers by its copy of
/// the lists, so a test that asserts what they say waits for that read, and with one worker
/// every request goes by the same copy.
fn gateway_with_the_lists(con: &mut redis::Connection, redis_port: u16) -> Nginx {
    let read = server_calls(con, "hgetall");
    let nginx = gateway_of(redis_port, 1);
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            server_calls(con, "hgetall") > read
        }),
        "the gateway never read the lists: {}",
        nginx.log()
    );
    nginx
}

/// The articles' gateway (examples/nginx/nginx.conf) with `workers` workers.
fn gateway_of(redis_port: u16, workers: usize) -> Nginx {
    let root = support::repository();
    let text = std::fs::read_to_string(root.join("examples/nginx/nginx.conf")).unwrap();
    Nginx::start_config(|port| {
        text.replace(
            "worker_processes 2;",
            &format!("worker_processes {workers};"),
        )
        .replace("listen 8881;", &format!("listen 127.0.0.1:{port};"))
        .replace("port = 6379", &format!("port = {redis_port}"))
        .replace(
            "$prefix/",
            &format!("{}/", root.join("examples/nginx").display()),
        )
    })
}

/// Runs the lines of `examples/nginx/lists.redis`, as `redis-cli < lists.redis` does.
fn load_lists(con: &mut redis::Connection) {
    let root = support::repository();
    let text = std::fs::read_to_string(root.join("examples/nginx/lists.redis")).unwrap();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let mut words = Vec::new();
        let mut rest = line.trim();
        while !rest.is_empty() {
            if let Some(quoted) = rest.strip_prefix('"') {
                let (word, after) = quoted.split_once('"').unwrap();
                words.push(word.to_owned());
                rest = after.trim_start();
            } else {
                let (word, after) = rest.split_once(' ').unwrap_or((rest, ""));
                words.push(word.to_owned());
                rest = after.trim_start();
            }
        }
        let _: redis::Value = query(con, &words);
    }
}

/// The JSON body `{"seqId":...,"code":...,"msg":...}` of a refusal: its code.
fn json_code(response: &Response) -> i64 {
    let body = response.body.trim();
    assert!(
        body.starts_with('{') && body.contains("\"seqId\":\"xx-xx-xx\""),
        "{body}"
    );
    let code = body.split("\"code\":").nth(1).unwrap();
    code.split([',', '}']).next().unwrap().parse().unwrap()
}

#[test]
fn the_articles_gateway_answers_each_of_their_scenarios() {
    let server = Server::start();
    let mut con = server.connect();
    load_lists(&mut con);
    let nginx = gateway_with_the_lists(&mut con, server.port());
    let caller = |name: &str| format!("{{\"seqId\": \"xx-xx-xx\", \"caller\":\"{name}\"}}");
    let hello = |response: Response| {
        assert_eq!(
            (response.status, response.body.trim()),
            (200, "hello, world")
        );
    };
    // An API that is not limited, by POST and by GET.
    hello(nginx.post("/_dev_api", &caller("_dev_ashin")));
    hello(nginx.get("/_dev_api?seqId=xx-xx-xx&caller=_dev_ashin"));
    // A key on the deny list: refused, with the error body.
    let blocked = nginx.post("/_dev_api/blocked", &caller("1"));
    assert_eq!((blocked.status, json_code(&blocked)), (403, 403));
    assert_eq!(blocked.header("Content-Type"), Some("application/json"));
    // A limited API, a caller with no threshold of its own: the default (500 at once).
    for _ in 0..20 {
        hello(nginx.post("/_dev_api/limited", &caller("mayday")));
    }
    // A caller with its own: once a second, so a second request at once is refused.
    hello(nginx.post("/_dev_api/limited", &caller("_dev_ashin")));
    let limited = nginx.post("/_dev_api/limited", &caller("_dev_ashin"));
    assert_eq!((limited.status, json_code(&limited)), (429, 429));
    // A caller on the allow list is never limited, on a limited API.
    for _ in 0..5 {
        hello(nginx.post("/_dev_api/limited", &caller("_dev_whitelist")));
    }
    // No caller at all: refused as a bad request.
    let anonymous = nginx.post("/_dev_api", "{\"seqId\": \"xx-xx-xx\"}");
    assert_eq!((anonymous.status, json_code(&anonymous)), (403, 403));
    // The decisions were counted, served in Prometheus' format: 21 admitted (those within
    // the bucket but not first in it are counted as delayed: limit_req would delay them;
    // this gateway serves them at once, nodelay), one refused.
    let metrics = nginx.get("/metrics").body;
    let count = |outcome: &str| -> u64 {
        let name =
            format!("ratelimit_decisions_total{{policy=\"gateway\",outcome=\"{outcome}\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(name.as_str()))
            .map_or(0, |value| value.parse().unwrap())
    };
    assert_eq!(count("allowed") + count("delayed"), 21, "{metrics}");
    assert!(
        metrics.contains("ratelimit_decisions_total{policy=\"gateway\",outcome=\"refused\"} 1"),
        "{metrics}"
    );
}

/// Seed 001's everyday change: a caller's threshold raised in the hash, online. What the
/// caller used counts as used, against the new threshold: the difference is admitted at once.
#[test]
fn a_threshold_raised_in_the_hash_counts_what_the_caller_used() {
    let server = Server::start();
    let mut con = server.connect();
    load_lists(&mut con);
    let field = "limit:carol:/_dev_api/limited";
    // Five at once, one more each 100 s: nothing refills within the test.
    let set = |con: &mut redis::Connection, threshold: &str| {
        let _: () = query(con, &["HSET", "gateway:lists", field, threshold]);
        let _: () = query(con, &["HINCRBY", "gateway:lists", "version", "1"]);
    };
    set(&mut con, "5 1 100000000");
    let nginx = gateway_with_the_lists(&mut con, server.port());
    let body = "{\"seqId\": \"xx-xx-xx\", \"caller\":\"carol\"}";
    let status = || nginx.post("/_dev_api/limited", body).status;
    assert_eq!((0..5).map(|_| status()).collect::<Vec<_>>(), [200; 5]);
    assert_eq!(status(), 429, "{}", nginx.log());
    // Raised to 100 at once: the 5 used stay used, and 95 more are admitted. The worker has
    // the new threshold once its read of the changed hash has come (the server counts it)
    // and its reply is in.
    let read = server_calls(&mut con, "hgetall");
    set(&mut con, "100 1 100000000");
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            server_calls(&mut con, "hgetall") > read
        }),
        "the gateway never read the changed lists: {}",
        nginx.log()
    );
    let reached = support::wait_until(Duration::from_secs(2), || status() == 200);
    assert!(
        reached,
        "the new threshold never reached nginx: {}",
        nginx.log()
    );
    let more = 1 + std::iter::from_fn(|| Some(status()))
        .take_while(|&status| status == 200)
        .take(200)
        .count();
    assert_eq!(more, 95, "{}", nginx.log());
}

#[test]
fn a_list_change_reaches_every_gateway_within_a_second() {
    let server = Server::start();
    let mut con = server.connect();
    load_lists(&mut con);
    let (a, b) = (gateway(server.port()), gateway(server.port()));
    let body = "{\"seqId\": \"xx-xx-xx\", \"caller\":\"bob\"}";
    for nginx in [&a, &b] {
        assert_eq!(nginx.post("/_dev_api", body).status, 200);
    }
    // Denied by an application, with the Python package's helper. Timed by what the server
    // counts, not by this test's clock: each worker of each gateway reads the version every
    // 0.5 s (examples/nginx/nginx.conf) and the whole hash only when it changed, so the
    // change has reached a worker when its HGETALL comes, and within a second is within two
    // version reads of each of the four workers. The version reads are counted from when
    // the helper has returned, its write done: the workers go on polling while a busy
    // machine starts Python, and those reads came before the change.
    let rereads = server_calls(&mut con, "hgetall");
    shared_lists(&server, "python", "add");
    let reads = server_calls(&mut con, "hget");
    let workers = 2 * 2;
    let reached = support::wait_until(Duration::from_secs(10), || {
        server_calls(&mut con, "hgetall") - rereads >= workers
    });
    let polled = server_calls(&mut con, "hget") - reads;
    assert!(
        reached,
        "the deny list never reached every worker: {}",
        a.log()
    );
    // A worker reads the new lists at its first version read after the write (four reads in
    // all); a second read of each is the margin, for reads that land while this test asks.
    assert!(
        polled <= 2 * workers,
        "{polled} version reads before every worker had it"
    );
    for nginx in [&a, &b] {
        let denied = support::wait_until(Duration::from_secs(2), || {
            (0..4).all(|_| nginx.post("/_dev_api", body).status == 403)
        });
        assert!(denied, "the deny list never reached nginx: {}", nginx.log());
    }
    // And removed with the Node package's: once every worker has read the changed hash
    // again (the server counts its HGETALL), every request passes.
    let rereads = server_calls(&mut con, "hgetall");
    shared_lists(&server, "node", "remove");
    let reached = support::wait_until(Duration::from_secs(10), || {
        server_calls(&mut con, "hgetall") - rereads >= workers
    });
    assert!(
        reached,
        "the removal never reached every worker: {}",
        a.log()
    );
    for nginx in [&a, &b] {
        let passed = support::wait_until(Duration::from_secs(2), || {
            (0..4).all(|_| nginx.post("/_dev_api", body).status == 200)
        });
        assert!(passed, "the removal never reached nginx: {}", nginx.log());
    }
}

/// Adds or removes bob's deny entry in the gateway's lists with the `SharedLists` helper of
/// the Python or the Node package.
fn shared_lists(server: &Server, language: &str, change: &str) {
    let (hash, list, item) = ("gateway:lists", "deny", "ratelimiter:/_dev_api:bob");
    let mut command = match language {
        "python" => {
            let mut command = Command::new(support::clients_python());
            command.arg("-c").arg(format!(
                "import redis, ratelimit_module as m; \
                 m.SharedLists(redis.Redis(port={}), '{hash}').{change}('{list}', '{item}')",
                server.port()
            ));
            command
        }
        _ => {
            let mut command = Command::new("node");
            command
                .current_dir(support::repository().join("clients/node"))
                .arg("-e")
                .arg(format!(
                    "const Redis = require('ioredis'); const {{ SharedLists }} = require('.'); \
                     const client = new Redis({}); \
                     new SharedLists(client, '{hash}').{change}('{list}', '{item}') \
                       .then(() => client.quit(), (e) => {{ console.error(e); process.exit(1); }});",
                    server.port()
                ));
            command
        }
    };
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `nginx` blocks of docs/nginx.md and the README: each the body of an `http` block.
fn documented_configs() -> Vec<String> {
    let root = support::repository();
    let read = |page: &str| std::fs::read_to_string(root.join(page)).unwrap();
    let text = read("docs/nginx.md") + "\n" + &read("README.md");
    let mut configs = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```nginx" {
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|line| line.trim() != "```")
                .collect();
            configs.push(body.join("\n"));
        }
    }
    configs
}

#[test]
fn every_configuration_in_the_docs_runs() {
    let server = Server::start();
    let configs = documented_configs();
    assert!(
        configs.len() >= 3,
        "{} nginx blocks in docs/nginx.md",
        configs.len()
    );
    let mut con = server.connect();
    for config in configs {
        // Each block stands alone: what an earlier one left (its keys, of other types) must
        // not reach it.
        let _: () = query(&mut con, &["FLUSHALL", "SYNC"]);
        let http = config
            .replace("listen 8080;", "listen {listen};")
            .replace("port = 6379", &format!("port = {}", server.port()));
        assert!(
            http.contains("{listen}"),
            "a block without `listen 8080;`:\n{config}"
        );
        let nginx = Nginx::start(&http);
        let path = config
            .lines()
            .find_map(|line| line.trim().strip_prefix("location "))
            .and_then(|rest| rest.split_whitespace().next())
            .expect("a location");
        let response = nginx.get(path);
        assert_eq!(response.status, 200, "{path} of\n{config}\n{}", nginx.log());
        assert!(!nginx.log().contains("[error]"), "{}", nginx.log());
    }
}

/// The `lua` part of clients/conformance.json, the table every client package is tested
/// against: the words each limiter sends, and the HTTP fields each reply gives, and the
/// parts the package writes besides (leases' release and renewal, the lists' transactions,
/// the load reports), checked in nginx by the package's own functions (no call is made).
#[test]
fn the_lua_package_builds_and_reads_as_the_conformance_table_says() {
    let table = support::repository().join("clients/conformance.json");
    let check = r#"
        local cjson = require "cjson"
        local fields = require "resty.ratelimit_module.fields"
        local traffic = require "resty.ratelimit_module.traffic"
        local client = require "resty.ratelimit_module.client"
        local file = assert(io.open(TABLE))
        local table_ = cjson.decode(file:read("*a"))
        file:close()
        local function make(kind, args)
            return assert(require("resty.ratelimit_module." .. kind).new(REDIS, unpack(args)))
        end
        local function word(value)
            return type(value) == "number" and string.format("%.0f", value) or tostring(value)
        end
        local failures, checked = {}, 0
        for i, case in ipairs(table_.lua.commands) do
            local words
            if case.limiter == "combine" then
                local lims = { make("req", case.new[1]), make("count", case.new[2]) }
                words = traffic.command(lims, case.keys)
                -- What combine sends, from its cached parts, is these words encoded, and
                -- follows a limiter's new parameters.
                if traffic.encode(lims, case.keys) ~= client.encode(words) then
                    failures[#failures + 1] = "encoded " .. i .. ": " .. traffic.encode(lims, case.keys)
                end
                lims[1]:set_rate(lims[1].rate * 2)
                local after = client.encode(traffic.command(lims, case.keys))
                if traffic.encode(lims, case.keys) ~= after then
                    failures[#failures + 1] = "encoded after set_rate " .. i
                end
                lims[1]:set_rate(lims[1].rate / 2)
            else
                local lim = make(case.limiter, case.new)
                words = lim:command(case.key, case.commit)
                -- What incoming sends, from its templates, is these words encoded.
                if lim.encoded and lim:encoded(case.key, case.commit) ~= client.encode(words) then
                    failures[#failures + 1] = "encoded " .. i .. ": " .. lim:encoded(case.key, case.commit)
                end
            end
            words[1] = string.upper(words[1])
            local got = {}
            for j, value in ipairs(words) do got[j] = word(value) end
            if table.concat(got, " ") ~= table.concat(case.words, " ") then
                failures[#failures + 1] = "command " .. i .. ": " .. table.concat(got, " ")
            end
            checked = checked + 1
        end
        local specs = require "resty.ratelimit_module.specs"
        -- The fields noted in this request against the case's, each way.
        local function same_fields(case, what)
            local got = fields.headers()
            for name, value in pairs(case.fields) do
                if got[name] ~= value then
                    failures[#failures + 1] = what .. ": " .. name .. " " .. tostring(got[name])
                end
            end
            for name, value in pairs(got) do
                if case.fields[name] == nil then
                    failures[#failures + 1] = what .. ": unexpected " .. name .. " " .. value
                end
            end
        end
        local function check_fields(case, what)
            ngx.ctx.ratelimit_module_fields = nil
            make(case.limiter, case.new):note(case.reply)
            same_fields(case, what)
        end
        for i, case in ipairs(table_.lua.fields) do
            check_fields(case, "fields " .. i)
            checked = checked + 1
        end
        -- Calls whose limits change between them: each step's words and fields.
        for i, case in ipairs(table_.lua.changed_limits) do
            for j, step in ipairs(case.steps) do
                local built = make(step.limiter, step.new):command(step.key, step.commit)
                built[1] = string.upper(built[1])
                local got = {}
                for k, value in ipairs(built) do got[k] = word(value) end
                if table.concat(got, " ") ~= table.concat(step.words, " ") then
                    failures[#failures + 1] = "changed " .. i .. "." .. j .. ": " .. table.concat(got, " ")
                end
                check_fields(step, "changed " .. i .. "." .. j)
                checked = checked + 1
            end
        end
        -- The parts the package writes besides its limiters: leases' release and renewal,
        -- the lists' transactions, the load reports (their factors in any order).
        local lists = require "resty.ratelimit_module.lists"
        local load = require "resty.ratelimit_module.load"
        local others = 0
        local function same_words(built, wanted, what)
            local got = {}
            for j, value in ipairs(built) do got[j] = word(value) end
            got[1] = string.upper(got[1])
            if table.concat(got, " ") ~= table.concat(wanted, " ") then
                failures[#failures + 1] = what .. ": " .. table.concat(got, " ")
            end
        end
        local function same(built, wanted, what)
            same_words(built, wanted, what)
            others = others + 1
        end
        for i, case in ipairs(table_.leases) do
            if case.call == "release" then
                same(client.release_args(case.key, case.id), case.words, "release " .. i)
            elseif case.call == "renew" then
                same(client.renew_args(case.key, case.id, case.lease), case.words, "renew " .. i)
            end
        end
        for i, case in ipairs(table_.lists) do
            local built = case.change == "add"
                and lists.add_commands(case.hash, case.list, case.item, case.value)
                or lists.remove_commands(case.hash, case.list, case.item)
            for j, command in ipairs(built) do same(command, case.commands[j], "lists " .. i) end
        end
        for i, case in ipairs(table_.load) do
            local factors, wanted = {}, {}
            for _, pair in ipairs(case.factors) do factors[pair[1]] = pair[2] end
            local built = load.report_command(case.service, case.instance, case.ttl, factors)
            for j = 5, #case.words, 2 do wanted[case.words[j]] = case.words[j + 1] end
            for j = 5, #built, 2 do
                if wanted[built[j]] ~= built[j + 1] then
                    failures[#failures + 1] = "load " .. i .. ": " .. built[j] .. " " .. built[j + 1]
                end
                wanted[built[j]] = nil
            end
            if next(wanted) ~= nil or #built ~= #case.words then
                failures[#failures + 1] = "load " .. i .. ": factors"
            end
            same({ unpack(built, 1, 4) }, { unpack(case.words, 1, 4) }, "load " .. i)
        end
        -- The local limit's traces: every step's decision, limit and congestion, exactly.
        local concurrency = require "resty.ratelimit_module.concurrency"
        local INDEX = { critical_plus = 1, critical = 2, sheddable_plus = 3, sheddable = 4 }
        for name, value in pairs(table_.concurrency.defaults) do
            local shipped = concurrency.DEFAULTS[name]
            if type(value) == "table" then
                for j = 1, 4 do
                    if shipped[j] ~= value[j] then failures[#failures + 1] = "default " .. name end
                end
            elseif shipped ~= value then
                failures[#failures + 1] = "default " .. name
            end
        end
        local steps = 0
        for _, trace in ipairs(table_.concurrency.traces) do
            local limit = concurrency.new(trace.options)
            for step, event in ipairs(trace.events) do
                local decision = cjson.null
                if event[2] == "admit" then
                    decision = limit:admit(INDEX[event[3]], event[1], event[4])
                elseif event[2] == "leave" then
                    limit:leave(event[1])
                elseif event[2] == "back" then
                    limit:back(event[1])
                elseif event[2] == "level" then
                    limit:shed_by_level(event[1])
                else
                    local route = event[4]
                    if route == cjson.null then route = nil end
                    limit:finish(event[3], event[1], route, event[5])
                end
                local want = trace.expect[step]
                if decision ~= want[1] or limit.limit ~= want[2] or limit.congested ~= want[3] then
                    failures[#failures + 1] = trace.name .. " step " .. (step - 1) .. ": "
                        .. tostring(decision) .. " " .. string.format("%.17g", limit.limit)
                        .. " " .. tostring(limit.congested)
                end
                steps = steps + 1
            end
        end
        -- The parts every package reads: any call from limiter specs and options, its reply
        -- read into the one shape and its HTTP fields, leases, RL.TOP, load replies, counts.
        local generic = 0
        local function same_value(got, wanted)
            if wanted == cjson.null then
                return got == nil
            end
            return got == wanted
        end
        local function options_of(case)
            local options = {}
            for name, value in pairs(case.options) do options[name] = value end
            return options
        end
        local function check_call(case, what)
            local built = specs.command(case.limiters, options_of(case))
            local got = {}
            for j, value in ipairs(built) do got[j] = word(value) end
            if table.concat(got, " ") ~= table.concat(case.words, " ") then
                failures[#failures + 1] = what .. " words: " .. table.concat(got, " ")
            end
        end
        local function check_result(case, what)
            local result = specs.result(case.reply, case.limiters, options_of(case))
            for name, wanted in pairs(case.result) do
                if name == "each" then
                    if #result.each ~= #wanted then
                        failures[#failures + 1] = what .. ": each " .. #result.each
                    end
                    for j, one in ipairs(wanted) do
                        for field, value in pairs(one) do
                            if not same_value((result.each[j] or {})[field], value) then
                                failures[#failures + 1] = what .. ": each " .. j .. " " .. field
                            end
                        end
                    end
                elseif not same_value(result[name], wanted) then
                    failures[#failures + 1] = what .. ": " .. name .. " " .. tostring(result[name])
                end
            end
            ngx.ctx.ratelimit_module_fields = nil
            fields.note_result(result, case.limiters)
            same_fields(case, what)
        end
        for i, case in ipairs(table_.commands) do
            check_call(case, "commands " .. i)
            generic = generic + 1
        end
        for i, case in ipairs(table_.replies) do
            check_result(case, "replies " .. i)
            generic = generic + 1
        end
        for i, case in ipairs(table_.changed_limits) do
            for j, step in ipairs(case.steps) do
                check_call(step, "changed_limits " .. i .. "." .. j)
                check_result(step, "changed_limits " .. i .. "." .. j)
                generic = generic + 1
            end
        end
        for i, case in ipairs(table_.leases) do
            if case.call == "acquire" or case.call == "peek" then
                same_words(specs.lease_command(case.key, case.limit, case.lease,
                    case.quantity, case.call == "peek"), case.words, "leases " .. i)
                generic = generic + 1
            end
        end
        for i, case in ipairs(table_.lease_replies) do
            local lease = specs.lease_result(case.reply)
            if lease.allowed ~= case.allowed or lease.id ~= case.id
                or lease.remaining ~= case.remaining
                or not same_value(lease.retry_after, case.retry_after) then
                failures[#failures + 1] = "lease_replies " .. i
            end
            generic = generic + 1
        end
        for i, case in ipairs(table_.top) do
            local rows = specs.top_keys(case.replies, case.count)
            local got, wanted = {}, {}
            for j, row in ipairs(rows) do got[j] = table.concat(row, ",") end
            for j, row in ipairs(case.rows) do wanted[j] = table.concat(row, ",") end
            if table.concat(got, " ") ~= table.concat(wanted, " ") then
                failures[#failures + 1] = "top " .. i .. ": " .. table.concat(got, " ")
            end
            generic = generic + 1
        end
        for i, case in ipairs(table_.load_replies) do
            local standing = require("resty.ratelimit_module.protocol").standing(case.reply)
            local ok = standing.level == case.level and standing.instances == case.instances
            for j = 1, 4 do ok = ok and standing.shares[j] == case.shares[j] end
            if not ok then failures[#failures + 1] = "load_replies " .. i end
            generic = generic + 1
        end
        for i, case in ipairs(table_.counts) do
            same_words(specs.counts_command(case.limiter), case.words, "counts " .. i)
            local counts = specs.counts_result(case.limiter, case.reply)
            for name, value in pairs(case.counts) do
                if counts[name] ~= value then
                    failures[#failures + 1] = "counts " .. i .. ": " .. name
                end
            end
            generic = generic + 1
        end
        -- Every part of the table is read here; a part added to it fails until it is.
        local read = { about = true, commands = true, replies = true, leases = true,
            lease_replies = true, top = true, lists = true, load = true, load_replies = true,
            counts = true, changed_limits = true, concurrency = true, lua = true }
        for part in pairs(table_) do
            if not read[part] then failures[#failures + 1] = "part not read: " .. part end
        end
        ngx.say(#failures == 0 and ("ok " .. checked .. " " .. others .. " " .. steps
            .. " " .. generic)
            or table.concat(failures, "\n", 1, math.min(#failures, 20)))
    "#;
    let server = Server::start();
    let options = redis_options(server.port(), "");
    let http = http(
        &format!("{options}; TABLE = \"{}\"", table.display()),
        &format!("        location /conformance {{ content_by_lua_block {{ {check} }} }}\n"),
    );
    let nginx = Nginx::start(&http);
    let response = nginx.get("/conformance");
    assert_eq!(response.status, 200, "{}", nginx.log());
    // Every case of the table, commands and fields: the number of `"limiter"` entries in its
    // `lua` part.
    let text = std::fs::read_to_string(&table).unwrap();
    let lua_part = &text[text.find("\"lua\"").expect("a lua part")..];
    let cases = lua_part.matches("\"limiter\"").count();
    assert!(cases >= 9, "{cases} cases");
    // And the other parts it reads: each release and renewal, each command of the lists'
    // transactions, each load report.
    let calls = ["\"call\": \"release\"", "\"call\": \"renew\""]
        .iter()
        .map(|call| text.matches(call).count())
        .sum::<usize>();
    let lists = text.matches("\"HINCRBY\"").count() * 2;
    let reports = text.matches("\"instance\"").count();
    assert!(calls >= 2 && lists >= 4 && reports >= 1);
    // And every step of the local limit's traces.
    let steps = text.matches(", \"admit\", ").count()
        + text.matches(", \"finish\", ").count()
        + text.matches(", \"leave\"]").count()
        + text.matches(", \"back\"]").count()
        + text.matches(", \"level\"]").count();
    assert!(steps >= 1_000, "{steps} steps");
    // And the parts every package reads: each case with limiter specs (`commands`' calls,
    // `replies`, the steps of `changed_limits`, both), each acquire or peek, each lease reply
    // (an `id` that is not a release's or a renewal's), RL.TOP merge, load reply and count.
    let generic = [
        "\"limiters\": [",
        "\"call\": \"acquire\"",
        "\"call\": \"peek\"",
        "\"id\": ",
        "\"rows\": [",
        "\"instances\": ",
        "\"counts\": {",
    ]
    .iter()
    .map(|marker| text.matches(marker).count())
    .sum::<usize>()
        - calls;
    assert!(generic >= 40, "{generic} generic cases");
    assert_eq!(
        response.body.trim(),
        format!("ok {cases} {} {steps} {generic}", calls + lists + reports),
        "{}",
        response.body
    );
}

/// Shadow mode: a refused request goes through, counted as `shadow` in the metrics and
/// logged; the server decides and counts as usual.
#[test]
fn shadow_mode_lets_refusals_through_counted_and_logged() {
    let server = Server::start();
    let options = redis_options(
        server.port(),
        ", shadow = true, metrics = \"ratelimit_metrics\", name = \"trial\"",
    );
    let locations = location(
        "/trial",
        "require(\"resty.ratelimit_module.count\").new(REDIS, 2, 60)",
    ) + "        location = /metrics { content_by_lua_block { require(\"resty.ratelimit_module.metrics\").serve(\"ratelimit_metrics\") } }\n";
    let http = format!(
        "    lua_shared_dict ratelimit_metrics 1m;\n{}",
        http(&options, &locations)
    );
    let nginx = Nginx::start_with(&http, 1);
    let statuses: Vec<u16> = (0..4).map(|_| nginx.get("/trial?k=a").status).collect();
    assert_eq!(statuses, [200, 200, 200, 200], "{}", nginx.log());
    // The server counted the two it admitted; the two refusals wrote nothing.
    let mut con = server.connect();
    assert_eq!(
        query::<Vec<i64>, _>(&mut con, &["RL.WINDOW.COUNTS", "a", "60", "ANCHORED"])[2],
        2
    );
    let metrics = nginx.get("/metrics").body;
    for (outcome, count) in [("allowed", 2), ("shadow", 2), ("refused", 0)] {
        let line =
            format!("ratelimit_decisions_total{{policy=\"trial\",outcome=\"{outcome}\"}} {count}");
        assert!(
            count == 0 && !metrics.contains(&format!("outcome=\"{outcome}\""))
                || metrics.contains(&line),
            "{line}\n{metrics}"
        );
    }
    assert_eq!(
        nginx.log().matches("shadow: trial would refuse a").count(),
        2,
        "{}",
        nginx.log()
    );
}

/// The service's factors, as RL.LOAD.STATUS lists them: name -> value.
fn load_factors(con: &mut redis::Connection, service: &str) -> Vec<(String, f64)> {
    let status: Vec<redis::Value> = query(con, &["RL.LOAD.STATUS", service]);
    let words: Vec<String> = redis::from_redis_value(status[11].clone()).unwrap();
    words
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].parse().unwrap()))
        .collect()
}

/// The log phase tells the signals each request's route (its method and path): with the
/// worker's limit congested, two requests of about 0 ms (`/congest`, `/health`) and one of at
/// least 30 ms read a `min_rt` of at least 10 ms, where the least of all would be about 0.
#[test]
fn the_gateways_log_phase_tells_the_signals_each_requests_route() {
    let server = Server::start();
    let nginx = Nginx::start_with(
        &format!(
            "    lua_shared_dict ratelimit_load 1m;
    init_worker_by_lua_block {{
        require(\"resty.ratelimit_module.load\").start({}, {{ service = \"load:routes\",
            dict = \"ratelimit_load\", interval = 60 }})
    }}
    server {{
        listen {{listen}};
        access_by_lua_block {{
            require(\"resty.ratelimit_module.load\").shed(\"critical_plus\")
        }}
        log_by_lua_block {{ require(\"resty.ratelimit_module.load\").record() }}
        location = /congest {{ content_by_lua_block {{
            require(\"resty.ratelimit_module.load\").limit.congested = true
            ngx.say(\"ok\")
        }} }}
        location = /health {{ content_by_lua_block {{ ngx.say(\"ok\") }} }}
        location = /work {{ content_by_lua_block {{ ngx.sleep(0.03) ngx.say(\"ok\") }} }}
        location = /min_rt {{ content_by_lua_block {{
            local signals = require(\"resty.ratelimit_module.signals\")
            local factors = signals.sample({{ dict = ngx.shared.ratelimit_load, window = 10 }})
            ngx.say(factors.min_rt)
        }} }}
    }}",
            redis_options(server.port(), "")
        ),
        1,
    );
    for path in ["/congest", "/health", "/work"] {
        assert_eq!(nginx.get(path).status, 200, "{path}: {}", nginx.log());
    }
    let min_rt = nginx.get("/min_rt").body;
    let min_rt: f64 = min_rt.trim().parse().unwrap_or_else(|_| {
        panic!("min_rt {min_rt:?}: {}", nginx.log());
    });
    assert!(min_rt >= 10.0, "min_rt {min_rt}: {}", nginx.log());
}

/// `min_rt` is the no-load latency of the busy seconds' mix of routes, not of the fastest one:
/// a health check of 1 ms beside work of 30 ms or more reads as the work's pipe, not a thirtieth
/// of it (`bbr` would read an upstream at its capacity as thirty times over it). A second keeps
/// `ROUTES_KEPT` routes apart and the rest together. `ngx.now()` stays the same within the
/// handler, so every count falls in one second.
#[test]
fn the_gateways_min_rt_is_the_no_load_latency_of_its_mix_of_routes() {
    let nginx = Nginx::start_with(
        "    lua_shared_dict ratelimit_signals 1m;
    server {
        listen {listen};
        location = /mix { content_by_lua_block {
            local signals = require(\"resty.ratelimit_module.signals\")
            local dict = ngx.shared.ratelimit_signals
            dict:flush_all()
            signals.count(dict, 10, 1, 200, true, \"GET /health\")
            for _, millis in ipairs({ 40, 30, 50, 35 }) do
                signals.count(dict, 10, millis, 200, true, \"GET /work\")
            end
            local factors = signals.sample({ dict = dict, window = 10 })
            ngx.say(factors.max_rps, \" \", factors.min_rt)
        } }
        location = /many { content_by_lua_block {
            local signals = require(\"resty.ratelimit_module.signals\")
            local dict = ngx.shared.ratelimit_signals
            dict:flush_all()
            for route = 1, signals.ROUTES_KEPT do
                signals.count(dict, 10, 10, 200, true, \"GET /\" .. route)
            end
            signals.count(dict, 10, 20, 200, true, \"GET /late\")
            signals.count(dict, 10, 60, 200, true, \"GET /later\")
            local factors = signals.sample({ dict = dict, window = 10 })
            ngx.say(signals.ROUTES_KEPT, \" \", factors.min_rt)
        } }
    }",
        1,
    );
    let mix = nginx.get("/mix");
    assert_eq!(mix.status, 200, "{}", nginx.log());
    // The work's least (30 ms) for its four requests, the check's (1 ms) for its one.
    let fields: Vec<f64> = (mix.body.split_whitespace())
        .map(|field| field.parse().expect("a number"))
        .collect();
    assert_eq!(fields[0], 5.0, "{}", mix.body);
    assert!(
        (fields[1] - (4.0 * 30.0 + 1.0) / 5.0).abs() < 1e-9,
        "{}",
        mix.body
    );
    let many = nginx.get("/many");
    assert_eq!(many.status, 200, "{}", nginx.log());
    let fields: Vec<f64> = (many.body.split_whitespace())
        .map(|field| field.parse().expect("a number"))
        .collect();
    // Past the routes kept, two share an entry: the least of the two for both requests.
    let kept = fields[0];
    let want = (kept * 10.0 + 2.0 * 20.0) / (kept + 2.0);
    assert!((fields[1] - want).abs() < 1e-9, "{}", many.body);
}

#[test]
fn load_shedding_reports_the_gateways_signals_and_sheds_by_priority_in_every_worker() {
    let server = Server::start();
    let mut con = server.connect();
    let policy = [
        "RL.LOAD.POLICY",
        "load:gateway",
        "HOLD",
        "0",
        "FACTOR",
        "backlog",
        "SUM",
        "LEVEL",
        "cpu",
        "0.5",
        "SHARES",
        "1",
        "1",
        "0",
        "0",
    ];
    assert_eq!(query::<String, _>(&mut con, &policy), "OK");
    let start = |shadow: bool| {
        format!(
            "require(\"resty.ratelimit_module.load\").start({}, {{ service = \"load:gateway\", \
             dict = \"ratelimit_load\", metrics = \"ratelimit_metrics\", interval = 0.2, \
             instance = \"{}\", shadow = {shadow}, \
             factors = function() return {{ backlog = 7 }} end }})",
            redis_options(server.port(), ""),
            if shadow { "shadow" } else { "gateway" },
        )
    };
    let config = |shadow: bool| {
        format!(
            "    lua_shared_dict ratelimit_load 1m;
    lua_shared_dict ratelimit_metrics 1m;
    init_worker_by_lua_block {{ {} }}
    server {{
        listen {{listen}};
        location / {{
            access_by_lua_block {{
                require(\"resty.ratelimit_module.load\").shed(ngx.var.http_x_priority)
            }}
            content_by_lua_block {{ ngx.say(\"ok\") }}
            log_by_lua_block {{ require(\"resty.ratelimit_module.load\").record() }}
        }}
        location = /metrics {{ content_by_lua_block {{
            require(\"resty.ratelimit_module.metrics\").serve(\"ratelimit_metrics\") }} }}
    }}",
            start(shadow)
        )
    };
    // Two workers: the first reports, both shed from the shared dict.
    let nginx = Nginx::start_with(&config(false), 2);
    let shadow = Nginx::start_with(&config(true), 1);
    let get = |nginx: &Nginx, priority: &str| nginx.get_with("/", &[("X-Priority", priority)]);
    for _ in 0..20 {
        assert_eq!(get(&nginx, "sheddable").status, 200, "{}", nginx.log());
    }
    // The gateway's own signals reach the server: what it served, the host's load, and its
    // own factor (7 from each of the two gateways).
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            let factors = load_factors(&mut con, "load:gateway");
            let value = |wanted: &str| {
                factors
                    .iter()
                    .find(|(name, _)| name == wanted)
                    .map(|(_, value)| *value)
            };
            value("requests") >= Some(20.0)
                && value("backlog") == Some(14.0)
                && value("load").is_some()
        }),
        "the gateway never reported its requests: {:?}\n{}",
        load_factors(&mut con, "load:gateway"),
        nginx.log()
    );
    // Three hot instances: the mean CPU is past 0.5 whatever the gateways report.
    for hot in ["hot-1", "hot-2", "hot-3"] {
        let _: Vec<redis::Value> = query(
            &mut con,
            &["RL.LOAD.REPORT", "load:gateway", hot, "60000", "cpu", "1"],
        );
    }
    assert!(
        support::wait_until(Duration::from_secs(20), || get(&nginx, "sheddable").status
            == 503),
        "the gateway never shed: {}",
        nginx.log()
    );
    // Every worker sheds (20 requests reach both), and says when to come back.
    let refused: Vec<Response> = (0..20).map(|_| get(&nginx, "sheddable")).collect();
    assert_eq!(statuses(&refused, 503), 20, "{}", nginx.log());
    assert!(refused
        .iter()
        .all(|response| response.header("Retry-After") == Some("1")));
    // sheddable_plus shares sheddable's 0; the critical classes pass; a priority the service
    // does not know is sheddable.
    assert_eq!(get(&nginx, "sheddable_plus").status, 503);
    assert_eq!(get(&nginx, "no-such-class").status, 503);
    assert_eq!(get(&nginx, "critical").status, 200);
    assert_eq!(get(&nginx, "critical_plus").status, 200);
    // What it shed is not the service's: its reports count only what it served (a shed
    // request counted as a failed one would hold the level up).
    for _ in 0..5 {
        assert_eq!(get(&nginx, "critical").status, 200);
    }
    let value = |factors: &[(String, f64)], wanted: &str| {
        factors
            .iter()
            .find(|(name, _)| name == wanted)
            .map_or(0.0, |(_, value)| *value)
    };
    let mut factors = Vec::new();
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            factors = load_factors(&mut con, "load:gateway");
            value(&factors, "successes") >= 27.0
        }),
        "the served requests were never reported: {factors:?}"
    );
    assert_eq!(
        value(&factors, "requests"),
        value(&factors, "successes"),
        "{factors:?}"
    );
    // In shadow mode the same request goes through, counted and logged.
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            get(&shadow, "sheddable").status == 200
                && shadow.get("/metrics").body.contains("outcome=\"shadow\"")
        }),
        "shadow mode shed, or did not count: {}",
        shadow.log()
    );
    assert!(
        shadow
            .log()
            .contains("shadow: sheddable would be shed at level 1 of load:gateway"),
        "{}",
        shadow.log()
    );
    let metrics = nginx.get("/metrics").body;
    assert!(
        metrics.contains("ratelimit_load_level{service=\"load:gateway\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "ratelimit_load_decisions_total{service=\"load:gateway\",priority=\"sheddable\",\
             outcome=\"shed\"} "
        ) && metrics.contains(
            "ratelimit_load_decisions_total{service=\"load:gateway\",priority=\"critical\",\
             outcome=\"admitted\"} 6\n"
        ),
        "{metrics}"
    );
    // The load falls: the hot instances report cool, and the gateway admits everything again.
    for hot in ["hot-1", "hot-2", "hot-3"] {
        let _: Vec<redis::Value> = query(
            &mut con,
            &["RL.LOAD.REPORT", "load:gateway", hot, "60000", "cpu", "0"],
        );
    }
    assert!(
        support::wait_until(Duration::from_secs(20), || get(&nginx, "sheddable").status
            == 200),
        "the gateway kept shedding after the load fell: {}",
        nginx.log()
    );
}

#[test]
fn a_gateway_whose_reports_fail_sheds_by_the_last_level_then_admits_everything() {
    let mut server = Server::start();
    let mut con = server.connect();
    let policy = [
        "RL.LOAD.POLICY",
        "load:gone",
        "HOLD",
        "0",
        "LEVEL",
        "cpu",
        "0.5",
        "SHARES",
        "1",
        "1",
        "1",
        "0",
    ];
    assert_eq!(query::<String, _>(&mut con, &policy), "OK");
    let _: Vec<redis::Value> = query(
        &mut con,
        &["RL.LOAD.REPORT", "load:gone", "hot", "60000", "cpu", "1"],
    );
    let http = format!(
        "    lua_shared_dict ratelimit_load 1m;
    init_worker_by_lua_block {{
        require(\"resty.ratelimit_module.load\").start({}, {{ service = \"load:gone\",
            dict = \"ratelimit_load\", interval = 0.2, ttl = 1 }})
    }}
    server {{
        listen {{listen}};
        location / {{
            access_by_lua_block {{
                require(\"resty.ratelimit_module.load\").shed(ngx.var.http_x_priority)
            }}
            content_by_lua_block {{ ngx.say(\"ok\") }}
            log_by_lua_block {{ require(\"resty.ratelimit_module.load\").record() }}
        }}
    }}",
        redis_options(server.port(), "")
    );
    let nginx = Nginx::start(&http);
    let get = |priority: &str| nginx.get_with("/", &[("X-Priority", priority)]).status;
    assert!(
        support::wait_until(Duration::from_secs(20), || get("sheddable") == 503),
        "the gateway never shed: {}",
        nginx.log()
    );
    assert_eq!(get("sheddable_plus"), 200);
    // The server goes: the last level holds for the report's time to live (1 s), then the
    // gateway admits everything rather than shed on a level nobody confirms.
    server.kill();
    assert!(
        support::wait_until(Duration::from_secs(20), || get("sheddable") == 200),
        "the gateway kept shedding on a level nobody confirmed: {}",
        nginx.log()
    );
    assert!(
        // The client logs the failure (at most once a second), from the reporting timer.
        nginx
            .log()
            .contains("connection refused, context: ngx.timer"),
        "{}",
        nginx.log()
    );
}

/// Each worker's own limit, with the server frozen: no level (the reports get no answer),
/// yet a queue that stands at the upstream sheds the least important classes first. The
/// upstream here is a location that sleeps as long as it is asked; what the test asserts
/// follows from the latencies nginx measured, not from its own clock.
#[test]
fn a_workers_own_limit_sheds_by_priority_with_the_server_frozen() {
    let server = Server::start();
    server.signal(libc::SIGSTOP);
    let http = format!(
        "    lua_shared_dict ratelimit_load 1m;
    init_worker_by_lua_block {{
        require(\"resty.ratelimit_module.load\").start({}, {{ service = \"load:frozen\",
            dict = \"ratelimit_load\", interval = 0.2, ttl = 1 }})
    }}
    server {{
        listen {{listen}};
        location / {{
            access_by_lua_block {{
                require(\"resty.ratelimit_module.load\").shed(ngx.var.http_x_priority)
            }}
            content_by_lua_block {{ ngx.sleep(tonumber(ngx.var.arg_sleep) or 0) ngx.say(\"ok\") }}
            log_by_lua_block {{ require(\"resty.ratelimit_module.load\").record() }}
        }}
        location = /limit {{ content_by_lua_block {{
            local limit = require(\"resty.ratelimit_module.load\").limit
            ngx.say(limit.limit, \" \", tostring(limit.congested), \" \", limit.inflight)
        }} }}
        location = /routes {{ content_by_lua_block {{
            local names = require(\"resty.ratelimit_module.load\").limit:route_names()
            table.sort(names)
            ngx.say(table.concat(names, \",\"))
        }} }}
    }}",
        redis_options(server.port(), "")
    );
    let nginx = Nginx::start_with(&http, 1);
    let get = |path: &str, priority: &str| nginx.get_with(path, &[("X-Priority", priority)]).status;
    let at_once = |count: usize, path: &str, priority: &str| -> Vec<u16> {
        std::thread::scope(|scope| {
            let calls: Vec<_> = (0..count)
                .map(|_| scope.spawn(|| get(path, priority)))
                .collect();
            calls.into_iter().map(|call| call.join().unwrap()).collect()
        })
    };
    // The no-load latency: a request of a millisecond.
    assert_eq!(get("/?sleep=0.001", "critical"), 200);
    // A queue that stands: 15 requests at once, each a second long, under the limit of 20.
    assert_eq!(
        at_once(15, "/?sleep=1", "critical"),
        [200; 15],
        "{}",
        nginx.log()
    );
    // Three more: the first of them to end closes the interval the 15 ended in, whose
    // fastest took a second, over four times the target: congestion, the limit cut to 4.
    assert_eq!(at_once(3, "/?sleep=1", "critical_plus"), [200; 3]);
    let status = nginx.get("/limit").body;
    assert!(status.starts_with("4 true"), "{status}\n{}", nginx.log());
    // Three in flight of 4: only critical_plus has room (sheddable may fill 0.8, critical 2.4).
    std::thread::scope(|scope| {
        let held = scope.spawn(|| at_once(3, "/?sleep=1", "critical_plus"));
        assert!(
            support::wait_until(Duration::from_secs(20), || nginx
                .get("/limit")
                .body
                .ends_with(" 3\n")),
            "{}",
            nginx.get("/limit").body
        );
        assert_eq!(get("/", "sheddable"), 503);
        assert_eq!(get("/", "critical"), 503);
        assert_eq!(get("/", "critical_plus"), 200);
        assert_eq!(held.join().unwrap(), [200; 3]);
    });
    // Each route's latency is kept apart, named by its method and path (its arguments aside).
    assert_eq!(get("/other?sleep=0", "critical_plus"), 200);
    assert!(
        support::wait_until(Duration::from_secs(20), || nginx.get("/routes").body
            == "GET /,GET /other\n"),
        "{}",
        nginx.get("/routes").body
    );
    server.signal(libc::SIGCONT);
}

/// A request waiting on the rate-limit server leaves the worker's requests in flight until the
/// call ends (a frozen server's timeout is not the upstream's concurrency): read from the one
/// worker while the request waits, its limit counts none in flight.
#[test]
fn a_request_waiting_on_the_rate_limit_server_is_not_in_the_workers_flight() {
    let server = Server::start();
    // A wait far longer than the test takes to read the worker's limit while it waits.
    let redis = format!(
        "{{ host = \"127.0.0.1\", port = {}, timeout = 5000, on_error = \"allow\" }}",
        server.port()
    );
    let http = format!(
        "    lua_shared_dict ratelimit_load 1m;
    lua_shared_dict marks 1m;
    init_worker_by_lua_block {{
        require(\"resty.ratelimit_module.load\").start({redis}, {{ service = \"load:waits\",
            dict = \"ratelimit_load\", interval = 3600 }})
        LIMIT = assert(require(\"resty.ratelimit_module.req\").new({redis}, 100, 100))
    }}
    server {{
        listen {{listen}};
        location = /limited {{
            access_by_lua_block {{
                require(\"resty.ratelimit_module.load\").shed(\"critical\")
                ngx.shared.marks:incr(\"calls\", 1, 0)
                assert(LIMIT:incoming(\"waits\", true))
            }}
            content_by_lua_block {{ ngx.say(\"ok\") }}
            log_by_lua_block {{ require(\"resty.ratelimit_module.load\").record() }}
        }}
        location = /limit {{ content_by_lua_block {{
            local limit = require(\"resty.ratelimit_module.load\").limit
            ngx.say(ngx.shared.marks:get(\"calls\"), \" \", limit.inflight)
        }} }}
    }}"
    );
    let nginx = Nginx::start_with(&http, 1);
    // Answered by the server: nothing left in flight.
    assert_eq!(nginx.get("/limited").status, 200, "{}", nginx.log());
    assert_eq!(nginx.get("/limit").body, "1 0\n");
    server.signal(libc::SIGSTOP);
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| nginx.get("/limited").status);
        // One worker: /limit runs only while the request waits on the frozen server's socket
        // (its call counted): then it is not in flight (without it, "2 1").
        let mut read = String::new();
        assert!(support::wait_until(Duration::from_secs(20), || {
            read = nginx.get("/limit").body;
            read.starts_with("2 ")
        }));
        assert_eq!(read, "2 0\n");
        assert_eq!(waiting.join().unwrap(), 200, "allowed after the timeout");
    });
    server.signal(libc::SIGCONT);
    assert_eq!(nginx.get("/limit").body, "2 0\n");
}

/// What the level refuses counts among the worker's limit's refusals, so congestion holds while
/// the level leaves the limit only a trickle: the Python, Node, Rust, Java and Go shedders'
/// test of the same name, in one request of one worker whose `ngx.now` a fake clock stands in
/// for (the scenario yields nowhere, so no timer runs in between) and whose level is set in
/// the shared dictionary as a report's answer would set it.
#[test]
fn what_the_level_sheds_holds_the_workers_limit_congested() {
    let server = Server::start();
    let http = format!(
        "    lua_shared_dict ratelimit_load 1m;
    init_worker_by_lua_block {{
        require(\"resty.ratelimit_module.load\").start({}, {{ service = \"load:level-holds\",
            dict = \"ratelimit_load\", interval = 100 }})
    }}
    server {{
        listen {{listen}};
        location = /scenario {{ content_by_lua_block {{
            local load = require(\"resty.ratelimit_module.load\")
            local limit = load.limit
            local dict = ngx.shared.ratelimit_load
            local real_now = ngx.now
            -- Whole microseconds, so that the limit's intervals end exactly where the
            -- scenario says (seconds in a float, 0.1 added to the time of day can read as
            -- 99,999 µs, and an interval would not end).
            local clock = math.floor(real_now()) * 1000000
            ngx.now = function() return clock / 1000000 end
            local function ms(milliseconds) clock = clock + milliseconds * 1000 end
            local function step(name, ok)
                if not ok then error(name, 0) end
            end
            local ok, failed = pcall(function()
                -- A no-load latency of 5 ms, then a queue that stands: 20 in flight, and
                -- every one of the next interval taking 100 ms (over four times the target).
                step(\"the first request\", load.admit(\"critical\"))
                ms(5)
                limit:finish(5000, clock)
                for _ = 1, 20 do
                    step(\"under the limit of 20\", load.admit(\"critical\"))
                end
                ms(100)
                for _ = 1, 10 do limit:finish(100000, clock) end
                ms(100)
                limit:finish(100000, clock)
                step(\"the flood congests\", limit.congested)
                while limit.inflight > 0 do limit:finish(5000, clock) end
                -- The level a report answers: the top two classes admitted, the rest shed.
                dict:set(\"level\", 1)
                for i, share in ipairs({{ 1, 1, 0, 0 }}) do dict:set(\"share|\" .. i, share) end
                dict:set(\"reported_at\", ngx.now())
                -- An interval in which the level refuses ten and leaves the limit one, fast,
                -- under half the limit: the overload goes on, and congestion holds.
                ms(100)
                step(\"critical at level 1\", load.admit(\"critical\"))
                ms(5)
                limit:finish(5000, clock)
                for _ = 1, 10 do
                    step(\"sheddable shed by the level\", not load.admit(\"sheddable\"))
                end
                ms(100)
                step(\"critical_plus at level 1\", load.admit(\"critical_plus\"))
                step(\"ten refused by the level, one admitted: congested\", limit.congested)
                -- Intervals the level refuses nothing of: congestion ends at the fourth in a
                -- row.
                step(\"critical_plus again\", load.admit(\"critical_plus\"))
                limit:finish(5000, clock)
                for calm = 1, 3 do
                    ms(100)
                    load.admit(\"critical_plus\")
                    step(calm .. \" calm intervals in a row: congested\", limit.congested)
                    limit:finish(5000, clock)
                end
                ms(100)
                load.admit(\"critical_plus\")
                step(\"nothing refused, under half the limit: not congested\",
                    not limit.congested)
            end)
            ngx.now = real_now
            ngx.say(ok and \"ok\" or failed)
        }} }}
    }}",
        redis_options(server.port(), "")
    );
    let nginx = Nginx::start_with(&http, 1);
    let answer = nginx.get("/scenario");
    assert_eq!(answer.body, "ok\n", "{}", nginx.log());
}

#[test]
fn combine_takes_any_limiter_returns_its_errors_and_starts_at_an_exact_zero() {
    let server = Server::start();
    let locations = "        location = /mixed {
            content_by_lua_block {
                local traffic = require(\"resty.ratelimit_module.traffic\")
                local req = assert(require(\"resty.ratelimit_module.req\").new(REDIS, 2, 10))
                local count = assert(require(\"resty.ratelimit_module.count\").new(REDIS, 5, 60))
                -- One call: a first request waits exactly 0, with an excess of exactly 0.
                local states = {}
                local delay = traffic.combine({ req, count }, { \"z1\", \"z1c\" }, states)
                ngx.say(\"first: \", delay, \" \", states[1], \" \", states[2])
                -- Another package's limiter: combined as the original does, one by one.
                local seen = {}
                local foreign = {
                    incoming = function(_, key, commit)
                        seen[#seen + 1] = key .. (commit and \"+\" or \"-\")
                        return 0.25, 7
                    end,
                    uncommit = function(_, key) seen[#seen + 1] = key .. \"~\" return true end,
                }
                states = {}
                delay = traffic.combine({ req, foreign }, { \"z2\", \"f\" }, states)
                ngx.say(\"foreign: \", delay, \" \", states[1], \" \", states[2], \" \",
                    table.concat(seen, \",\"))
                local refusing = {
                    incoming = function() return nil, \"rejected\" end,
                    uncommit = function() return true end,
                }
                seen = {}
                local refused, err = traffic.combine({ foreign, refusing }, { \"f\", \"r\" })
                ngx.say(\"refused: \", tostring(refused), \" \", err, \" \", table.concat(seen, \",\"))
                local broken = { incoming = function() error(\"boom\") end, uncommit = function() end }
                local raised
                raised, err = traffic.combine({ broken }, { \"b\" })
                ngx.say(\"raised: \", tostring(raised), \" \", tostring(err):find(\"boom\", 1, true) ~= nil)
            }
        }
";
    let nginx = Nginx::start(&http(&redis_options(server.port(), ""), locations));
    let response = nginx.get("/mixed");
    assert_eq!(
        response.body,
        "first: 0 0 4\nforeign: 0.25 0 7 f+\nrefused: nil rejected f-\nraised: nil true\n",
        "{}",
        nginx.log()
    );
    // The one-by-one path committed req's request on z2: the server holds it.
    let mut con = server.connect();
    assert!(query::<bool, _>(&mut con, &["EXISTS", "z2"]));
}

#[test]
fn leaving_in_a_phase_that_talks_to_redis_frees_the_slot_for_the_same_request() {
    let server = Server::start();
    let locations = "        location = /again {
            content_by_lua_block {
                local conn = assert(require(\"resty.ratelimit_module.conn\").new(REDIS, 1, 0, 0.5))
                local d1, c1 = conn:incoming(\"same\", true)
                local left = conn:leaving(\"same\", 0.1)
                local d2, c2 = conn:incoming(\"same\", true)
                ngx.say(d1, \" \", c1, \" \", left, \" \", d2, \" \", c2)
                conn:leaving(\"same\", 0.1)
            }
        }
";
    let nginx = Nginx::start(&http(&redis_options(server.port(), ""), locations));
    assert_eq!(nginx.get("/again").body, "0 1 0 0 1\n", "{}", nginx.log());
    // Both slots were freed before the response: the key is gone.
    let mut con = server.connect();
    assert!(!query::<bool, _>(&mut con, &["EXISTS", "same"]));
}

#[test]
fn a_reload_with_the_server_gone_keeps_the_lists_the_gateway_last_read() {
    let mut server = Server::start();
    let mut con = server.connect();
    load_lists(&mut con);
    let nginx = gateway(server.port());
    let caller = "{\"seqId\": \"xx-xx-xx\", \"caller\":\"1\"}";
    // A key on the deny list is refused once the workers have read the lists.
    assert!(
        support::wait_until(Duration::from_secs(20), || nginx
            .post("/_dev_api/blocked", caller)
            .status
            == 403),
        "{}",
        nginx.log()
    );
    // The server goes, then a reload: both old workers leave, two new ones start from the
    // shared dict (the gateway fails open: without the lists the key would get 200).
    server.kill();
    let old = nginx.workers();
    assert_eq!(old.len(), 2, "{old:?}");
    nginx.reload();
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            let now = nginx.workers();
            now.len() == 2 && now.iter().all(|pid| !old.contains(pid))
        }),
        "the reload did not replace the workers: {:?} {}",
        nginx.workers(),
        nginx.log()
    );
    let blocked = nginx.post("/_dev_api/blocked", caller);
    assert_eq!(
        (blocked.status, json_code(&blocked)),
        (403, 403),
        "{}",
        nginx.log()
    );
}

/// Calls of `command` the server has counted (`INFO commandstats`).
fn server_calls(con: &mut redis::Connection, command: &str) -> u64 {
    let info: String = query(con, &["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Quota leases in the gateway: two nginx of two workers each spend a count of 100 a minute
/// in batches of 10 from their shared dicts. Every unit spent was counted by the server when
/// taken, so within the window no more than 100 are admitted, and no fewer than 100 less a
/// batch per nginx (what the other may hold unspent); the server sees about a call per batch,
/// not one per request; once the limit binds, each nginx refuses from its dict until the
/// retry_after the server gave; and closing gives back what is unspent.
#[test]
fn quota_leases_hold_the_limit_within_their_bound_with_a_call_per_batch() {
    let server = Server::start();
    let quota = "require(\"resty.ratelimit_module.quota\").new(
        require(\"resty.ratelimit_module.count\").new(REDIS, 100, 60),
        { dict = \"ratelimit_quota\", batch = 10, hold = 30 })";
    let locations = format!(
        "{}        location /close {{
            content_by_lua_block {{
                local q = assert({quota})
                q:close(ngx.var.arg_k)
                ngx.say(\"closed\")
            }}
        }}
",
        location("/quota", quota)
    );
    let config = http(&redis_options(server.port(), ""), &locations);
    let (a, b) = (Nginx::start_with(&config, 2), Nginx::start_with(&config, 2));
    let mut con = server.connect();
    // Four clients, each sending its requests one after another, to either nginx.
    let clients: Vec<_> = [a.port(), b.port(), a.port(), b.port()]
        .into_iter()
        .map(|port| {
            thread::spawn(move || {
                (0..60)
                    .map(|_| support::nginx::request(port, "GET", "/quota?k=hot", &[], "").status)
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let statuses: Vec<u16> = clients
        .into_iter()
        .flat_map(|client| client.join().unwrap())
        .collect();
    let admitted = statuses.iter().filter(|&&status| status == 200).count();
    let refused = statuses.iter().filter(|&&status| status == 503).count();
    assert_eq!(admitted + refused, 240, "{statuses:?}\n{}", a.log());
    assert!((80..=100).contains(&admitted), "{admitted} admitted");
    // A call per batch of 10, a few for the requests that found a batch being taken, and a
    // refused batch call per nginx: far fewer than the 240 requests.
    let calls = server_calls(&mut con, "rl.window");
    eprintln!("quota: {admitted} admitted, {calls} server calls for 240 requests");
    assert!(calls <= 60, "{calls} calls for 240 requests");
    // The limit binds: more requests are refused from the dicts, without a call.
    for port in [a.port(), b.port()] {
        for _ in 0..20 {
            let response = support::nginx::request(port, "GET", "/quota?k=hot", &[], "");
            assert_eq!(response.status, 503);
        }
    }
    assert_eq!(server_calls(&mut con, "rl.window"), calls);
    // Closing gives back what each nginx holds: the server then counts what was admitted.
    for nginx in [&a, &b] {
        assert_eq!(nginx.get("/close?k=hot").status, 200);
    }
    let peek: Vec<i64> = query(
        &mut con,
        &["RL.WINDOW_RO", "hot", "100", "60", "0", "ANCHORED"],
    );
    assert_eq!(peek[2], 100 - admitted as i64, "{peek:?}");
}

/// Quota leases under a limit that binds: a `req` of 1,000 a second in bursts of 100, taken
/// in batches of 50. Past the burst, a call takes half a batch, waited for on the server, and
/// the workers refuse from the dict until it may be spent: a call per half batch admitted, not
/// one for each unit that refilled since the last.
#[test]
fn a_binding_quota_costs_a_call_per_half_batch() {
    let server = Server::start();
    let quota = "require(\"resty.ratelimit_module.quota\").new(
        require(\"resty.ratelimit_module.req\").new(REDIS, 1000, 99),
        { dict = \"ratelimit_quota\", batch = 50, hold = 1 })";
    let nginx = Nginx::start_with(
        &http(
            &redis_options(server.port(), ""),
            &location("/quota", quota),
        ),
        2,
    );
    let mut con = server.connect();
    let mut admitted = 0;
    for _ in 0..100_000 {
        if nginx.get("/quota?k=binding").status == 200 {
            admitted += 1;
            if admitted == 600 {
                break;
            }
        }
    }
    let calls = server_calls(&mut con, "cl.throttle");
    eprintln!("binding quota: {admitted} admitted, {calls} server calls");
    assert_eq!(admitted, 600, "{}", nginx.log());
    // The burst, a few calls that get what refilled, then half a batch a call: 24 calls for
    // the 600 at best. How many take only what refilled since the last depends on how fast the
    // requests come (a busy machine's are slower), so the bound is twice that, still far from
    // the call per unit refilled (hundreds) that a lease which never binds would cost.
    assert!(
        calls <= 2 * (600 / 25),
        "{calls} calls for {admitted} admitted"
    );
}

/// A server with a password, and a database other than 0: each new connection of the
/// package authenticates and selects before its first command (and a wrong password is an
/// error the limiter returns).
#[test]
fn a_password_and_a_database_are_set_up_on_each_new_connection() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = query(&mut con, &["CONFIG", "SET", "requirepass", "s3cret"]);
    let locations = [
        location(
            "/good",
            "require(\"resty.ratelimit_module.count\").new(REDIS, 3, 60)",
        ),
        location(
            "/bad",
            "require(\"resty.ratelimit_module.count\").new(BAD, 3, 60)",
        ),
    ]
    .concat();
    let options = redis_options(server.port(), ", password = \"s3cret\", db = 2");
    let bad = redis_options(server.port(), ", password = \"wrong\"");
    let nginx = Nginx::start(&http(&format!("{options}; BAD = {bad}"), &locations));
    let states: Vec<String> = (0..4)
        .map(|_| {
            let response = nginx.get("/good?k=db");
            format!(
                "{} {}",
                response.status,
                response.header("X-State").unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        states,
        ["200 2", "200 1", "200 0", "503 -"],
        "{}",
        nginx.log()
    );
    let _: () = query(&mut con, &["SELECT", "2"]);
    let exists: i64 = query(&mut con, &["EXISTS", "db"]);
    assert_eq!(exists, 1, "the key is in database 2");
    let response = nginx.get("/bad?k=db");
    assert_eq!(response.status, 500);
    let error = response.header("X-Error").unwrap_or_default();
    assert!(error.starts_with("AUTH: WRONGPASS"), "{error}");
}
