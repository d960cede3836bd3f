//! The stores side by side: an `exec` over HTTP through the real server with the file store and
//! with PostgreSQL (a throwaway cluster of the machine's PostgreSQL, as the tests make, but
//! syncing to disk like a production server and like the file store), and a
//! commit of 1, 100 and 10,000 keys to each. Printed as the suite's third table.

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use codemode_host_adapters::{FileStore, PostgresStore};
use codemode_protocol::{StoredValue, StoredValues};
use codemode_session::Store;
use codemode_test_support::ListeningServer;
use codemode_test_support::postgres::TestPostgres;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::measure::{Stats, ms, stats};

/// One figure, with the file store and with PostgreSQL.
pub struct StoreRow {
    name: String,
    unit: &'static str,
    file: Stats,
    postgres: Stats,
}

const TOKEN: &str = "bench-token-0123456789abcdef";

/// The stores' rows; `None` (having said why) when this machine has no PostgreSQL.
pub fn store_comparison(
    codemode: &str,
    runtime: &tokio::runtime::Runtime,
) -> Option<Vec<StoreRow>> {
    // Syncing to disk, as the file store does: a fair comparison.
    let database = TestPostgres::start_durable("the stores' benchmark")?;
    let folder = std::env::temp_dir().join(format!("codemode-bench-stores-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let file_store = folder.join("values");
    let mut rows = Vec::new();
    for (name, source) in [
        ("exec over HTTP: text only", r#"text("ok")"#),
        (
            "exec over HTTP: store one value",
            r#"store("k", Date.now()); text("ok")"#,
        ),
    ] {
        let file = runtime.block_on(exec_over_http(
            codemode,
            &folder,
            file_store.to_str().unwrap(),
            source,
        ));
        let postgres = runtime.block_on(exec_over_http(codemode, &folder, &database.url(), source));
        rows.push(StoreRow {
            name: name.into(),
            unit: "ms",
            file,
            postgres,
        });
    }
    let file: Arc<dyn Store> = Arc::new(FileStore::open(folder.join("commits")).unwrap());
    let postgres: Arc<dyn Store> = Arc::new(
        runtime
            .block_on(PostgresStore::connect(&database.url()))
            .unwrap(),
    );
    for keys in [1, 100, 10_000] {
        let runs = if keys == 10_000 { 20 } else { 100 };
        rows.push(StoreRow {
            name: format!("commit of {keys} keys"),
            unit: "ms",
            file: runtime.block_on(commits(&file, keys, runs)),
            postgres: runtime.block_on(commits(&postgres, keys, runs)),
        });
    }
    let _ = std::fs::remove_dir_all(&folder);
    Some(rows)
}

/// Milliseconds per `exec` of `source`, through `codemode mcp --http` with `--store store`.
async fn exec_over_http(
    codemode: &str,
    folder: &std::path::Path,
    store: &str,
    source: &str,
) -> Stats {
    let tokens = folder.join("tokens");
    std::fs::write(&tokens, format!("bench {TOKEN}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut command = Command::new(codemode);
    command
        .args(["mcp", "--http", "127.0.0.1:0", "--auth-token-file"])
        .arg(&tokens)
        .args(["--store", store]);
    let server = ListeningServer::spawn(command);
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url()).auth_header(TOKEN);
    config.custom_headers.insert(
        http::HeaderName::from_static("x-codemode-session"),
        http::HeaderValue::from_static("bench"),
    );
    let client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("the bench client connects");
    let params = CallToolRequestParams::new("exec")
        .with_arguments(json!({"code": source}).as_object().unwrap().clone());
    let mut samples = Vec::new();
    for run in 0..220 {
        let started = Instant::now();
        client
            .call_tool(params.clone())
            .await
            .expect("exec answers");
        // The first runs warm the server up.
        if run >= 20 {
            samples.push(ms(started.elapsed()));
        }
    }
    let _ = client.cancel().await;
    stats(samples)
}

/// Milliseconds per commit of `keys` keys (each run overwrites the same keys).
async fn commits(store: &Arc<dyn Store>, keys: usize, runs: usize) -> Stats {
    let mut samples = Vec::new();
    for run in 0..runs + 2 {
        let writes: StoredValues = (0..keys)
            .map(|key| {
                (
                    format!("key-{key}"),
                    StoredValue::from_value(&json!([run, key, "value"])),
                )
            })
            .collect();
        let started = Instant::now();
        store
            .commit(&"bench".into(), &writes)
            .await
            .expect("the commit lands");
        if run >= 2 {
            samples.push(ms(started.elapsed()));
        }
    }
    stats(samples)
}

/// Prints the stores' table; its rows as JSON.
pub fn print_stores(rows: &[StoreRow]) -> Vec<Value> {
    println!("\n| figure | file store | PostgreSQL | PostgreSQL / file | PostgreSQL − file |");
    println!("|---|---|---|---|---|");
    rows.iter()
        .map(|row| {
            println!(
                "| {} | {:.3} {unit} | {:.3} {unit} | {:.2} | {:+.3} {unit} |",
                row.name,
                row.file.median,
                row.postgres.median,
                row.postgres.median / row.file.median,
                row.postgres.median - row.file.median,
                unit = row.unit
            );
            json!({
                "figure": row.name, "unit": row.unit,
                "file": {"median": row.file.median, "p99": row.file.p99},
                "postgres": {"median": row.postgres.median, "p99": row.postgres.p99},
            })
        })
        .collect()
}
