import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { SandboxClient } from '../client/index.js';
import { SandboxError } from '../client/errors.js';
import { downloadFileStream, uploadFile } from '../client/files.js';
import { errorResult, jsonResult } from './results.js';
import { MCP_MAX_FILE_BYTES } from './schemas.js';

/**
 * upload_file and download_file: whole files as base64 in one MCP message, so both are
 * capped (MCP_MAX_FILE_BYTES, below the orchestrator's own SBX_MAX_FILE_BYTES): a message is
 * held whole in memory on both ends, and /mcp's request body limit is 1 MiB. Bigger files
 * go through the files API (PUT/GET /v1/sessions/:id/files), which streams.
 */

export async function upload(client: SandboxClient, id: string, path: string, contentBase64: string, mode?: string): Promise<CallToolResult> {
  const bytes = Buffer.from(contentBase64, 'base64');
  // The schema bounds the text's length; padding tricks cannot make it decode to more.
  if (bytes.length > MCP_MAX_FILE_BYTES) return errorResult(`content_base64: at most ${MCP_MAX_FILE_BYTES} bytes (got ${bytes.length})`);
  const written = await uploadFile(client, id, path, bytes, mode === undefined ? {} : { mode: parseInt(mode, 8) });
  return jsonResult(written);
}

export async function download(client: SandboxClient, id: string, path: string): Promise<CallToolResult> {
  const tooLarge = (what: string) =>
    errorResult(`${what}, over download_file's limit of ${MCP_MAX_FILE_BYTES} bytes: use the files API (GET /v1/sessions/:id/files) for it`);
  // The limit goes with the request: a bigger file is refused from its size before any of it
  // is read (in process, /mcp's calls are answered whole, so reading it would hold all of it).
  let download: Awaited<ReturnType<typeof downloadFileStream>>;
  try {
    download = await downloadFileStream(client, id, path, { maxBytes: MCP_MAX_FILE_BYTES });
  } catch (err) {
    // "<path> (<size> bytes) is larger than ...": its size, as the server stat'd it.
    const size = err instanceof SandboxError && err.code === 'file_too_large' ? /\((\d+) bytes\)/.exec(err.message)?.[1] : undefined;
    if (size !== undefined) return tooLarge(`${path} is ${size} bytes`);
    throw err;
  }
  const { size, stream } = download;
  if (Number.isFinite(size) && size > MCP_MAX_FILE_BYTES) {
    stream.destroy();
    return tooLarge(`${path} is ${size} bytes`);
  }
  // Counted as it arrives, whatever the length header said.
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of stream) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    total += buffer.length;
    if (total > MCP_MAX_FILE_BYTES) {
      stream.destroy();
      return tooLarge(`${path} is more than ${total} bytes`);
    }
    chunks.push(buffer);
  }
  const data = Buffer.concat(chunks).toString('base64');
  return {
    content: [
      { type: 'text', text: `${path}: ${total} bytes, base64 in the resource below` },
      { type: 'resource', resource: { uri: `sandbox://${id}${encodeURI(path)}`, mimeType: 'application/octet-stream', blob: data } },
    ],
  };
}
