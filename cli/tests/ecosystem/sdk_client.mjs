// The official TypeScript SDK's client against `codemode mcp`, as an SDK user would drive it.
//
// Usage: node sdk_client.mjs SDK_FOLDER stdio CODEMODE_PROGRAM
//        node sdk_client.mjs SDK_FOLDER http URL TOKEN
//        node sdk_client.mjs SDK_FOLDER approvals CODEMODE_PROGRAM
//
// The server must offer the demo tools (`--demo-tools`). Prints one line per check, `ok NAME` or
// `FAIL NAME: why`, and exits 1 when any failed. `approvals` starts its own servers, with the demo
// MCP server downstream, and checks that a nested call that writes asks the SDK client's
// elicitation handler, and is refused to a client without one.

import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdkFolder, mode, ...rest] = process.argv.slice(2);
const sdk = (file) => import(pathToFileURL(path.join(sdkFolder, "dist/esm", file)).href);
const { Client } = await sdk("client/index.js");
const { LoggingMessageNotificationSchema } = await sdk("types.js");

let failed = 0;
async function check(name, body) {
  try {
    await body();
    console.log(`ok ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`FAIL ${name}: ${error?.stack ?? error}`);
  }
}
function expect(condition, why) {
  if (!condition) throw new Error(why);
}
const textOf = (result) =>
  result.content.filter((block) => block.type === "text").map((block) => block.text).join("\n");
const within = (ms, what, promise) =>
  Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms)),
  ]);

if (mode === "approvals") {
  const { StdioClientTransport } = await sdk("client/stdio.js");
  const { ElicitRequestSchema } = await sdk("types.js");
  const fs = await import("node:fs");
  const os = await import("node:os");
  const notes = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "codemode-ts-")), "notes");
  const server = () =>
    new StdioClientTransport({
      command: rest[0],
      args: ["mcp", "--mcp", `demo=${rest[0]} demo-mcp-server`],
      env: { ...process.env, CODEMODE_DEMO_NOTES: notes },
    });
  const asked = [];
  await check("a nested call that writes asks the elicitation handler", async () => {
    const client = new Client(
      { name: "sdk-approvals", version: "1.0.0" },
      { capabilities: { elicitation: {} } },
    );
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.params);
      return { action: "accept", content: { decision: "allow_once" } };
    });
    await within(30000, "connect", client.connect(server()));
    const result = await client.callTool({
      name: "exec",
      arguments: { code: "text((await tools.demo__note({text: 'from typescript'})).content[0].text)" },
    });
    await client.close();
    expect(textOf(result).split("\n").includes("noted"), textOf(result));
    expect(asked.length === 1, `asked ${asked.length} times`);
    expect(asked[0].message.includes("demo__note"), asked[0].message);
  });
  await check("without a handler the call is refused, catchably", async () => {
    const client = new Client({ name: "sdk-plain", version: "1.0.0" });
    await within(30000, "connect", client.connect(server()));
    const result = await client.callTool({
      name: "exec",
      arguments: {
        code: "try { await tools.demo__note({text: 'never'}); text('ran'); } catch (e) { text('refused: ' + e.message); }",
      },
    });
    await client.close();
    expect(textOf(result).includes("refused: tools.demo__note needs the user's approval"), textOf(result));
  });
  await check("only the approved call reached the server", async () => {
    const lines = fs.readFileSync(notes, "utf8").split("\n").filter((line) => line !== "");
    expect(JSON.stringify(lines) === JSON.stringify(["from typescript"]), `the server saw ${lines}`);
  });
  process.exit(failed === 0 ? 0 : 1);
}

let transport;
if (mode === "stdio") {
  const { StdioClientTransport } = await sdk("client/stdio.js");
  transport = new StdioClientTransport({ command: rest[0], args: ["mcp", "--demo-tools"] });
} else {
  const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(rest[0]), {
    requestInit: { headers: { Authorization: `Bearer ${rest[1]}` } },
  });
}

const client = new Client({ name: "sdk-conformance", version: "1.0.0" });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
  logs.push(notification.params);
});

await check("connect", () => within(30000, "connect", client.connect(transport)));

await check("server info names codemode", async () => {
  const info = client.getServerVersion();
  expect(info?.name === "codemode", `serverInfo.name is ${JSON.stringify(info?.name)}`);
  expect(/^\d+\.\d+\.\d+/.test(info?.version ?? ""), `serverInfo.version is ${info?.version}`);
});

await check("capabilities", async () => {
  const capabilities = client.getServerCapabilities();
  expect(capabilities?.tools, "no tools capability");
  expect(capabilities?.logging, "no logging capability");
});

await check("ping", () => within(10000, "ping", client.ping()));

await check("tools/list offers exec and wait", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((tool) => tool.name);
  expect(JSON.stringify(names) === '["exec","wait"]', `tools are ${names}`);
  expect(tools[0].inputSchema.required.includes("code"), "exec does not require code");
  expect(tools[1].inputSchema.required.includes("cell_id"), "wait does not require cell_id");
  // Past 4,096 characters the declarations are in the `code` argument's description.
  const served = `${tools[0].description}\n${tools[0].inputSchema.properties.code.description}`;
  expect(served.includes("declare const tools"), "exec does not declare the tools");
});

await check("logging/setLevel is accepted", () => client.setLoggingLevel("debug"));

await check("exec runs a cell", async () => {
  const result = await client.callTool({ name: "exec", arguments: { code: "text(6 * 7)" } });
  expect(!result.isError, textOf(result));
  expect(textOf(result).split("\n").includes("42"), textOf(result));
});

// As upstream code mode has it: a script that failed is output of a call that worked.
await check("a failing cell is rendered, not an error of the call", async () => {
  const result = await client.callTool({ name: "exec", arguments: { code: "throw new Error('nope')" } });
  expect(!result.isError, `isError is ${result.isError}`);
  expect(textOf(result).startsWith("Script failed"), textOf(result));
  expect(textOf(result).includes("nope"), textOf(result));
});

await check("unknown arguments are a tool error", async () => {
  const result = await client.callTool({ name: "exec", arguments: { code: "1", colour: "red" } });
  expect(result.isError === true, `isError is ${result.isError}`);
  expect(textOf(result).includes("colour"), textOf(result));
});

await check("progress carries notify()", async () => {
  const messages = [];
  await client.callTool(
    { name: "exec", arguments: { code: "notify('halfway'); await tools.sleep({ms: 300}); text('done')" } },
    undefined,
    { onprogress: (progress) => messages.push(progress.message) },
  );
  expect(messages.some((message) => message?.includes("halfway")), `progress: ${JSON.stringify(messages)}`);
});

// A cell left running, then collected by `wait`; `id` is its cell id.
async function backgroundCell(label) {
  const started = await client.callTool({
    name: "exec",
    arguments: { code: `await tools.sleep({ms: 150}); text(${JSON.stringify(label)})`, yield_time_ms: 0 },
  });
  const id = /^Script running with cell ID (\S+)/.exec(textOf(started))?.[1];
  expect(id, `not running: ${textOf(started)}`);
  return id;
}
async function collect(id) {
  const waited = await client.callTool({ name: "wait", arguments: { cell_id: id, yield_time_ms: 10000 } });
  expect(textOf(waited).startsWith("Script completed"), textOf(waited));
}
async function announced(id) {
  await within(10000, `the announcement of ${id}`, (async () => {
    while (!logs.some((log) => log.data?.cell_id === id)) await new Promise((r) => setTimeout(r, 20));
  })());
}

await check("exec yields and wait collects", async () => {
  const id = await backgroundCell("later");
  await collect(id);
});

await check("logging/setLevel filters the messages sent", async () => {
  // Messages of level info are sent at "info"...
  await client.setLoggingLevel("info");
  const first = await backgroundCell("first");
  await announced(first);
  expect(logs.find((log) => log.data?.cell_id === first).level === "info", "not at level info");
  await collect(first);
  // ...and not at "error": the cell that finishes then is not announced, while the one after
  // it, at "info" again, is (messages arrive in order, so the first announcement seen after the
  // silent cell's end is the later cell's).
  await client.setLoggingLevel("error");
  const silent = await backgroundCell("silent");
  await collect(silent);
  await client.setLoggingLevel("info");
  const last = await backgroundCell("last");
  await announced(last);
  const silentLogs = logs.filter((log) => log.data?.cell_id === silent);
  expect(silentLogs.length === 0, `announced at level error: ${JSON.stringify(silentLogs)}`);
});

await client.close();
process.exit(failed === 0 ? 0 : 1);
