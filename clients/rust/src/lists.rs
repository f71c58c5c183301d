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

#[cfg(feature = "tokio")]
pub use self::shared::SharedLists;

#[cfg(feature = "tokio")]
mod shared {
    use std::sync::Arc;
    use std::time::Duration;

    use redis::aio::ConnectionLike;
    use redis::Value;

    use super::{add_words, parse_lists, remove_words, Lists};
    use crate::asynchronous::AsyncRateLimiter;
    use crate::resilience::{Clock, Error};

    struct Copy {
        lists: Arc<Lists>,
        version: Option<Value>,
        next_check: Option<Duration>,
    }

    /// One hash of shared lists, read and written through an [`AsyncRateLimiter`]'s
    /// connection (its deadline): a change is one transaction, and a reader keeps a copy,
    /// asking only for the version at most once per `every`, reading the hash again when
    /// it changed.
    pub struct SharedLists<C> {
        limiter: Arc<AsyncRateLimiter<C>>,
        hash: String,
        every: Duration,
        clock: Clock,
        copy: tokio::sync::Mutex<Copy>,
    }

    impl<C> SharedLists<C>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        /// The lists of `hash`, checked at most once per `every`.
        pub fn new(
            limiter: Arc<AsyncRateLimiter<C>>,
            hash: impl Into<String>,
            every: Duration,
            clock: Clock,
        ) -> Self {
            SharedLists {
                limiter,
                hash: hash.into(),
                every,
                clock,
                copy: tokio::sync::Mutex::new(Copy {
                    lists: Arc::new(Lists::new()),
                    version: None,
                    next_check: None,
                }),
            }
        }

        /// Sets `item` of `list` to `value` and increments the version, in one transaction.
        pub async fn add(&self, list: &str, item: &str, value: &str) -> Result<(), Error> {
            let words = add_words(&self.hash, list, item, value);
            self.limiter.transaction(&words).await.map(drop)
        }

        /// Removes `item` from `list` and increments the version, in one transaction.
        pub async fn remove(&self, list: &str, item: &str) -> Result<(), Error> {
            let words = remove_words(&self.hash, list, item);
            self.limiter.transaction(&words).await.map(drop)
        }

        /// The lists: the copy, checked against the version at most once per `every` and
        /// read again when it changed.
        pub async fn read(&self) -> Result<Arc<Lists>, Error> {
            let mut copy = self.copy.lock().await;
            let now = (self.clock)();
            if copy.next_check.is_some_and(|at| now < at) {
                return Ok(copy.lists.clone());
            }
            let version = self
                .limiter
                .call(&["HGET".into(), self.hash.clone(), "version".into()])
                .await?;
            if copy.version.as_ref() != Some(&version) {
                let all = self
                    .limiter
                    .call(&["HGETALL".into(), self.hash.clone()])
                    .await?;
                copy.lists = Arc::new(parse_lists(&all));
                copy.version = Some(version);
            }
            copy.next_check = Some(now + self.every);
            Ok(copy.lists.clone())
        }
    }
}
