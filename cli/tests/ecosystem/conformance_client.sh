#!/usr/bin/env bash
# codemode as the client of the conformance suite's scenario servers: the suite runs this with
# the scenario server's URL as the last argument, the scenario's name in MCP_CONFORMANCE_SCENARIO
# and its context (the tool calls to make, a pre-registered client, if any) in
# MCP_CONFORMANCE_CONTEXT. It runs one cell through `codemode run` (CODEMODE_PROGRAM) with the
# scenario server as the downstream server `conf`: the cell lists the tools and makes the calls
# the scenario asks for. For an authorization scenario (auth/*), `codemode login conf` runs first,
# as a user would, with $BROWSER a script that follows the authorization redirect as a browser
# does; the tokens go to a state folder of this run's own.
set -euo pipefail
url="${@: -1}"
folder="$(mktemp -d)"
trap 'rm -rf "$folder"' EXIT
scenario="${MCP_CONFORMANCE_SCENARIO:-}"
context="${MCP_CONFORMANCE_CONTEXT:-null}"
# The server entry: the URL, and for an authorization scenario the client codemode is (the
# pre-registered client the context names, and the client ID metadata document the suite knows).
URL="$url" CONTEXT="$context" python3 - >"$folder/mcp.json" <<'PY'
import json, os
context = json.loads(os.environ["CONTEXT"]) or {}
entry = {"url": os.environ["URL"]}
oauth = {"clientMetadataUrl": "https://conformance-test.local/client-metadata.json"}
if context.get("client_id"):
    oauth["clientId"] = context["client_id"]
if context.get("client_secret"):
    oauth["clientSecret"] = context["client_secret"]
entry["oauth"] = oauth
print(json.dumps({"mcpServers": {"conf": entry}}))
PY
{
  printf 'const scenario = %s;\n' "$(printf '%s' "$scenario" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')"
  printf 'const context = %s;\n' "$context"
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
if [[ "$scenario" == auth/* ]]; then
  export XDG_STATE_HOME="$folder/state"
  cat >"$folder/browser" <<'PY'
#!/usr/bin/env python3
# A browser with a user who approves at once: follow the authorization URL's redirects, the last
# of which reaches codemode's loopback callback.
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=30).read()
PY
  chmod +x "$folder/browser"
  export BROWSER="$folder/browser"
  "$CODEMODE_PROGRAM" login conf --config "$folder/mcp.json" || true
fi
# The scenarios test codemode as a client, not its gate: every call runs.
exec "$CODEMODE_PROGRAM" run --approve all --config "$folder/mcp.json" "$folder/cell.js"
