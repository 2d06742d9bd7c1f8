"""One MCP client of the approval matrix: LangChain's MCP adapters
(`langchain-mcp-adapters` 0.3), `MultiServerMCPClient` over streamable HTTP (no elicitation:
approved out of band while the call waits). No model: the LangChain tool the adapters made
is invoked directly, as an agent would invoke it.

Usage: python langchain_adapters.py URL TOKEN SQL...
Prints `RESULT ok <text>` or `RESULT error <text>` per SQL (run_mutation_query).
"""

import asyncio
import sys
from datetime import timedelta

from langchain_core.tools import ToolException
from langchain_mcp_adapters.client import MultiServerMCPClient


async def main(url: str, token: str, statements: list[str]) -> None:
    client = MultiServerMCPClient(
        {
            "querygate": {
                "transport": "streamable_http",
                "url": url,
                "headers": {"Authorization": f"Bearer {token}"},
                "timeout": timedelta(seconds=30),
                "sse_read_timeout": timedelta(seconds=120),
            }
        }
    )
    tools = {tool.name: tool for tool in await client.get_tools()}
    tool = tools["run_mutation_query"]
    print("PROTOCOL langchain", flush=True)
    for sql in statements:
        # Invoked with a tool call, as an agent does: the answer is a ToolMessage whose
        # status says whether the MCP result was an error (isError).
        call = {"type": "tool_call", "id": "call-1", "name": tool.name, "args": {"sql": sql}}
        try:
            message = await tool.ainvoke(call)
            outcome = "error" if message.status == "error" else "ok"
            print(f"RESULT {outcome} {message.content}", flush=True)
        except ToolException as err:
            print(f"RESULT error {err}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: langchain_adapters.py URL TOKEN SQL...")
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
