//! Lists shared by every gateway and application through one Redis hash: fields
//! `<list>:<item>` (an allow list of callers, a deny list of keys, thresholds...) and a
//! `version` field that every change increments, in the same transaction as its item. The
//! nginx, Python and Node packages read and write the same hash.

use std::collections::BTreeMap;

use redis::Value;

/// `{list: {item: value}}`.
pub type Lists = BTreeMap<String, BTreeMap<String, String>>;

/// The transaction that sets `item` of `list` to `value` and increments the version.
pub fn add_words(hash: &str, list: &str, item: &str, value: &str) -> Vec<Vec<String>> {
    vec![
        vec![
            "HSET".into(),
            hash.into(),
            format!("{list}:{item}"),
            value.into(),
        ],
        vec!["HINCRBY".into(), hash.into(), "version".into(), "1".into()],
    ]
}

/// The transaction that removes `item` from `list` and increments the version.
pub fn remove_words(hash: &str, list: &str, item: &str) -> Vec<Vec<String>> {
    vec![
        vec!["HDEL".into(), hash.into(), format!("{list}:{item}")],
        vec!["HINCRBY".into(), hash.into(), "version".into(), "1".into()],
    ]
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The lists of an `HGETALL` reply (`version` and fields without `:` are not lists).
pub fn parse_lists(reply: &Value) -> Lists {
    let pairs: Vec<(String, String)> = match reply {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| Some((text(pair.first()?)?, text(pair.get(1)?)?)))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(field, value)| Some((text(field)?, text(value)?)))
            .collect(),
        _ => Vec::new(),
    };
    let mut lists = Lists::new();
    for (field, value) in pairs {
        if let Some((list, item)) = field.split_once(':') {
            lists
                .entry(list.to_owned())
                .or_default()
                .insert(item.to_owned(), value);
        }
    }
    lists
}
