import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { SandboxClient } from './index.js';

/**
 * Files in and out of a sandbox (PUT/GET /v1/sessions/:id/files). Bodies are streamed
 * both ways: an upload from a stream is never read into memory first, and a download can
 * be consumed as a stream.
 *
 *   await sandbox.upload('/home/user/data.csv', createReadStream('data.csv'));
 *   const bytes = await sandbox.download('/home/user/out.png');
 */

export interface FileRequestOptions {
  signal?: AbortSignal;
}

export interface DownloadOptions extends FileRequestOptions {
  /** A file over this many bytes is refused (file_too_large) from its size, before any of it is sent. */
  maxBytes?: number;
}

export interface UploadFileOptions extends FileRequestOptions {
  /** Permissions of the file, e.g. 0o755 (default: those of the file replaced, else 0o644). */
  mode?: number;
}

export interface UploadedFile {
  path: string;
  size: number;
}

export type UploadData = Buffer | Uint8Array | string | Readable | WebReadableStream<Uint8Array>;

/** Writes `data` to `path` in the sandbox (replacing it atomically). */
export async function uploadFile(
  client: SandboxClient,
  sessionId: string,
  path: string,
  data: UploadData,
  options: UploadFileOptions = {},
): Promise<UploadedFile> {
  const query: Record<string, string> = { path };
  if (options.mode !== undefined) query.mode = options.mode.toString(8).padStart(4, '0');
  const streamed = data instanceof Readable || isWebStream(data);
  const body = data instanceof Readable ? Readable.toWeb(data) : data;
  const init: RequestInit & { duplex?: 'half' } = {
    method: 'PUT',
    headers: { 'content-type': 'application/octet-stream' },
    // fetch's types know the web ReadableStream of lib.dom, Node's is the same object.
    body: body as unknown as RequestInit['body'],
    signal: options.signal,
  };
  // A streamed request body must be declared half-duplex (fetch spec); fetch then sends
  // it chunked, without needing its length.
  if (streamed) init.duplex = 'half';
  const response = await send(client, sessionId, query, init);
  return (await response.json()) as UploadedFile;
}

/** Reads a whole file of the sandbox into memory. */
export async function downloadFile(client: SandboxClient, sessionId: string, path: string, options: FileRequestOptions = {}): Promise<Buffer> {
  const response = await send(client, sessionId, { path }, { method: 'GET', signal: options.signal });
  return Buffer.from(await response.arrayBuffer());
}

/** A file of the sandbox as a stream, with its size: for files too big to hold in memory. */
export async function downloadFileStream(
  client: SandboxClient,
  sessionId: string,
  path: string,
  options: DownloadOptions = {},
): Promise<{ size: number; stream: Readable }> {
  const query: Record<string, string> = { path };
  if (options.maxBytes !== undefined) query.maxBytes = String(options.maxBytes);
  const response = await send(client, sessionId, query, { method: 'GET', signal: options.signal });
  const size = Number(response.headers.get('content-length') ?? Number.NaN);
  const body = response.body as unknown as WebReadableStream<Uint8Array> | null;
  return { size, stream: body ? Readable.fromWeb(body) : Readable.from([]) };
}

function send(client: SandboxClient, sessionId: string, query: Record<string, string>, init: RequestInit & { duplex?: 'half' }): Promise<Response> {
  return client.send(`/v1/sessions/${encodeURIComponent(sessionId)}/files?${new URLSearchParams(query)}`, init);
}

function isWebStream(data: UploadData): data is WebReadableStream<Uint8Array> {
  return typeof (data as { getReader?: unknown }).getReader === 'function';
}
