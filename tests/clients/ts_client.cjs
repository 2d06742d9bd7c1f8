// One MCP client of the approval matrix: the TypeScript client 2.4 (`@modelcontextprotocol/client`),
// `Client` over `StreamableHTTPClientTransport` with its default negotiation (approved out of
// band while the call waits).
// Usage: node ts_client.cjs URL TOKEN SQL...   (QUERYGATE_CLIENTS_DIR: where npm installed it)
// Prints `RESULT ok <text>` or `RESULT error <text>` per SQL (run_mutation_query).
const { createRequire } = require("node:module");
const path = require("node:path");
const load = createRequire(path.join(process.env.QUERYGATE_CLIENTS_DIR, "package.json"));
const { Client, StreamableHTTPClientTransport } = load("@modelcontextprotocol/client");

async function main([url, token, ...statements]) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "querygate-approval-matrix", version: "1.0.0" });
  await client.connect(transport);
  console.log(`PROTOCOL ${transport.protocolVersion ?? client.getNegotiatedProtocolVersion?.()}`);
  for (const sql of statements) {
    const result = await client.callTool({ name: "run_mutation_query", arguments: { sql } }, { timeout: 120000 });
    const text = result.content.filter((b) => b.type === "text").map((b) => b.text).join(" ");
    console.log(`RESULT ${result.isError ? "error" : "ok"} ${JSON.stringify(result.structuredContent)} ${text}`);
  }
  await client.close();
}

main(process.argv.slice(2)).catch((err) => {
  console.error(err);
  process.exit(1);
});
