//! The PostgreSQL store against a real PostgreSQL (a throwaway cluster per test, from
//! `codemode_test_support::postgres`): schema creation and upgrade, merged all-or-none commits,
//! concurrent commits from two servers, values another server committed, corrupt rows, and a
//! database restarted under the store. Without PostgreSQL each test says it was left out.

use std::collections::BTreeMap;
use std::sync::Arc;

use codemode_host_adapters::{JournalBatch, PostgresCluster, PostgresStore, SCHEMA_VERSION};
use codemode_protocol::{StoredValue, StoredValues};
use codemode_session::{SessionKey, Store, StoreErrorKind, Tenant};
use codemode_test_support::postgres::TestPostgres;
use serde_json::json;

/// Session `name` of tenant `tenant` written as `tenant/name`, or a name alone.
fn key(text: &str) -> SessionKey {
    match text.split_once('/') {
        Some((tenant, name)) => SessionKey::of_tenant(tenant, name),
        None => SessionKey::new(text),
    }
}

fn writes(entries: &[(&str, serde_json::Value)]) -> StoredValues {
    entries
        .iter()
        .map(|(key, value)| ((*key).to_owned(), StoredValue::from_value(value)))
        .collect()
}

/// The values as sorted `key -> JSON text`, for comparisons.
fn texts(values: &StoredValues) -> BTreeMap<String, String> {
    values
        .iter()
        .map(|(key, value)| (key.clone(), value.json().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_round_trip_exactly_and_commits_merge_by_key() {
    let Some(database) = TestPostgres::start("values_round_trip_exactly") else {
        return;
    };
    let store = PostgresStore::connect(&database.url())
        .await
        .expect("connects");
    assert!(store.load(&key("s")).await.unwrap().is_empty());
    // Key order inside an object, unicode, and escapes survive as written; a key may hold a NUL.
    let first = StoredValues::from([
        ("nul\u{0}key".to_owned(), StoredValue::from_value(&json!(0))),
        (
            "profile".to_owned(),
            StoredValue::from_json(r#"{"z":1,"a":[true,null],"é":"\u0000 ☃"}"#.to_owned()).unwrap(),
        ),
        ("count".to_owned(), StoredValue::from_value(&json!(1))),
    ]);
    store.commit(&key("s"), &first).await.unwrap();
    store
        .commit(
            &key("s"),
            &writes(&[("count", json!(2)), ("new", json!("x"))]),
        )
        .await
        .unwrap();
    let loaded = store.load(&key("s")).await.unwrap();
    assert_eq!(
        texts(&loaded),
        BTreeMap::from([
            (
                "profile".to_owned(),
                r#"{"z":1,"a":[true,null],"é":"\u0000 ☃"}"#.to_owned()
            ),
            ("count".to_owned(), "2".to_owned()),
            ("new".to_owned(), "\"x\"".to_owned()),
            ("nul\u{0}key".to_owned(), "0".to_owned()),
        ])
    );
    assert!(
        store.load(&key("other")).await.unwrap().is_empty(),
        "sessions are apart"
    );
    assert!(store.shared_between_processes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_created_once_and_a_newer_one_is_refused_untouched() {
    let Some(database) = TestPostgres::start("the_schema_is_created_once") else {
        return;
    };
    // Three servers starting at once take turns creating the schema.
    let url = database.url();
    let starts = (0..3).map(|_| {
        let url = url.clone();
        tokio::spawn(async move { PostgresStore::connect(&url).await })
    });
    for start in starts {
        start.await.unwrap().expect("connects");
    }
    let store = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    store
        .commit(&key("s"), &writes(&[("kept", json!(1))]))
        .await
        .unwrap();

    database.psql(&format!(
        "UPDATE codemode_schema_version SET version = {}",
        SCHEMA_VERSION + 1
    ));
    let error = PostgresStore::connect(&url)
        .await
        .expect_err("a newer schema is refused");
    assert!(
        error.message.contains(&format!(
            "schema version {}, and this program knows versions up to {SCHEMA_VERSION}",
            SCHEMA_VERSION + 1
        )),
        "{error}"
    );
    assert_eq!(
        database.psql("SELECT version FROM codemode_schema_version"),
        (SCHEMA_VERSION + 1).to_string(),
        "nothing was changed"
    );
    assert_eq!(
        database.psql(
            "SELECT value FROM codemode_stored_values WHERE key = convert_to('kept', 'UTF8')"
        ),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_from_two_servers_lose_no_write() {
    let Some(database) = TestPostgres::start("concurrent_commits_from_two_servers") else {
        return;
    };
    // Two stores, two connection pools: two servers sharing the database.
    let servers = [
        Arc::new(PostgresStore::connect(&database.url()).await.unwrap()),
        Arc::new(PostgresStore::connect(&database.url()).await.unwrap()),
    ];
    let commits = (0..200).map(|cell| {
        let store = Arc::clone(&servers[cell % 2]);
        tokio::spawn(async move {
            // Every cell writes a key of its own and the keys all of them share, so that
            // commits contend for the same rows (in different orders of the cells' maps).
            let mut values = writes(&[
                (&format!("cell-{cell}"), json!(cell)),
                ("shared-a", json!(cell)),
                ("shared-b", json!(cell)),
                ("shared-c", json!(cell)),
            ]);
            values.insert(format!("z-{cell}"), StoredValue::from_value(&json!([cell])));
            store.commit(&key("crowd"), &values).await
        })
    });
    for commit in commits {
        commit.await.unwrap().expect("every commit lands");
    }
    let loaded = servers[0].load(&key("crowd")).await.unwrap();
    for cell in 0..200 {
        assert_eq!(loaded[&format!("cell-{cell}")].json(), cell.to_string());
        assert_eq!(loaded[&format!("z-{cell}")].json(), format!("[{cell}]"));
    }
    // Each commit is whole: the shared keys all come from one cell, the last to commit.
    let a = loaded["shared-a"].json();
    assert_eq!(loaded["shared-b"].json(), a);
    assert_eq!(loaded["shared-c"].json(), a);
    // The tenant's total followed every overwrite of the shared keys exactly.
    assert_eq!(
        servers[1].tenant_bytes("crowd").await.unwrap(),
        codemode_protocol::stored_bytes(&loaded) as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_limit_holds_across_servers_and_refuses_a_commit_whole() {
    let Some(database) = TestPostgres::start("a_tenant_limit_holds_across_servers") else {
        return;
    };
    // Two servers sharing the database, each holding tenants to 100 bytes.
    let one = PostgresStore::connect(&database.url())
        .await
        .unwrap()
        .limit_bytes_per_tenant(100);
    let two = PostgresStore::connect(&database.url())
        .await
        .unwrap()
        .limit_bytes_per_tenant(100);
    let sixty = json!("x".repeat(55)); // 57 bytes of JSON, 60 with its key `big`
    one.commit(&key("alpha/first"), &writes(&[("big", sixty.clone())]))
        .await
        .expect("60 of 100 bytes");
    let refused = two
        .commit(
            &key("alpha/second"),
            &writes(&[("big", sixty.clone()), ("small", json!(1))]),
        )
        .await
        .expect_err("another session of the tenant, on another server, would pass 100 bytes");
    assert_eq!(refused.kind, StoreErrorKind::TooLarge);
    assert!(
        refused.message.contains(
            "the stored values of tenant \"alpha\" would hold 126 bytes across every server \
             sharing the database, past its limit of 100 bytes"
        ),
        "{refused}"
    );
    assert!(
        two.load(&key("alpha/second")).await.unwrap().is_empty(),
        "nothing of the refused commit landed"
    );
    assert_eq!(two.tenant_bytes("alpha").await.unwrap(), 60);
    // Another tenant has its own 100 bytes.
    two.commit(&key("beta/first"), &writes(&[("big", sixty.clone())]))
        .await
        .expect("beta's own bytes");
    // A commit that does not grow the total is taken, and shrinking makes room.
    two.commit(&key("alpha/first"), &writes(&[("big", json!(0))]))
        .await
        .expect("overwritten smaller");
    assert_eq!(one.tenant_bytes("alpha").await.unwrap(), 4);
    one.commit(&key("alpha/second"), &writes(&[("big", sixty)]))
        .await
        .expect("room again");
    assert_eq!(one.tenant_bytes("alpha").await.unwrap(), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_is_all_or_none() {
    let Some(database) = TestPostgres::start("a_commit_is_all_or_none") else {
        return;
    };
    let store = PostgresStore::connect(&database.url()).await.unwrap();
    store
        .commit(&key("s"), &writes(&[("before", json!(0))]))
        .await
        .unwrap();
    // The database refuses one row of the commit (a trigger, as a constraint would): none of
    // the commit lands.
    database.psql(
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.key = convert_to('poison', 'UTF8') THEN RAISE EXCEPTION 'poisoned'; END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON codemode_stored_values
         FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    );
    let error = store
        .commit(
            &key("s"),
            &writes(&[
                ("after", json!(1)),
                ("before", json!(1)),
                ("poison", json!(2)),
            ]),
        )
        .await
        .expect_err("the refused row fails the commit");
    assert!(
        error
            .message
            .contains("cannot commit stored values to the database at codemode@127.0.0.1:"),
        "{error}"
    );
    assert!(error.message.contains("poisoned"), "{error}");
    assert_eq!(
        texts(&store.load(&key("s")).await.unwrap()),
        BTreeMap::from([("before".to_owned(), "0".to_owned())]),
        "nothing of the failed commit landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_row_is_named_and_left_alone() {
    let Some(database) = TestPostgres::start("a_corrupt_row_is_named") else {
        return;
    };
    let store = PostgresStore::connect(&database.url()).await.unwrap();
    database.psql(
        "INSERT INTO codemode_stored_values (session, key, value) \
         VALUES ('s', convert_to('broken', 'UTF8'), '{not json')",
    );
    let error = store
        .load(&key("s"))
        .await
        .expect_err("a corrupt row fails the load");
    assert_eq!(error.kind, StoreErrorKind::Corrupt);
    assert!(
        error
            .message
            .contains("the stored value \"broken\" of session \"s\""),
        "{error}"
    );
    assert_eq!(
        database.psql(
            "SELECT value FROM codemode_stored_values WHERE key = convert_to('broken', 'UTF8')"
        ),
        "{not json"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_database_fails_the_calls_it_hits_and_the_store_recovers() {
    let Some(database) = TestPostgres::start("a_restarted_database") else {
        return;
    };
    let store = PostgresStore::connect(&database.url()).await.unwrap();
    store
        .commit(&key("s"), &writes(&[("before", json!(1))]))
        .await
        .unwrap();

    database.stop();
    let error = store
        .commit(&key("s"), &writes(&[("during", json!(2))]))
        .await
        .expect_err("no database, no commit");
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");
    assert!(
        error
            .message
            .contains("the database at codemode@127.0.0.1:"),
        "the message names the database: {error}"
    );
    let error = store
        .load(&key("s"))
        .await
        .expect_err("no database, no load");
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");

    database.start_server();
    store
        .commit(&key("s"), &writes(&[("after", json!(3))]))
        .await
        .expect("the store recovers without a restart");
    assert_eq!(
        texts(&store.load(&key("s")).await.unwrap()),
        BTreeMap::from([
            ("after".to_owned(), "3".to_owned()),
            ("before".to_owned(), "1".to_owned()),
        ]),
        "the failed commit left nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_a_clear_error_at_start() {
    let Some(database) = TestPostgres::start("an_unreachable_database") else {
        return;
    };
    let url = database.url();
    database.stop();
    let error = PostgresStore::connect(&url)
        .await
        .expect_err("nothing listens");
    assert_eq!(error.kind, StoreErrorKind::Unavailable);
    assert!(
        error
            .message
            .starts_with("cannot reach the database at codemode@127.0.0.1:"),
        "{error}"
    );
    let error = PostgresStore::connect("postgres://codemode@127.0.0.1:notaport/x")
        .await
        .expect_err("a URL that cannot be read");
    assert!(
        error.message.starts_with("cannot read the database URL"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_first_schema_is_upgraded_and_keeps_its_values() {
    let Some(database) = TestPostgres::start("a_database_of_the_first_schema") else {
        return;
    };
    let store = PostgresStore::connect(&database.url()).await.unwrap();
    store
        .commit(&key("s"), &writes(&[("kept", json!("from version 1"))]))
        .await
        .unwrap();
    store
        .commit(&key("alpha/one"), &writes(&[("a", json!(1))]))
        .await
        .unwrap();
    store
        .commit(&key("alpha/two"), &writes(&[("bb", json!([2]))]))
        .await
        .unwrap();
    // As a server of schema version 1 left it.
    database.psql(
        "DROP TABLE codemode_replicas, codemode_tool_calls, codemode_cells, \
         codemode_open_sessions, codemode_tenant_bytes; \
         UPDATE codemode_schema_version SET version = 1",
    );
    let upgraded = PostgresStore::connect(&database.url()).await.unwrap();
    assert_eq!(upgraded.schema_version().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(
        texts(&upgraded.load(&key("s")).await.unwrap()),
        BTreeMap::from([("kept".to_owned(), "\"from version 1\"".to_owned())])
    );
    // The tenants' totals are counted from the values already there.
    assert_eq!(upgraded.tenant_bytes("alpha").await.unwrap(), 2 + 5);
    assert_eq!(upgraded.tenant_bytes("s").await.unwrap(), 4 + 16);
    upgraded
        .cluster()
        .join(
            "0123456789ab",
            "http://127.0.0.1:1/mcp",
            std::time::Duration::from_secs(60),
        )
        .await
        .expect("the new table is there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_alive_while_its_lease_runs() {
    let Some(database) = TestPostgres::start("a_replica_is_alive_while_its_lease_runs") else {
        return;
    };
    let store = PostgresCluster::connect(&database.url()).await.unwrap();
    assert_eq!(store.replica("unknown").await.unwrap(), None);
    let long = std::time::Duration::from_secs(600);
    store.join("a", "http://a/mcp", long).await.unwrap();
    let a = store.replica("a").await.unwrap().expect("registered");
    assert_eq!((a.address.as_str(), a.alive), ("http://a/mcp", true));
    // A lease that is not renewed runs out.
    store
        .join("b", "http://b/mcp", std::time::Duration::from_millis(1))
        .await
        .unwrap();
    codemode_test_support::within("the lease to run out", async {
        while store.replica("b").await.unwrap().unwrap().alive {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    // A renewed one runs again; one that left does not.
    store.renew("b", long).await.unwrap();
    assert!(store.replica("b").await.unwrap().unwrap().alive);
    store.leave("a").await.unwrap();
    assert!(!store.replica("a").await.unwrap().unwrap().alive);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_keeps_open_cells_and_their_tool_calls_and_forgets_closed_ones() {
    let Some(database) = TestPostgres::start("the_journal_keeps_open_cells") else {
        return;
    };
    let store = PostgresCluster::connect(&database.url()).await.unwrap();
    let long = std::time::Duration::from_secs(600);
    store.join("here", "http://here/mcp", long).await.unwrap();
    store.join("there", "http://there/mcp", long).await.unwrap();
    let owned = |text: &str| text.to_owned();
    let mut there = JournalBatch::default();
    for (cell, tenant) in [("t-1", "alpha"), ("t-2", "alpha"), ("t-3", "beta")] {
        there
            .cells_started
            .push((owned("alpha/work"), owned(cell), owned(tenant)));
    }
    there.calls_started.push((
        owned("alpha/work"),
        owned("t-1"),
        owned("tool-1"),
        owned("demo__note"),
    ));
    store.journal("there", &there).await.unwrap();
    assert_eq!(
        store
            .cells_elsewhere("here", &Tenant::new("alpha"))
            .await
            .unwrap(),
        (2, 3),
        "the other server's cells: alpha's, and all"
    );
    assert_eq!(
        store
            .cells_elsewhere("there", &Tenant::new("alpha"))
            .await
            .unwrap(),
        (0, 0)
    );
    assert_eq!(
        store.tool_calls_of("alpha/work", "t-1").await.unwrap(),
        [("tool-1".to_owned(), "demo__note".to_owned())]
    );
    let mut closing = JournalBatch::default();
    closing
        .cells_closed
        .push(("alpha/work".to_owned(), "t-1".to_owned()));
    store.journal("there", &closing).await.unwrap();
    assert!(
        store
            .tool_calls_of("alpha/work", "t-1")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .cells_elsewhere("here", &Tenant::new("alpha"))
            .await
            .unwrap(),
        (1, 2)
    );
    // Open sessions: distinct, per tenant, of the other servers.
    let mut sessions = JournalBatch::default();
    sessions.sessions_opened = vec![
        (owned("alpha/work"), owned("alpha")),
        (owned("alpha/play"), owned("alpha")),
        (owned("beta/work"), owned("beta")),
    ];
    store.journal("there", &sessions).await.unwrap();
    let mut open = store
        .sessions_elsewhere("here", &Tenant::new("alpha"))
        .await
        .unwrap();
    open.sort();
    assert_eq!(open, ["alpha/play", "alpha/work"]);
    let mut closing = JournalBatch::default();
    closing.sessions_closed = vec![owned("alpha/play")];
    store.journal("there", &closing).await.unwrap();
    assert_eq!(
        store
            .sessions_elsewhere("here", &Tenant::new("alpha"))
            .await
            .unwrap(),
        ["alpha/work"]
    );
    // A server whose lease ran out counts no more.
    store.leave("there").await.unwrap();
    assert_eq!(
        store
            .cells_elsewhere("here", &Tenant::new("alpha"))
            .await
            .unwrap(),
        (0, 0)
    );
    assert!(
        store
            .sessions_elsewhere("here", &Tenant::new("alpha"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_gone_longer_than_the_retention_are_forgotten_with_their_journal() {
    let Some(database) = TestPostgres::start("servers_gone_longer_than_the_retention") else {
        return;
    };
    let store = PostgresCluster::connect(&database.url()).await.unwrap();
    let long = std::time::Duration::from_secs(600);
    let owned = |text: &str| text.to_owned();
    for server in ["0123456789ab", "ba9876543210"] {
        store
            .join(server, &format!("http://{server}/mcp"), long)
            .await
            .unwrap();
        let cell = format!("{server}-1");
        let mut batch = JournalBatch::default();
        batch
            .cells_started
            .push((owned("alpha/work"), cell.clone(), owned("alpha")));
        batch.calls_started.push((
            owned("alpha/work"),
            cell,
            owned("tool-1"),
            owned("demo__note"),
        ));
        batch
            .sessions_opened
            .push((owned("alpha/work"), owned("alpha")));
        store.journal(server, &batch).await.unwrap();
    }
    let count = |table: &str| database.psql(&format!("SELECT count(*) FROM {table}"));
    // One died two days ago; the other still runs.
    database.psql(
        "UPDATE codemode_replicas SET lease_expires_at = now() - interval '2 days' \
         WHERE id = '0123456789ab'",
    );
    let day = std::time::Duration::from_secs(24 * 60 * 60);
    assert_eq!(store.forget_servers_gone_for(day * 3).await.unwrap(), 0);
    assert_eq!(
        count("codemode_tool_calls"),
        "2",
        "within the retention: kept"
    );
    assert_eq!(store.forget_servers_gone_for(day).await.unwrap(), 1);
    for table in [
        "codemode_replicas",
        "codemode_cells",
        "codemode_open_sessions",
        "codemode_tool_calls",
    ] {
        assert_eq!(
            count(table),
            "1",
            "only the live server's row is left in {table}"
        );
    }
    assert!(store.replica("0123456789ab").await.unwrap().is_none());
    assert_eq!(
        store
            .tool_calls_of("alpha/work", "ba9876543210-1")
            .await
            .unwrap(),
        [("tool-1".to_owned(), "demo__note".to_owned())]
    );
}
