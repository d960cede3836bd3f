// Tools of a downstream MCP server join the cell's tools under its name. Each call resolves with
// the server's CallToolResult ({ content, structuredContent?, isError? }): `add` declares an output
// schema, so its structuredContent has that type; `image` answers with an image block; `fail`
// reports a failure, which resolves with isError: true.
// Run: cargo run -p codemode-cli -- run --mcp "demo=target/debug/codemode demo-mcp-server" examples/mcp_demo.js
// (build first with: cargo build -p codemode-cli)
const sum = await tools.demo__add({ a: 20, b: 22 });
text(`20 + 22 = ${sum.structuredContent.sum}`);
const picture = await tools.demo__image();
image(picture.content[0], "low");
const failed = await tools.demo__fail({ message: "this tool always fails" });
if (failed.isError) {
  text(`failed: ${failed.content[0].text}`);
}
