// Tools of a downstream MCP server join the cell's tools under its name. `add` declares an
// output schema, so it resolves with its structured result; `image` has none, so it resolves with
// an McpResult ({ content, text }).
// Run: cargo run -p codemode-cli -- run --mcp "demo=target/debug/codemode demo-mcp-server" examples/mcp_demo.js
// (build first with: cargo build -p codemode-cli)
const sum = await tools.demo__add({ a: 20, b: 22 });
text(`20 + 22 = ${sum.sum}`);
const picture = await tools.demo__image();
image(picture.content[0], "low");
try {
  await tools.demo__fail({ message: "this tool always fails" });
} catch (error) {
  text(`caught: ${error.message}`);
}
