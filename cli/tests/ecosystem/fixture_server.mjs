// A downstream MCP server on the official TypeScript SDK, over stdio, for the tests of how
// codemode treats what real servers send, as upstream code mode does.
//
// Usage: node fixture_server.mjs SDK_FOLDER
//
// Tools:
// - `foo-bar` and `foo_bar`: two names that are the same JavaScript identifier;
// - `weather`: an output schema, answered with text and `structuredContent`;
// - `broken`: answers `isError: true` with a message;
// - `picture`: an image block whose `_meta["codex/imageDetail"]` is `original`.
// Its `instructions` say how to use it.

import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdkFolder] = process.argv.slice(2);
const sdk = (file) => import(pathToFileURL(path.join(sdkFolder, "dist/esm", file)).href);
const { Server } = await sdk("server/index.js");
const { StdioServerTransport } = await sdk("server/stdio.js");
const { ListToolsRequestSchema, CallToolRequestSchema } = await sdk("types.js");

// A 1x1 PNG.
const PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

const server = new Server(
  { name: "fixture", version: "1.0.0" },
  {
    capabilities: { tools: {} },
    instructions: "Fixture instructions: ask for the weather before the picture.",
  },
);

const noArguments = { type: "object", properties: {} };
const tools = [
  { name: "foo-bar", description: "The first of two alike names.", inputSchema: noArguments },
  { name: "foo_bar", description: "The second of two alike names.", inputSchema: noArguments },
  {
    name: "weather",
    description: "The weather in a city.",
    inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    outputSchema: {
      type: "object",
      properties: { city: { type: "string" }, celsius: { type: "number" } },
      required: ["city", "celsius"],
    },
  },
  { name: "broken", description: "Always fails.", inputSchema: noArguments },
  { name: "picture", description: "A picture at its original detail.", inputSchema: noArguments },
];

server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  switch (request.params.name) {
    case "foo-bar":
      return { content: [{ type: "text", text: "first" }] };
    case "foo_bar":
      return { content: [{ type: "text", text: "second" }] };
    case "weather": {
      const weather = { city: request.params.arguments.city, celsius: 21.5 };
      return {
        content: [{ type: "text", text: JSON.stringify(weather) }],
        structuredContent: weather,
      };
    }
    case "broken":
      return { content: [{ type: "text", text: "the fixture broke on purpose" }], isError: true };
    case "picture":
      return {
        content: [
          { type: "image", data: PIXEL, mimeType: "image/png", _meta: { "codex/imageDetail": "original" } },
        ],
      };
    default:
      throw new Error(`no tool ${request.params.name}`);
  }
});

await server.connect(new StdioServerTransport());
