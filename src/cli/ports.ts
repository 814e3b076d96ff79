import { Command, InvalidArgumentError, Option } from 'commander';
import { SandboxPorts, type SandboxClient } from '../client/index.js';

function guestPort(value: string): number {
  if (!/^[1-9][0-9]{0,4}$/.test(value) || Number(value) > 65_535) throw new InvalidArgumentError('must be a port from 1 to 65535');
  return Number(value);
}

function seconds(value: string): number {
  if (!/^[1-9][0-9]{0,6}$/.test(value)) throw new InvalidArgumentError('must be a whole number of seconds');
  return Number(value);
}

/**
 * `sbx port <id> <port>`: prints a URL of a guest port (with a port token, so a browser opens
 * it without the API key, unless --no-token); `sbx browser <id>`: the desktop's Chromium and
 * its CDP URL for Playwright.
 */
export function portCommands(client: () => SandboxClient): Command[] {
  const port = new Command('port')
    .argument('<id>', 'session id')
    .argument('<port>', 'the port in the guest', guestPort)
    .description('print a URL of a port in the guest (path-based; the host-based one too when the server has SBX_PORTS_DOMAIN)')
    .option('--no-token', 'no port token in the URL: it then opens only with the API key')
    .addOption(new Option('--ttl <seconds>', 'how long the token works (default 3600)').argParser(seconds))
    .action(async (id: string, guest: number, opts: { token: boolean; ttl?: number }) => {
      const made = await new SandboxPorts(client(), id).open(guest, { public: opts.token, ...(opts.ttl !== undefined ? { ttlSeconds: opts.ttl } : {}) });
      console.log(made.url);
      if (made.hostUrl) console.log(made.hostUrl);
      if (made.tokenId) console.error(`token ${made.tokenId} expires ${made.expiresAt}`);
    });
  const browser = new Command('browser')
    .argument('<id>', 'session id')
    .description("start the desktop's Chromium (or find it running) and print its CDP URL, for chromium.connectOverCDP(url)")
    .option('--close', 'close it instead')
    .action(async (id: string, opts: { close?: boolean }) => {
      const sandbox = await client().connect(id);
      if (opts.close) return sandbox.closeBrowser();
      console.log((await sandbox.browser()).cdpUrl);
    });
  return [port, browser];
}
