//! How an embedder plugs a custom store and custom tools into a codemode session.
//!
//! ```text
//! cargo run -p codemode-host-adapters --example custom_tools
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use codemode_host_adapters::{InProcessTools, MemoryStore};
use codemode_runtime_v8::V8Engine;
use codemode_session::{Session, SessionConfig, Store, StoreError, render_text};
use serde_json::{Value, json};

/// A custom store: here, the in-memory one with a line printed for every commit. A real one
/// might write to a database; `commit` must apply all of a cell's writes or none.
struct AuditedStore(MemoryStore);

impl Store for AuditedStore {
    fn load(&self, session: &str) -> Result<HashMap<String, Value>, StoreError> {
        self.0.load(session)
    }

    fn commit(&self, session: &str, writes: &HashMap<String, Value>) -> Result<(), StoreError> {
        let mut keys: Vec<&String> = writes.keys().collect();
        keys.sort();
        eprintln!("[store] session {session} commits {keys:?}");
        self.0.commit(session, writes)
    }
}

#[tokio::main]
async fn main() {
    // Custom tools: async Rust functions with a description and a JSON Schema each.
    let tools = InProcessTools::new()
        .function(
            "weather",
            "Today's weather for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            |input| async move {
                let city = input.as_ref().and_then(|input| input["city"].as_str()).unwrap_or("?").to_owned();
                Ok(json!({"city": city, "celsius": 21 + city.len() as i64 % 7, "sky": "clear"}))
            },
        )
        .function(
            "convert",
            "Converts Celsius to Fahrenheit.",
            json!({"type": "object", "properties": {"celsius": {"type": "number"}}, "required": ["celsius"]}),
            |input| async move {
                let celsius = input.as_ref().and_then(|input| input["celsius"].as_f64()).ok_or("celsius must be a number")?;
                Ok(json!(celsius * 9.0 / 5.0 + 32.0))
            },
        );
    let session = Session::open(
        "example",
        Arc::new(V8Engine::new()),
        Arc::new(AuditedStore(MemoryStore::new())),
        Arc::new(tools),
        SessionConfig::default(),
    )
    .await
    .expect("the session opens");

    // What the model would send to `exec`:
    let source = r#"
        const cities = ["Lisbon", "Oslo", "Nairobi"];
        const reports = await Promise.all(cities.map((city) => tools.weather({ city })));
        for (const report of reports) {
            const fahrenheit = await tools.convert({ celsius: report.celsius });
            text(`${report.city}: ${report.celsius} °C (${fahrenheit} °F), ${report.sky}`);
        }
        store("last_cities", cities);
    "#;
    let result = session.exec_tool("call-1", source).await;
    println!("{}", render_text(&result.items));
    session.shutdown().await;
}
