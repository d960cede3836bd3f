"""The official Python SDK's client against `codemode mcp`, as an SDK user would drive it.

Usage: python sdk_client.py stdio CODEMODE_PROGRAM
       python sdk_client.py http URL TOKEN
       python sdk_client.py approvals CODEMODE_PROGRAM

The server must offer the demo tools (`--demo-tools`). Prints one line per check, `ok NAME` or
`FAIL NAME: why`, and exits 1 when any failed. `approvals` starts its own servers, with the demo
MCP server downstream, and checks that a nested call that writes asks the SDK client's
elicitation handler, and is refused to a client without one.
"""

import asyncio
import os
import re
import sys
import tempfile
import traceback

from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

failed = 0


async def check(name, body):
    global failed
    try:
        await body()
        print(f"ok {name}", flush=True)
    except Exception:  # noqa: BLE001 - every failure is reported, and counted
        failed += 1
        print(f"FAIL {name}: {traceback.format_exc()}", flush=True)


def expect(condition, why):
    if not condition:
        raise AssertionError(why)


def text_of(result):
    return "\n".join(block.text for block in result.content if block.type == "text")


async def drive(session):
    async def exec_(code, **arguments):
        return await session.call_tool("exec", {"code": code, **arguments})

    async def connect():
        await session.initialize()

    await check("connect", connect)

    async def server_info():
        info = session.server_info
        expect(info is not None and info.name == "codemode", f"serverInfo is {info}")
        expect(re.match(r"^\d+\.\d+\.\d+", info.version), f"version is {info.version}")

    await check("server info names codemode", server_info)

    async def list_tools():
        tools = (await session.list_tools()).tools
        names = [tool.name for tool in tools]
        expect(names == ["exec", "wait"], f"tools are {names}")
        expect("code" in tools[0].input_schema["required"], "exec does not require code")
        # Past 4,096 characters the declarations are in the `code` argument's description.
        served = tools[0].description + "\n" + tools[0].input_schema["properties"]["code"]["description"]
        expect("declare const tools" in served, "exec declares no tools")

    await check("tools/list offers exec and wait", list_tools)

    async def run_cell():
        result = await exec_("text(6 * 7)")
        expect(not result.is_error, text_of(result))
        expect("42" in text_of(result).split("\n"), text_of(result))

    await check("exec runs a cell", run_cell)

    async def failing_cell():
        result = await exec_("throw new Error('nope')")
        expect(not result.is_error, "a failed script is output of a call that worked")
        expect(text_of(result).startswith("Script failed"), text_of(result))

    await check("a failing cell is rendered, not an error of the call", failing_cell)

    async def unknown_argument():
        result = await exec_("1", colour="red")
        expect(result.is_error, "an unknown argument is a tool error")
        expect("colour" in text_of(result), text_of(result))

    await check("unknown arguments are a tool error", unknown_argument)

    async def progress():
        messages = []

        async def on_progress(progress, total, message):
            messages.append(message)

        await session.call_tool(
            "exec",
            {"code": "notify('halfway'); await tools.sleep({ms: 300}); text('done')"},
            progress_callback=on_progress,
        )
        expect(any(m and "halfway" in m for m in messages), f"progress: {messages}")

    await check("progress carries notify()", progress)

    async def yield_and_wait():
        started = await exec_("await tools.sleep({ms: 150}); text('later')", yield_time_ms=0)
        match = re.match(r"^Script running with cell ID (\S+)", text_of(started))
        expect(match, text_of(started))
        waited = await session.call_tool(
            "wait", {"cell_id": match.group(1), "yield_time_ms": 10000}
        )
        expect(text_of(waited).startswith("Script completed"), text_of(waited))
        expect("later" in text_of(waited), text_of(waited))

    await check("exec yields and wait collects", yield_and_wait)


async def approvals(program):
    folder = tempfile.mkdtemp()
    notes = os.path.join(folder, "notes")
    server = StdioServerParameters(
        command=program,
        args=["mcp", "--mcp", f"demo={program} demo-mcp-server"],
        env={**os.environ, "CODEMODE_DEMO_NOTES": notes},
    )
    note = "text(JSON.stringify((await tools.demo__note({text: '%s'})).content[0].text))"
    attempt = (
        "try { await tools.demo__note({text: 'never'}); text('ran'); }"
        " catch (e) { text('refused: ' + e.message); }"
    )
    asked = []

    async def on_elicitation(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={"decision": "allow_once"})

    async def with_handler():
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write, elicitation_callback=on_elicitation) as session:
                await session.initialize()
                result = await session.call_tool("exec", {"code": note % "from python"})
                expect('"noted"' in text_of(result), text_of(result))
        expect(len(asked) == 1, f"asked {len(asked)} times")
        expect("demo__note" in asked[0].message, asked[0].message)
        expect("decision" in asked[0].requested_schema["properties"], asked[0].requested_schema)

    await check("a nested call that writes asks the elicitation handler", with_handler)

    async def without_handler():
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("exec", {"code": attempt})
                text = text_of(result)
                expect("refused: tools.demo__note needs the user's approval" in text, text)
                expect("did not declare the elicitation capability" in text, text)

    await check("without a handler the call is refused, catchably", without_handler)

    async def counted():
        with open(notes) as file:
            lines = file.read().splitlines()
        expect(lines == ["from python"], f"the server saw {lines}")

    await check("only the approved call reached the server", counted)


async def main():
    mode = sys.argv[1]
    if mode == "approvals":
        await approvals(sys.argv[2])
    elif mode == "stdio":
        server = StdioServerParameters(command=sys.argv[2], args=["mcp", "--demo-tools"])
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write) as session:
                await drive(session)
    else:
        url, token = sys.argv[2], sys.argv[3]
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await drive(session)


asyncio.run(main())
sys.exit(1 if failed else 0)
