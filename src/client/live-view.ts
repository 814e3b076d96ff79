/** A live view of a session: open `url` in a browser (it carries the token: treat it as a secret). */
export interface LiveView {
  viewId: string;
  sessionId: string;
  mode: 'view' | 'control';
  url: string;
  createdAt: string;
  expiresAt: string;
}

export interface LiveViewOptions {
  /** `view` (default) only watches: the server drops its input. `control` types, clicks and may take over. */
  mode?: 'view' | 'control';
  /** How long the URL works (default 3600 s, at most 86400). */
  ttlSeconds?: number;
}

/** POST /v1/sessions/:id/views through a client's authenticated JSON call. */
export function openLiveView(
  client: { json<T>(method: string, path: string, body?: unknown): Promise<T> },
  id: string,
  options: LiveViewOptions,
): Promise<LiveView> {
  return client.json<LiveView>('POST', `/v1/sessions/${encodeURIComponent(id)}/views`, { mode: options.mode ?? 'view', ttlSeconds: options.ttlSeconds });
}
