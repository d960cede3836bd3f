//! What a cell sees of a downstream MCP server, as upstream codex code mode shows it: a real
//! `codemode mcp` over stdio, with a downstream server written on the official TypeScript SDK
//! (`ecosystem/fixture_server.mjs`) whose tools send what real servers send.

use std::path::Path;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

mod common;

use codemode_test_support::{mcp_servers, within};
use common::{CODEMODE, text_of, wait_for_line};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_results_names_images_and_instructions_reach_a_cell_as_upstream_has_them() {
    let servers = mcp_servers::install(&mcp_servers::workspace_root())
        .unwrap_or_else(|error| panic!("cannot install the MCP ecosystem's tools: {error}"));
    let folder = codemode_test_support::scratch_folder("upstream");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ecosystem/fixture_server.mjs");
    let config = json!({"mcpServers": {"fx": {
        "command": servers.node22(),
        "args": [fixture, servers.ecosystem_package("sdk", "@modelcontextprotocol/sdk")],
    }}, "permissions": {"allow": ["*"]}});
    let config_path = folder.join("mcp.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let command = tokio::process::Command::new(CODEMODE).configure(|command| {
        command.arg("mcp").arg("--config").arg(&config_path);
    });
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client: rmcp::service::RunningService<RoleClient, ()> =
        within("connect", ().serve(transport)).await.unwrap();

    let code = r#"
