//! ACL: the commands declare their key (key specs), so key patterns restrict them like any
//! Redis command; and they sit in ACL categories where the server lets modules say so
//! (`@write @fast` on Redis 7.2+ and Valkey, and the module's own `@ratelimit` on Redis 7.4+ and
//! Valkey 8+, which `ACL CAT ratelimit` lists on Redis 8+ and Valkey 8.1+).

mod support;

use redis::{Connection, Value};
use support::{error, ints, query, Server, ServerRelease};

/// A call of each command on `key`.
fn calls(key: &str) -> [Vec<&str>; 3] {
    [
        vec!["CL.THROTTLE", key, "4", "1", "60"],
        vec!["RL.WINDOW", key, "5", "60"],
        vec!["RL.LOG", key, "5", "60"],
    ]
}

/// Each command once, on keys `<prefix>0`, `<prefix>1`, `<prefix>2` (one per command, whose
/// states differ), checking that each admits the request with 4 of 5 remaining.
fn admit_each(con: &mut Connection, prefix: &str) {
    for i in 0..3 {
        let key = format!("{prefix}{i}");
        let call = &calls(&key)[i];
        assert_eq!(ints(con, call)[..3], [0, 5, 4], "{call:?}");
    }
}

/// A connection authenticated as a new user with the ACL `rules`.
fn connect_as(server: &Server, user: &str, rules: &[&str]) -> Connection {
    let mut admin = server.connect();
    let mut setuser = vec!["ACL", "SETUSER", user, "on", ">pw"];
    setuser.extend_from_slice(rules);
    let _: () = query(&mut admin, &setuser);
    let mut con = server.connect();
    let _: () = query(&mut con, &["AUTH", user, "pw"]);
    con
}

/// Keys in the database.
fn keys(server: &Server) -> Vec<String> {
    let mut keys: Vec<String> = query(&mut server.connect(), &["KEYS", "*"]);
    keys.sort();
    keys
}

#[test]
fn key_patterns_restrict_every_command() {
    let server = Server::start();
    let mut con = connect_as(&server, "u", &["~t1:*", "+@all"]);
    for call in calls("t2:x") {
        let refused = error(&mut con, &call);
        assert!(refused.starts_with("NOPERM"), "{call:?}: {refused}");
    }
    admit_each(&mut con, "t1:");
    assert_eq!(keys(&server), ["t1:0", "t1:1", "t1:2"]);

    // The key is declared read-write: read-only access to it is not enough.
    let mut reader = connect_as(&server, "reader", &["%R~*", "+@all"]);
    for call in calls("t1:0") {
        let refused = error(&mut reader, &call);
        assert!(refused.starts_with("NOPERM"), "{call:?}: {refused}");
    }
}

#[test]
fn command_info_shows_arity_flags_key_specs_and_categories() {
    let server = Server::start();
    let mut con = server.connect();
    let release = ServerRelease::of(&mut con);
    for (call, arity) in calls("user:1").iter().zip([-5, -4, -4]) {
        let info: Vec<Value> = query(&mut con, &["COMMAND", "INFO", call[0]]);
        let Value::Array(fields) = &info[0] else {
            panic!("no COMMAND INFO for {}: {info:?}", call[0]);
        };
        let field = |i: usize| -> Vec<String> {
            match &fields[i] {
                Value::Array(_) | Value::Set(_) => {
                    redis::from_redis_value(fields[i].clone()).unwrap()
                }
                other => vec![redis::from_redis_value(other.clone()).unwrap()],
            }
        };
        assert_eq!(field(0), [call[0].to_lowercase()]);
        assert_eq!(field(1), [arity.to_string()]);
        assert_eq!(field(2), ["write", "module", "fast"]);
        // First key, last key, step.
        assert_eq!(field(3), ["1"]);
        assert_eq!(field(4), ["1"]);
        assert_eq!(field(5), ["1"]);
        let expected_categories: &[&str] = if release.has_module_acl_categories() {
            &["@write", "@fast", "@ratelimit"]
        } else if release.has_module_command_categories() {
            &["@write", "@fast"]
        } else {
            // Before Redis 7.2 a module cannot put its commands in categories.
            &[]
        };
        assert_eq!(field(6), expected_categories, "{}", call[0]);
        let key_specs = format!("{:?}", fields[8]);
        for expected in ["RW", "access", "update", "index", "range"] {
            assert!(key_specs.contains(expected), "{key_specs}");
        }
        let mut getkeys = vec!["COMMAND", "GETKEYS"];
        getkeys.extend_from_slice(call);
        let keys: Vec<String> = query(&mut con, &getkeys);
        assert_eq!(keys, ["user:1"]);
    }
}

