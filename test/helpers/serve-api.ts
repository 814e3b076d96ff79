import assert from 'node:assert/strict';
import sharp from 'sharp';

export type Json = Record<string, unknown>;

export interface ApiAnswer {
  status: number;
  json: Json;
  /** The body as it came (a screenshot's PNG). */
  bytes: Buffer;
}

/**
 * The JSON calls of tests that drive a `sbx serve` they restart (its port and key are known
 * only once it runs, hence the getters), and its bash tool's text.
 */
export function serveApi(port: () => number, defaultKey: () => string) {
  const api = async (method: string, url: string, body?: unknown, key = defaultKey()): Promise<ApiAnswer> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`http://127.0.0.1:${port()}${url}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const bytes = Buffer.from(await res.arrayBuffer());
    let json: Json = {};
    try {
      json = JSON.parse(bytes.toString('utf8')) as Json;
    } catch {
      // an image
    }
    return { status: res.status, json, bytes };
  };
  const bash = async (id: string, command: string): Promise<string> => {
    const res = await api('POST', `/v1/sessions/${id}/tools/bash`, { command });
    assert.equal(res.status, 200, JSON.stringify(res.json));
    return (res.json.content as Array<{ text?: string }>).map((c) => c.text ?? '').join('');
  };
  /** The session's screenshot as raw pixels. */
  const screenshot = async (id: string): Promise<RawImage> => {
    const res = await api('GET', `/v1/sessions/${id}/screenshot`);
    assert.equal(res.status, 200);
    const { data, info } = await sharp(res.bytes).raw().toBuffer({ resolveWithObject: true });
    return { data, width: info.width, height: info.height };
  };
  return { api, bash, screenshot };
}

export interface RawImage {
  data: Buffer;
  width: number;
  height: number;
}

/** Pixels that differ between two screenshots outside a box at the top left (a window that changes on its own, a counter's). */
export function differingOutside(a: RawImage, b: RawImage, box: { width: number; height: number }): number {
  assert.equal(a.width, b.width);
  const channels = a.data.length / (a.width * a.height);
  let differing = 0;
  for (let y = 0; y < a.height; y++) {
    for (let x = 0; x < a.width; x++) {
      if (x < box.width && y < box.height) continue;
      const at = (y * a.width + x) * channels;
      if (a.data.compare(b.data, at, at + channels, at, at + channels) !== 0) differing++;
    }
  }
  return differing;
}