const fx = ALL_TOOLS.filter((tool) => tool.name.startsWith("fx__"));
text("names " + fx.map((tool) => tool.name).join(","));
const values = {
  fx__foo_bar: await tools.fx__foo_bar({}),
  fx__weather: await tools.fx__weather({ city: "Oslo" }),
  fx__broken: await tools.fx__broken({}),
  fx__picture: await tools.fx__picture({}),
};
text("foo_bar " + values.fx__foo_bar.content[0].text);
text("weather " + JSON.stringify(values.fx__weather.structuredContent));
text("broken " + values.fx__broken.isError + " " + values.fx__broken.content[0].text);
text("keys " + JSON.stringify(Object.keys(values.fx__weather).sort()));
image(values.fx__picture.content[0]);
generatedImage({ ...values.fx__picture.content[0], output_hint: "the fixture's picture" });
text("description " + JSON.stringify(fx.find((tool) => tool.name === "fx__weather").description));
text("VALUES " + JSON.stringify(values));
text("DECLARATIONS " + JSON.stringify(fx.map((tool) => tool.declaration)));
"#;
    let params = CallToolRequestParams::new("exec")
        .with_arguments(json!({ "code": code }).as_object().unwrap().clone());
    let result = within("exec", client.call_tool(params)).await.unwrap();
    let output = text_of(&result);
    assert!(output.starts_with("Script completed"), "{output}");

    // 4d: `foo-bar` and `foo_bar` are one identifier: the first keeps it, the log says the other
    // was left out, and every other call of the session works.
    assert!(
        output.contains("names fx__foo_bar,fx__weather,fx__broken,fx__picture,fx__sound\n"),
        "{output}"
    );
    assert!(output.contains("foo_bar first"), "{output}");
    wait_for_line(stderr.unwrap(), "\"foo_bar\" of \"fx\" from fx is left out").await;

    // 4a: the CallToolResult as the server sent it; a reported failure resolves.
    assert!(
        output.contains(r#"weather {"city":"Oslo","celsius":21.5}"#),
        "{output}"
    );
    assert!(
        output.contains(r#"keys ["content","structuredContent"]"#),
        "{output}"
    );
    assert!(
        output.contains("broken true the fixture broke on purpose"),
        "{output}"
    );
    // ...and each value is what its declaration says, to the TypeScript compiler.
    let line = |prefix: &str| -> Value {
        serde_json::from_str(
            output
                .lines()
                .find_map(|line| line.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("no {prefix:?} line in {output}")),
        )
        .unwrap()
    };
    let declarations: Vec<String> = serde_json::from_value(line("DECLARATIONS ")).unwrap();
    assert!(
        declarations
            .iter()
            .any(|declaration| declaration.contains("fx__weather(args: {")
                && declaration.contains("Promise<CallToolResult<{")),
        "{declarations:?}"
    );
    let values: Vec<(String, String)> = line("VALUES ")
        .as_object()
        .unwrap()
        .iter()
        .map(|(tool, value)| (tool.clone(), value.to_string()))
        .collect();
    let source = format!(
        "{}\ndeclare const tools: {{\n{}\n}};",
        codemode_protocol::MCP_TYPES_DECLARATION,
        declarations.join("\n")
    );
    if let Err(complaints) = servers.typecheck(&source, &values) {
        panic!("the values do not match their declarations:\n{complaints}");
    }

    // 4h: the server's instructions are part of its tools' descriptions.
    assert!(
        output.contains("The weather in a city.")
            && output.contains("Fixture instructions: ask for the weather before the picture."),
        "{output}"
    );

    // 4g: the image block's `_meta["codex/imageDetail"]` made it `original`, and the detail
    // reaches this client in the block's `_meta`.
    let image = result
        .content
        .iter()
        .find_map(|block| match block {
            ContentBlock::Image(image) => Some(image),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no image in {result:?}"));
    let detail = image
        .meta
        .as_ref()
        .and_then(|meta| meta.0.get("codex/imageDetail"))
        .cloned();
    assert_eq!(detail, Some(json!("original")), "{image:?}");
    // 4g: `generatedImage` adds the image (its detail from the block, as `image` reads it), then
    // the result's output hint.
    let images: Vec<_> = result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Image(image) => Some(image.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(images.len(), 2, "{result:?}");
    assert_eq!(images[1].data, images[0].data);
    assert_eq!(images[1].meta, images[0].meta);
    let after_image = result
        .content
        .iter()
        .skip_while(|block| !matches!(block, ContentBlock::Image(_)))
        .skip(1)
        .skip_while(|block| !matches!(block, ContentBlock::Image(_)))
        .nth(1);
    assert!(
        matches!(after_image, Some(ContentBlock::Text(text)) if text.text.contains("the fixture's picture")),
        "{result:?}"
    );

    // 4e: with media in the output, the budget is spent in order, as upstream spends it: texts
    // cost their tokens, an image nothing, an audio clip 10 tokens a second of its duration
    // (one second of WAV is 10 tokens, though its data URL is about 10.7 KB); what does not fit
    // is left out and counted.
    let code = r#"// @exec: {"max_output_tokens": 60}
const short = await tools.fx__sound({ seconds: 1 });
const long = await tools.fx__sound({ seconds: 30 });
const picture = await tools.fx__picture({});
text("a".repeat(100));
audio(short.content[0]);
image(picture.content[0]);
audio(long.content[0]);
text("b".repeat(200));
text("c".repeat(8));
"#;
    let params = CallToolRequestParams::new("exec")
        .with_arguments(json!({ "code": code }).as_object().unwrap().clone());
    let result = within("exec", client.call_tool(params)).await.unwrap();
    let audio: Vec<_> = result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Audio(audio) => Some(audio.data.len()),
            _ => None,
        })
        .collect();
    let images = result
        .content
        .iter()
        .filter(|block| matches!(block, ContentBlock::Image(_)))
        .count();
    let output = text_of(&result);
    assert_eq!((audio.len(), images), (1, 1), "{result:?}");
    assert!(audio[0] > 10_000, "{audio:?}");
    assert!(output.contains(&"a".repeat(100)), "{output}");
    assert!(!output.contains(&"b".repeat(100)), "{output}");
    assert!(!output.contains("cccccccc"), "{output}");
    assert!(
        output.contains("[omitted 1 text items ...]")
            && output.contains("[omitted 1 audio items ...]"),
        "{output}"
    );

    // 4f: no internal name is visible to a cell, marked or not, while a thrown value that is not
    // an Error still has its position.
    let code = r#"const names = Object.getOwnPropertyNames(globalThis).filter((name) => name.includes("$"));
text("dollar globals " + JSON.stringify(names));
await tools.fx__foo_bar({});
  throw null;
"#;
    let params = CallToolRequestParams::new("exec")
        .with_arguments(json!({ "code": code }).as_object().unwrap().clone());
    let result = within("exec", client.call_tool(params)).await.unwrap();
    let output = text_of(&result);
    assert!(output.contains("dollar globals []"), "{output}");
    assert!(
        output.contains("Script error:\nnull\n    at cell.js:4:3"),
        "{output}"
    );
    client.cancel().await.unwrap();
}
