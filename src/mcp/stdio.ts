import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { SandboxClient } from '../client/index.js';
import { createMcpServer } from './server.js';

/**
 * `sbx mcp`: the MCP server on stdin/stdout, for clients that spawn their servers (Claude
 * Desktop, Claude Code, IDEs). It talks to a running orchestrator (SBX_URL, SBX_API_KEY) and
 * never starts one: an orchestrator needs root, holds its state directory's lock and owns
 * its sandboxes, while an MCP client spawns a server per window or conversation as the user
 * and kills it when it closes. stdout carries only the protocol; anything else goes to stderr.
 * Resolves when the client closes the connection.
 */
export async function runStdioServer(client: SandboxClient): Promise<void> {
  const server = createMcpServer(client);
  const transport = new StdioServerTransport();
  // The protocol layer takes the transport's onclose for itself and calls this one after.
  const closed = new Promise<void>((resolve) => {
    server.server.onclose = resolve;
    process.stdin.once('end', resolve);
  });
  await server.connect(transport);
  await closed;
  await server.close();
}
