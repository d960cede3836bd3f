//! Recipe: a custom [`ToolProvider`] behind a session.
//!
//! A provider lists its tools once, when a session opens, and answers calls. Names may carry a
//! namespace (`ToolName::namespaced("weather", "today")` is `tools.weather__today` in a cell); the
//! input schema becomes the TypeScript declaration the model reads in the `exec` description.
//! `call_tool` gets the argument as the JSON text the cell made (parse it where the tool reads it)
//! and a token that is cancelled when the cell no longer needs the answer; it answers JSON text.
//!
//! ```text
//! cargo run -p codemode-session --example custom_tool_provider
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use codemode_protocol::{ToolDefinition, ToolName};
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_session::{
    JsonText, Session, SessionConfig, SessionKey, Store, StoreError, ToolCallContext, ToolError,
    ToolInvocation, ToolListError, ToolProvider, render_text,
};
use serde_json::{Value, json};

/// Two weather tools, answered in process.
struct WeatherTools;

#[async_trait]
impl ToolProvider for WeatherTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        let mut today = ToolDefinition::function(
            ToolName::namespaced("weather", "today"),
            "Today's weather for a city.",
        );
        today.input_schema = Some(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }));
        let mut convert = ToolDefinition::function(
            ToolName::namespaced("weather", "to_fahrenheit"),
            "Converts Celsius to Fahrenheit.",
        );
        convert.input_schema = Some(json!({
            "type": "object",
            "properties": {"celsius": {"type": "number"}},
            "required": ["celsius"]
        }));
        Ok(vec![today, convert])
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        context: ToolCallContext,
    ) -> Result<JsonText, ToolError> {
        let input: Value = match &call.input {
            Some(text) => serde_json::from_str(text.as_str())
                .map_err(|error| ToolError::invalid_arguments(error.to_string()))?,
            None => Value::Null,
        };
        let answer = async {
            match call.name.name.as_str() {
                "today" => {
                    let city = input["city"]
                        .as_str()
                        .ok_or(ToolError::invalid_arguments("city must be a string"))?;
                    Ok(json!({"city": city, "celsius": 15 + city.len() as i64, "sky": "clear"}))
                }
                "to_fahrenheit" => {
                    let celsius = input["celsius"]
                        .as_f64()
                        .ok_or(ToolError::invalid_arguments("celsius must be a number"))?;
                    Ok(json!(celsius * 9.0 / 5.0 + 32.0))
                }
                other => Err(ToolError::not_found(format!(
                    "no weather tool is named {other}"
                ))),
            }
        };
        tokio::select! {
            answer = answer => answer.map(JsonText::from),
            _ = context.cancellation.cancelled() => Err(ToolError::cancelled("cancelled")),
        }
    }
}

/// Nothing is stored in this recipe.
struct NoStore;

#[async_trait]
impl Store for NoStore {
    async fn load(
        &self,
        _session: &SessionKey,
    ) -> Result<codemode_protocol::StoredValues, StoreError> {
        Ok(HashMap::new())
    }

    async fn commit(
        &self,
        _session: &SessionKey,
        _writes: &codemode_protocol::StoredValues,
    ) -> Result<(), StoreError> {
        Err(StoreError::new("this recipe keeps no stored values"))
    }
}

#[tokio::main]
async fn main() {
    let session = Session::open(
        "example",
        Arc::new(QuickJsEngine::new()),
        Arc::new(NoStore),
        Arc::new(WeatherTools),
        SessionConfig::default(),
    )
    .await
    .expect("the session opens");
    // What the model reads about the tools:
    println!("{}", codemode_session::tools_declaration(&session.tools()));
    let source = r#"
        const cities = ["Lisbon", "Oslo", "Nairobi"];
        const reports = await Promise.all(cities.map((city) => tools.weather__today({ city })));
        for (const report of reports) {
            const fahrenheit = await tools.weather__to_fahrenheit({ celsius: report.celsius });
            text(`${report.city}: ${report.celsius} °C (${fahrenheit} °F), ${report.sky}`);
        }
    "#;
    let result = session.exec_tool("call-1", source).await;
    println!("{}", render_text(&result.items));
    session.shutdown().await;
}
