type JsonCaller = { json<T>(method: string, path: string, body?: unknown): Promise<T>; send(path: string, init: RequestInit): Promise<Response> };

/** A guest port's URLs (POST /v1/sessions/:id/ports). */
export interface PortUrl {
  port: number;
  /** Path-based: `/v1/sessions/<id>/ports/<port>/` on the orchestrator (with ?sbx_token= when public). */
  url: string;
  /** Host-based: `<port>-<id>.<domain>`, when the operator set SBX_PORTS_DOMAIN. */
  hostUrl?: string;
  /** The port token (public only): opens this port of this session without the API key. */
  token?: string;
  tokenId?: string;
  expiresAt?: string;
}

export interface PortUrlOptions {
  /** Put a port token in the URL so that it opens without the API key (a browser, a script). Default true here. */
  public?: boolean;
  /** How long the token works (default 3600 s, at least 10, at most 7 days). */
  ttlSeconds?: number;
}

/** The desktop's Chromium over CDP (POST /v1/sessions/:id/browser). */
export interface BrowserCdp {
  /** For Playwright: `chromium.connectOverCDP(cdpUrl)`. It carries a port token: treat it as a secret. */
  cdpUrl: string;
  /** Started by this call (false: it was running, the same browser). */
  started: boolean;
  tokenId: string;
  expiresAt: string;
}

/** A sandbox's ports on URLs: `sandbox.ports.url(3000)`. */
export class SandboxPorts {
  constructor(
    private readonly client: JsonCaller,
    private readonly id: string,
  ) {}

  /** The URL of a guest port (path-based; with a token unless `public: false`). */
  async url(port: number, options: PortUrlOptions = {}): Promise<string> {
    return (await this.open(port, options)).url;
  }

  /** Every URL form of a guest port, and its token. */
  open(port: number, options: PortUrlOptions = {}): Promise<PortUrl> {
    return this.client.json<PortUrl>('POST', `/v1/sessions/${encodeURIComponent(this.id)}/ports`, {
      port,
      public: options.public ?? true,
      ...(options.ttlSeconds !== undefined ? { ttlSeconds: options.ttlSeconds } : {}),
    });
  }

  /** Revokes a port token: its URLs open nothing from now on. */
  async revoke(tokenId: string): Promise<void> {
    await this.client.send(`/v1/sessions/${encodeURIComponent(this.id)}/port-tokens/${encodeURIComponent(tokenId)}`, { method: 'DELETE' });
  }
}

/** Starts (or finds) the desktop's Chromium and answers its CDP URL. */
export function startBrowser(client: JsonCaller, id: string, options: { ttlSeconds?: number } = {}): Promise<BrowserCdp> {
  return client.json<BrowserCdp>(
    'POST',
    `/v1/sessions/${encodeURIComponent(id)}/browser`,
    options.ttlSeconds !== undefined ? { ttlSeconds: options.ttlSeconds } : {},
  );
}

export async function closeBrowser(client: JsonCaller, id: string): Promise<void> {
  await client.send(`/v1/sessions/${encodeURIComponent(id)}/browser`, { method: 'DELETE' });
}
