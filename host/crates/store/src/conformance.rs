//! The storage contract of `wit/store.wit`, checked on SQLite and on
//! PostgreSQL alike. PostgreSQL must be running (`MAP_TEST_POSTGRES_URL`,
//! default 127.0.0.1:5432 database `test`): these tests fail without it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use super::ops::MAX_KEYS;
use super::*;

static RUN: AtomicU64 = AtomicU64::new(0);

/// A scope no other test (or earlier run) uses.
fn fresh_scope() -> Scope {
    let n = RUN.fetch_add(1, Ordering::Relaxed);
    Scope { tenant: format!("conformance-{}-{}-{n}", std::process::id(), map_protocol::ids::now_ms()), plugin: "p".into() }
}

async fn sqlite() -> Store {
    let dir = std::env::temp_dir().join(format!("map-gateway-conformance-{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    Store::open(&format!("sqlite://{}", dir.join("t.db").display()), false, 64 << 20, std::time::Duration::from_millis(10)).await.unwrap()
}

async fn postgres() -> Store {
    let url = std::env::var("MAP_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into());
    Store::open(&url, false, 64 << 20, std::time::Duration::from_millis(10))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required for the storage conformance tests ({url}): {e:#}"))
}

/// Run `check` on both backends.
async fn on_both<F, Fut>(check: F)
where
    F: Fn(Store, Scope) -> Fut,
    Fut: Future<Output = ()>,
{
    check(sqlite().await, fresh_scope()).await;
    check(postgres().await, fresh_scope()).await;
}

fn put(c: &str, k: &str, v: &[u8]) -> Op {
    Op::Put { collection: c.into(), key: k.into(), value: v.to_vec() }
}

fn committed(o: Outcome) -> (u64, Vec<i64>) {
    match o {
        Outcome::Committed { version, counters, .. } => (version, counters),
        Outcome::Conflict(i) => panic!("unexpected conflict at {i}"),
    }
}

fn keys(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(c, k)| (c.to_string(), k.to_string())).collect()
}

const BIG: usize = 1 << 30;

#[tokio::test]
async fn values_are_bytes_and_text_stays_text() {
    on_both(|db, s| async move {
        let raw = vec![0u8, 159, 146, 150, 255];
        committed(db.commit(&s, vec![put("c", "raw", &raw)]).await.unwrap());
        db.put(&s, "c", "text", "héllo").await.unwrap();
        let got = db.get_many(&s, &keys(&[("c", "raw"), ("c", "text")]), BIG).await.unwrap();
        assert_eq!(got[0].as_ref().unwrap().value, raw);
        assert_eq!(got[1].as_ref().unwrap().value, "héllo".as_bytes());
        assert_eq!(db.get(&s, "c", "text").await.unwrap().as_deref(), Some("héllo"));
        assert!(matches!(db.get(&s, "c", "raw").await, Err(StoreError::Invalid(m)) if m.contains("UTF-8")));
    })
    .await;
}

#[tokio::test]
async fn get_many_answers_in_order_across_collections() {
    on_both(|db, s| async move {
        db.batch(
            &s,
            vec![
                Write { collection: "a".into(), key: "1".into(), value: Some("one".into()) },
                Write { collection: "b".into(), key: "1".into(), value: Some("uno".into()) },
            ],
        )
        .await
        .unwrap();
        let got = db.get_many(&s, &keys(&[("b", "1"), ("a", "missing"), ("a", "1"), ("b", "1")]), BIG).await.unwrap();
        let values: Vec<Option<&[u8]>> = got.iter().map(|i| i.as_ref().map(|i| i.value.as_slice())).collect();
        assert_eq!(values, vec![Some(&b"uno"[..]), None, Some(&b"one"[..]), Some(&b"uno"[..])]);
        assert_eq!(got[0].as_ref().unwrap().version, got[2].as_ref().unwrap().version, "one commit, one version");
        // Asked again (from the cache on SQLite), the answer is the same.
        assert_eq!(db.get_many(&s, &keys(&[("b", "1"), ("a", "missing"), ("a", "1"), ("b", "1")]), BIG).await.unwrap(), got);
        // Other scopes are invisible.
        let other = Scope { tenant: s.tenant.clone(), plugin: "other".into() };
        assert!(db.get_many(&other, &keys(&[("a", "1")]), BIG).await.unwrap()[0].is_none());
        // Bounds: keys per call and bytes per answer.
        let many: Vec<(String, String)> = (0..=MAX_KEYS).map(|i| ("a".to_string(), i.to_string())).collect();
        assert!(matches!(db.get_many(&s, &many, BIG).await, Err(StoreError::Invalid(_))));
        assert!(matches!(db.get_many(&s, &keys(&[("a", "1"), ("b", "1")]), 5).await, Err(StoreError::Invalid(_))));
    })
    .await;
}

#[tokio::test]
async fn versions_grow_and_never_repeat_for_a_key() {
    on_both(|db, s| async move {
        let (v1, _) = committed(db.commit(&s, vec![put("c", "k", b"1")]).await.unwrap());
        let (v2, _) =
            committed(db.commit(&s, vec![Op::ExpectVersion { collection: "c".into(), key: "k".into(), version: v1 }, put("c", "k", b"2")]).await.unwrap());
        assert!(v2 > v1);
        // A stale version, an "absent" expectation on a present key: nothing applies.
        let stale = vec![put("c", "other", b"x"), Op::ExpectVersion { collection: "c".into(), key: "k".into(), version: v1 }];
        assert_eq!(db.commit(&s, stale).await.unwrap(), Outcome::Conflict(1));
        assert_eq!(db.commit(&s, vec![Op::ExpectVersion { collection: "c".into(), key: "k".into(), version: 0 }]).await.unwrap(), Outcome::Conflict(0));
        assert!(db.get(&s, "c", "other").await.unwrap().is_none(), "a conflicting commit writes nothing");
        // Deleted and written again: the new value's version is still new.
        assert!(db.delete(&s, "c", "k").await.unwrap());
        assert_eq!(db.commit(&s, vec![Op::ExpectVersion { collection: "c".into(), key: "k".into(), version: v2 }]).await.unwrap(), Outcome::Conflict(0));
        let (v3, _) =
            committed(db.commit(&s, vec![Op::ExpectVersion { collection: "c".into(), key: "k".into(), version: 0 }, put("c", "k", b"3")]).await.unwrap());
        assert!(v3 > v2);
        // Conditions on values.
        let on_value = |v: Option<&[u8]>| Op::ExpectValue { collection: "c".into(), key: "k".into(), value: v.map(<[u8]>::to_vec) };
        assert_eq!(db.commit(&s, vec![on_value(Some(b"2"))]).await.unwrap(), Outcome::Conflict(0));
        assert_eq!(db.commit(&s, vec![on_value(None)]).await.unwrap(), Outcome::Conflict(0));
        committed(db.commit(&s, vec![on_value(Some(b"3")), put("c", "k", b"4")]).await.unwrap());
        assert_eq!(db.get(&s, "c", "k").await.unwrap().as_deref(), Some("4"));
    })
    .await;
}

/// Writers that read, change and compare-and-swap the same record lose no update.
#[tokio::test]
async fn compare_and_swap_under_concurrent_writers_loses_no_update() {
    on_both(|db, s| async move {
        let (writers, rounds) = (8, 25);
        let tasks: Vec<_> = (0..writers)
            .map(|_| {
                let (db, s) = (db.clone(), s.clone());
                tokio::spawn(async move {
                    let mut conflicts = 0;
                    for _ in 0..rounds {
                        loop {
                            let found = db.get_many(&s, &keys(&[("c", "n")]), BIG).await.unwrap().pop().unwrap();
                            let (n, version) = found.map_or((0, 0), |i| (String::from_utf8(i.value).unwrap().parse::<u64>().unwrap(), i.version));
                            let ops =
                                vec![Op::ExpectVersion { collection: "c".into(), key: "n".into(), version }, put("c", "n", (n + 1).to_string().as_bytes())];
                            match db.commit(&s, ops).await.unwrap() {
                                Outcome::Committed { .. } => break,
                                Outcome::Conflict(_) => conflicts += 1,
                            }
                        }
                    }
                    conflicts
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(db.get(&s, "c", "n").await.unwrap().as_deref(), Some("200"));
    })
    .await;
}

#[tokio::test]
async fn counters_add_atomically() {
    on_both(|db, s| async move {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (db, s) = (db.clone(), s.clone());
                tokio::spawn(async move {
                    for _ in 0..25 {
                        committed(db.commit(&s, vec![Op::Add { collection: "c".into(), key: "hits".into(), delta: 1 }]).await.unwrap());
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(db.get(&s, "c", "hits").await.unwrap().as_deref(), Some("200"));
        let add = |k: &str, d: i64| Op::Add { collection: "c".into(), key: k.into(), delta: d };
        let (_, counters) = committed(db.commit(&s, vec![add("hits", -50), add("fresh", 7)]).await.unwrap());
        assert_eq!(counters, vec![150, 7]);
        // A value that is not a number refuses the whole commit.
        db.put(&s, "c", "word", "many").await.unwrap();
        assert!(matches!(db.commit(&s, vec![add("hits", 1), add("word", 1)]).await, Err(StoreError::Invalid(_))));
        assert_eq!(db.get(&s, "c", "hits").await.unwrap().as_deref(), Some("150"));
        // A conflict applies no addition either.
        let guarded = vec![add("hits", 1), Op::ExpectVersion { collection: "c".into(), key: "nothing".into(), version: 9 }];
        assert_eq!(db.commit(&s, guarded).await.unwrap(), Outcome::Conflict(1));
        assert_eq!(db.get(&s, "c", "hits").await.unwrap().as_deref(), Some("150"));
    })
    .await;
}

#[tokio::test]
async fn scans_honour_limits_bytes_and_cursors() {
    on_both(|db, s| async move {
        let ops: Vec<Op> = (0..25).map(|i| put("c", &format!("k{i:02}"), &[b'v'; 100])).chain([put("c", "other", b"x"), put("d", "k99", b"x")]).collect();
        committed(db.commit(&s, ops).await.unwrap());
        let opts = |limit: u32, after: Option<String>, reverse: bool| ScanOptions { prefix: "k".into(), after, before: None, limit, reverse };
        // limit 0 asks for nothing; a page stops at its limit and says where to go on.
        assert!(db.scan(&s, "c", &opts(0, None, false), BIG).await.unwrap().is_empty());
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = db.scan_page(&s, "c", &opts(10, after.clone(), false), BIG, BIG).await.unwrap();
            assert!(page.entries.len() <= 10);
            seen.extend(page.entries.into_iter().map(|(k, _)| k));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, (0..25).map(|i| format!("k{i:02}")).collect::<Vec<_>>());
        // Reversed, with `before` as the cursor.
        let page = db.scan_page(&s, "c", &ScanOptions { before: Some("k20".into()), ..opts(3, None, true) }, BIG, BIG).await.unwrap();
        assert_eq!(page.entries.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["k19", "k18", "k17"]);
        assert_eq!(page.next.as_deref(), Some("k17"));
        // A byte bound cuts the page short (at least one entry), and the old scan refuses instead.
        let page = db.scan_page(&s, "c", &opts(25, None, false), 250, BIG).await.unwrap();
        assert_eq!(page.entries.len(), 2);
        assert_eq!(page.next.as_deref(), Some("k01"));
        assert_eq!(db.scan_page(&s, "c", &opts(25, None, false), 1, BIG).await.unwrap().entries.len(), 1);
        assert!(matches!(db.scan_page(&s, "c", &opts(25, None, false), 1, 50).await, Err(StoreError::Invalid(_))));
        assert!(matches!(db.scan(&s, "c", &opts(25, None, false), 250).await, Err(StoreError::Invalid(m)) if m.contains("250 bytes")));
        // Entries carry their versions.
        let page = db.scan_page(&s, "c", &opts(1, None, false), BIG, BIG).await.unwrap();
        assert!(page.entries[0].1.version > 0);
        assert_eq!(db.count(&s, "c", "k").await.unwrap(), 25);
    })
    .await;
}

#[tokio::test]
async fn oversized_writes_are_refused_before_the_database() {
    on_both(|db, s| async move {
        let many: Vec<Op> = (0..=ops::MAX_OPS).map(|i| put("c", &i.to_string(), b"x")).collect();
        assert!(matches!(db.commit(&s, many).await, Err(StoreError::Invalid(m)) if m.contains("operations")));
        assert!(db.get(&s, "c", "0").await.unwrap().is_none());
    })
    .await;
}

/// Concurrent commits, some of them refused, committed together: each is
/// answered on its own and every accepted one is durable.
#[tokio::test]
async fn concurrent_commits_are_answered_one_by_one() {
    on_both(|db, s| async move {
        db.put(&s, "c", "word", "many").await.unwrap();
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let (db, s) = (db.clone(), s.clone());
                tokio::spawn(async move {
                    let mut ops = vec![put("c", &format!("n{i:02}"), b"x")];
                    if i % 4 == 0 {
                        ops.push(Op::Add { collection: "c".into(), key: "word".into(), delta: 1 });
                    }
                    (i, db.commit(&s, ops).await)
                })
            })
            .collect();
        for t in tasks {
            let (i, answer) = t.await.unwrap();
            assert_eq!(answer.is_err(), i % 4 == 0, "commit {i}: {answer:?}");
        }
        assert_eq!(db.count(&s, "c", "n").await.unwrap(), 48);
        // Point reads (served from the cache on SQLite) agree: a refused call's put is not there.
        let found = db.get_many(&s, &keys(&[("c", "n00"), ("c", "n01"), ("c", "n04"), ("c", "n05")]), 1 << 20).await.unwrap();
        assert_eq!(found.iter().map(Option::is_some).collect::<Vec<_>>(), [false, true, false, true]);
        assert_eq!(db.get(&s, "c", "word").await.unwrap().as_deref(), Some("many"));
    })
    .await;
}

#[tokio::test]
async fn sqlite_versions_keep_growing_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("map-gateway-restart-{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("t.db").display());
    let scope = fresh_scope();
    let mut last = 0;
    for _ in 0..3 {
        // The clock is stored in blocks: each restart starts past the last one.
        let store = Store::open(&url, false, 64 << 20, std::time::Duration::from_millis(10)).await.unwrap();
        for _ in 0..3 {
            let (version, _) = committed(store.commit(&scope, vec![put("c", "k", b"v")]).await.unwrap());
            assert!(version > last, "{version} after {last}");
            last = version;
        }
        assert_eq!(store.get_many(&scope, &keys(&[("c", "k")]), 1 << 20).await.unwrap()[0].as_ref().unwrap().version, last);
    }
}
