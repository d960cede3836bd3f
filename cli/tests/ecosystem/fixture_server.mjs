// A downstream MCP server on the official TypeScript SDK, over stdio, for the tests of how
// codemode treats what real servers send, as upstream code mode does.
//
// Usage: node fixture_server.mjs SDK_FOLDER
//
// Tools:
// - `foo-bar` and `foo_bar`: two names that are the same JavaScript identifier;
// - `weather`: an output schema, answered with text and `structuredContent`;
// - `broken`: answers `isError: true` with a message;
// - `picture`: an image block whose `_meta["codex/imageDetail"]` is `original`;
// - `sound`: an audio block, a WAV of silence `seconds` long (8 kHz, 8-bit, mono).
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

// A WAV file of `seconds` of silence, as base64.
function silence(seconds) {
  const rate = 8000;
  const samples = Math.round(rate * seconds);
  const wav = Buffer.alloc(44 + samples, 0x80);
  wav.write("RIFF", 0);
  wav.writeUInt32LE(36 + samples, 4);
  wav.write("WAVEfmt ", 8);
  wav.writeUInt32LE(16, 16); // the fmt chunk's size
  wav.writeUInt16LE(1, 20); // PCM
  wav.writeUInt16LE(1, 22); // one channel
  wav.writeUInt32LE(rate, 24);
  wav.writeUInt32LE(rate, 28); // bytes per second
  wav.writeUInt16LE(1, 32); // bytes per frame
  wav.writeUInt16LE(8, 34); // bits per sample
  wav.write("data", 36);
  wav.writeUInt32LE(samples, 40);
  return wav.toString("base64");
}

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
  {
    name: "sound",
    description: "Silence, as WAV audio.",
    inputSchema: { type: "object", properties: { seconds: { type: "number" } }, required: ["seconds"] },
  },
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
    case "sound":
      return {
        content: [{ type: "audio", data: silence(request.params.arguments.seconds), mimeType: "audio/wav" }],
      };
    default:
      throw new Error(`no tool ${request.params.name}`);
  }
});

await server.connect(new StdioServerTransport());
