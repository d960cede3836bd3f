//! A helper process for the file store's tests (and a way to look at a store by hand).
//!
//! ```text
//! codemode-store-fixture commit DIR SESSION KEY JSON   commit one value
//! codemode-store-fixture load DIR SESSION              print the session's values as JSON
//! codemode-store-fixture commit-loop DIR SESSION       commit state(0), state(1), … until killed
//! ```
//!
//! `state(n)` is `{"n": n, "check": <text derived from n>}`, several kilobytes, so that a commit
//! takes long enough to be interrupted and any document can be checked against its own `n`.

use codemode_host_adapters::FileStore;

use serde_json::{Value, json};

/// The value committed under `state` at step `n` of `commit-loop`.
pub fn state(n: u64) -> Value {
    json!({ "n": n, "check": format!("{n};").repeat(200 + (n % 50) as usize * 40) })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["commit", directory, session, key, value] => serde_json::from_str::<Value>(value)
            .map_err(|error| format!("the value is not JSON: {error}"))
            .and_then(|value| {
                let store = FileStore::open(*directory).map_err(|error| error.to_string())?;
                store
                    .commit_blocking(
                        session,
                        &codemode_protocol::stored_values_from([((*key).to_owned(), value)]),
                    )
                    .map_err(|error| error.to_string())
            }),
        ["load", directory, session] => FileStore::open(*directory)
            .and_then(|store| store.load_blocking(session))
            .map(|values| println!("{}", serde_json::to_string(&values).unwrap()))
            .map_err(|error| error.to_string()),
        ["commit-loop", directory, session] => {
            let store = match FileStore::open(*directory) {
                Ok(store) => store,
                Err(error) => {
                    eprintln!("error: {error}");
                    std::process::exit(1);
                }
            };
            for n in 0.. {
                if let Err(error) = store.commit_blocking(
                    session,
                    &codemode_protocol::stored_values_from([("state".to_owned(), state(n))]),
                ) {
                    eprintln!("error: {error}");
                    std::process::exit(1);
                }
            }
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: codemode-store-fixture commit DIR SESSION KEY JSON | load DIR SESSION | commit-loop DIR SESSION"
            );
            std::process::exit(2);
        }
    };
    if let Err(error) = result {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}
