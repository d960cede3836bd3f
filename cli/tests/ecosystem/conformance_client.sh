#!/usr/bin/env bash
# codemode as the client of the conformance suite's scenario servers: the suite runs this with
# the scenario server's URL as the last argument, the scenario's name in MCP_CONFORMANCE_SCENARIO
# and its context (the tool calls to make, if any) in MCP_CONFORMANCE_CONTEXT. It runs one cell
# through `codemode run` (CODEMODE_PROGRAM) with the scenario server as the downstream server
# `conf`: the cell lists the tools and makes the calls the scenario asks for.
set -euo pipefail
url="${@: -1}"
folder="$(mktemp -d)"
trap 'rm -rf "$folder"' EXIT
printf '{"mcpServers": {"conf": {"url": %s}}}\n' "$(printf '%s' "$url" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')" >"$folder/mcp.json"
{
  printf 'const scenario = %s;\n' "$(printf '%s' "${MCP_CONFORMANCE_SCENARIO:-}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')"
  printf 'const context = %s;\n' "${MCP_CONFORMANCE_CONTEXT:-null}"
  cat <<'CELL'
text("tools: " + ALL_TOOLS.map((tool) => tool.name).join(", "));
// The calls the scenario names; otherwise each tool offered is called once, with a string for
// each of its usual arguments, as a model would try them.
let calls = context?.toolCalls;
if (scenario === "tools_call") calls = [{ name: "add_numbers", arguments: { a: 2, b: 3 } }];
calls ??= ALL_TOOLS.map((tool) => ({
  name: tool.name.replace(/^conf__/, ""),
  arguments: { region: "us-west1", value: "v" },
}));
for (const call of calls) {
  const name = "conf__" + call.name.replace(/[^A-Za-z0-9_$]/g, "_");
  try {
    text(call.name + ": " + JSON.stringify(await tools[name](call.arguments)));
  } catch (error) {
    text(call.name + " failed: " + error.message);
  }
}
CELL
} >"$folder/cell.js"
# The scenarios test codemode as a client, not its gate: every call runs.
exec "$CODEMODE_PROGRAM" run --approve all --config "$folder/mcp.json" "$folder/cell.js"