/// The module's commands whose `COMMAND INFO` puts them in `@ratelimit`, sorted.
fn in_ratelimit_category(server: &Server) -> Vec<String> {
    let mut con = server.connect();
    let names: Vec<String> = query(
        &mut con,
        &["COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit"],
    );
    let mut members: Vec<String> = names
        .into_iter()
        .filter(|name| {
            let info: Vec<Vec<Value>> = query(&mut con, &["COMMAND", "INFO", name]);
            let categories: Vec<String> = redis::from_redis_value(info[0][6].clone()).unwrap();
            categories.contains(&"@ratelimit".to_owned())
        })
        .collect();
    members.sort();
    // The limiting commands, their read-only variants, the leases, RL.TOP and RL.LOAD.*.
    assert!(members.len() >= 14, "{members:?}");
    members
}

#[test]
fn categories_grant_the_commands_where_the_server_has_them() {
    let server = Server::start();
    if !ServerRelease::of(&mut server.connect()).has_module_acl_categories() {
        // No module categories: `@ratelimit` is unknown, and a user is granted the
        // commands by name.
        let refused = error(
            &mut server.connect(),
            &["ACL", "SETUSER", "u", "+@ratelimit"],
        );
        assert!(refused.contains("ratelimit"), "{refused}");
        let mut con = connect_as(
            &server,
            "named",
            &["~*", "+cl.throttle", "+rl.window", "+rl.log"],
        );
        admit_each(&mut con, "k");
        return;
    }
    let categories: Vec<String> = query(&mut server.connect(), &["ACL", "CAT"]);
    assert!(
        categories.contains(&"ratelimit".to_owned()),
        "{categories:?}"
    );
    let mut listed: Vec<String> = query(&mut server.connect(), &["ACL", "CAT", "ratelimit"]);
    listed.sort();
    if ServerRelease::of(&mut server.connect()).lists_module_commands_by_category() {
        assert_eq!(listed, in_ratelimit_category(&server));
    } else {
        assert_eq!(listed, Vec::<String>::new());
    }
    let mut con = connect_as(&server, "limited", &["~*", "+@ratelimit"]);
    admit_each(&mut con, "k");
    let refused = error(&mut con, &["GET", "k"]);
    assert!(refused.starts_with("NOPERM"), "{refused}");
}

/// `RL.TOP` is read by whoever may read (`+@read`, `+@ratelimit`, or the command by name),
/// but wiping it (`RL.TOP.RESET`) needs admin rights on every server: on Redis 7.0, where
/// module commands have no categories, `-@admin` alone would not keep a user from it, so the
/// command asks whether the caller may run `SLOWLOG RESET`.
#[test]
fn only_an_admin_resets_rl_top_and_a_reader_still_reads_it() {
    let server = Server::builder()
        .module_arg("top-keys")
        .module_arg("16")
        .start();
    let release = ServerRelease::of(&mut server.connect());
    let denied = |con: &mut Connection| {
        let refused = error(con, &["RL.TOP.RESET"]);
        assert!(refused.starts_with("NOPERM"), "{refused}");
    };
    // Every user that may read the summary, by the rules each server knows.
    let mut readers = vec![connect_as(&server, "named", &["+rl.top"])];
    readers.push(connect_as(
        &server,
        "named-both",
        &["+rl.top", "+rl.top.reset"],
    ));
    readers.push(connect_as(&server, "not-admin", &["+@all", "-@admin"]));
    if release.has_module_command_categories() {
        readers.push(connect_as(&server, "reader", &["+@read"]));
    }
    if release.has_module_acl_categories() {
        readers.push(connect_as(&server, "limiter", &["+@ratelimit"]));
    }
    for reader in &mut readers {
        assert_eq!(query::<Vec<Value>, _>(reader, &["RL.TOP"]), []);
        denied(reader);
    }
    let mut admin = connect_as(&server, "admin", &["+@all"]);
    assert_eq!(query::<String, _>(&mut admin, &["RL.TOP.RESET"]), "OK");
    assert_eq!(
        query::<String, _>(&mut server.connect(), &["RL.TOP.RESET"]),
        "OK"
    );
}
