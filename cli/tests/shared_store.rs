//! Several `codemode mcp --http` servers over one PostgreSQL store (`--store postgres://…`),
//! through the real binary and a real database: a session's values committed through one server
//! are what the next cell sees through another, three servers behind a client that sends each
//! request to the next in turn lose no write of 200 cells finishing at once, and a database
//! restart fails only the commits it hits while the server recovers by itself. Without
//! PostgreSQL each test says it was left out.

use std::path::PathBuf;

use codemode_test_support::postgres::TestPostgres;

mod common;

use common::{
    ALPHA, BETA, CODEMODE, client, exec, last_line, running_cell_id, server, text_of, wait_on,
};

fn scratch(name: &str) -> PathBuf {
    codemode_test_support::scratch_folder(&format!("shared-store-{name}"))
}

const READ: &str = r#"text(JSON.stringify(load("count") ?? null));"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_committed_through_one_server_is_what_the_next_cell_on_another_sees() {
    let Some(database) = TestPostgres::start("a_value_committed_through_one_server") else {
        return;
    };
    let url = database.url();
    let store = ["--store", url.as_str()];
    let one = server(&scratch("one"), &store);
    let two = server(&scratch("two"), &store);
    let alpha_one = client(one.url(), ALPHA, Some("work")).await;
    let alpha_two = client(two.url(), ALPHA, Some("work")).await;
    assert_eq!(last_line(&alpha_two, READ).await, "null");
    for count in 1..=2 {
        assert_eq!(
            last_line(
                &alpha_one,
                &format!(r#"store("count", {count}); text("stored");"#)
            )
            .await,
            "stored"
        );
        // The session on the second server is open already: it must not answer from a cache.
        assert_eq!(last_line(&alpha_two, READ).await, count.to_string());
    }
    let beta_two = client(two.url(), BETA, Some("work")).await;
    assert_eq!(
        last_line(&beta_two, READ).await,
        "null",
        "another tenant's session of the same name"
    );
    assert_eq!(
        database.psql(
            "SELECT session || ' ' || convert_from(key, 'UTF8') || ' ' || value \
             FROM codemode_stored_values"
        ),
        "alpha/work count 2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_fails_the_commit_it_hits_and_the_server_recovers_by_itself() {
    let Some(database) = TestPostgres::start("a_database_restart_fails_the_commit") else {
        return;
    };
    let url = database.url();
    let folder = scratch("restart");
    let served = server(&folder, &["--store", url.as_str()]);
    let alpha = client(served.url(), ALPHA, Some("work")).await;
    assert_eq!(
        last_line(&alpha, r#"store("count", 1); text("stored");"#).await,
        "stored"
    );

    // The commit of the next cell waits on a lock the test holds; the database then goes down
    // under it, as in a restart.
    let lock = database.hold("BEGIN; LOCK TABLE codemode_stored_values IN EXCLUSIVE MODE;");
    database
        .wait_for(
            "the test to hold the lock",
            "SELECT count(*) FROM pg_locks JOIN pg_class ON pg_locks.relation = pg_class.oid \
             WHERE relname = 'codemode_stored_values' AND mode = 'ExclusiveLock' AND granted",
            "1",
        )
        .await;
    let running = text_of(
        &exec(
            &alpha,
            "// @exec: {\"yield_time_ms\": 0}\nstore(\"count\", 2); text(\"computed\");",
        )
        .await
        .expect("exec answers"),
    );
    let cell_id = running_cell_id(&running);
    database
        .wait_for(
            "the commit to wait on the lock",
            "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND application_name = 'codemode'",
            "1",
        )
        .await;
    database.stop();
    drop(lock);
    database.start_server();

    let ended = wait_on(&alpha, &cell_id).await;
    assert!(ended.contains("computed"), "the output is kept: {ended}");
    assert!(
        ended.contains("the cell's stored values could not be saved: cannot commit stored values to the database at codemode@127.0.0.1:"),
        "{ended}"
    );

    // The same server, not restarted, commits again.
    assert_eq!(
        last_line(&alpha, READ).await,
        "1",
        "the failed commit left nothing"
    );
    assert_eq!(
        last_line(&alpha, r#"store("count", 3); text("stored");"#).await,
        "stored"
    );
    assert_eq!(last_line(&alpha, READ).await, "3");
}

#[test]
fn an_unreachable_database_stops_the_server_at_start_with_a_clear_error() {
    let output = std::process::Command::new(CODEMODE)
        .args([
            "mcp",
            "--store",
            // Nothing listens on port 1.
            "postgres://codemode@127.0.0.1:1/codemode",
        ])
        .output()
        .expect("codemode runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach the database at codemode@127.0.0.1:1/codemode"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_in_turn_lose_no_write_of_200_cells_finishing_at_once() {
    let Some(database) = TestPostgres::start("three_servers_in_turn_lose_no_write") else {
        return;
    };
    let url = database.url();
    // Without MCP sessions (the default with a database): any request may go to any server.
    let servers: Vec<_> = (0..3)
        .map(|index| {
            server(
                &scratch(&format!("turn-{index}")),
                &["--store", url.as_str()],
            )
        })
        .collect();
    let mut clients = Vec::new();
    for served in &servers {
        clients.push(std::sync::Arc::new(
            client(served.url(), ALPHA, Some("crowd")).await,
        ));
    }
    // A value stored through one server is loaded through each of the others.
    assert_eq!(
        last_line(
            &clients[0],
            r#"store("greeting", "hello"); text("stored");"#
        )
        .await,
        "stored"
    );
    for other in &clients[1..] {
        assert_eq!(last_line(other, r#"text(load("greeting"))"#).await, "hello");
    }
    // 200 cells, each request to the next server in turn, all running at once: each writes a key
    // of its own and three keys they all share.
    let cells = (0..200).map(|cell| {
        let client = std::sync::Arc::clone(&clients[cell % 3]);
        tokio::spawn(async move {
            last_line(
                &client,
                &format!(
                    r#"store("cell-{cell}", {cell}); store("shared-a", {cell}); store("shared-b", {cell}); store("shared-c", {cell}); text("stored {cell}");"#
                ),
            )
            .await
        })
    });
    for (cell, finished) in cells.enumerate() {
        assert_eq!(finished.await.unwrap(), format!("stored {cell}"));
    }
    let check = r#"const missing = [];
for (let cell = 0; cell < 200; cell++) if (load(`cell-${cell}`) !== cell) missing.push(cell);
const shared = [load("shared-a"), load("shared-b"), load("shared-c")];
text(JSON.stringify({missing, whole: shared[0] === shared[1] && shared[1] === shared[2]}));"#;
    for each in &clients {
        assert_eq!(
            last_line(each, check).await,
            r#"{"missing":[],"whole":true}"#,
            "every write of every cell, whichever server ran it, and each cell's writes whole"
        );
    }
}
