// Drives lakegate's MCP endpoint with the official TypeScript SDK (@modelcontextprotocol/sdk):
//   node client.mjs http URL USER PASSWORD      streamable HTTP with basic auth
//   node client.mjs stdio COMMAND ARGS_JSON     stdio (launches `lakegate mcp ...`)
// Prints one JSON line per step; tests/e2e/test_mcp.py checks them.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [mode, target, a, b] = process.argv.slice(2);
const transport = mode === "http"
  ? new StreamableHTTPClientTransport(new URL(target), {
      requestInit: { headers: { Authorization: "Basic " + Buffer.from(`${a}:${b}`).toString("base64") } },
    })
  : new StdioClientTransport({ command: target, args: JSON.parse(a), stderr: "ignore" });
const client = new Client({ name: "lakegate-ts-test", version: "1.0.0" });
await client.connect(transport);
const out = (step, value) => console.log(JSON.stringify({ step, ...value }));
out("tools", { server: client.getServerVersion().name, tools: (await client.listTools()).tools.map((t) => t.name) });
const q = await client.callTool({ name: "query", arguments: { sql: "SELECT customer_id, name FROM public.customers WHERE customer_id = 2" } });
out("query", { isError: q.isError ?? false, answer: q.structuredContent });
const denied = await client.callTool({ name: "describe_table", arguments: { table: "sales.regions" } });
out("denied", { isError: denied.isError, text: denied.content[0].text });
out("resources", { uris: (await client.listResources()).resources.map((r) => r.uri) });
await client.close();
