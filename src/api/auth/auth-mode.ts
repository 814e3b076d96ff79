import { isIP } from 'node:net';

/**
 * SBX_AUTH / `sbx serve --auth`: `on` always requires a key; `off` (or `--no-auth`) never
 * does, on loopback only; `auto` (default) requires one once the store has ever held a key
 * (revoking every key does not reopen keyless mode), and on a non-loopback address from the
 * start.
 */
export const AUTH_SETTINGS = ['auto', 'on', 'off'] as const;
export type AuthSetting = (typeof AUTH_SETTINGS)[number];

/**
 * What the server does about keys: `required`; `keyless-until-first-key` (loopback, auto, a
 * store that never held a key: keyless until a key is created, which turns auth on for good
 * without a restart, see key-requirement.ts); `keyless` (loopback, off: said explicitly).
 */
export type AuthMode = 'required' | 'keyless-until-first-key' | 'keyless';

/** What the store holds, as far as the auth mode is concerned. */
export interface KeyPresence {
  /** A key that is not revoked: someone could use the server. */
  usable: boolean;
  /** Any key, ever (revoked ones count): the store has been put in keyed use. */
  ever: boolean;
}

/** 127.0.0.0/8, ::1, ::ffff:127.x and `localhost`: addresses only this machine can reach. */
export function isLoopbackAddress(host: string): boolean {
  if (host === 'localhost') return true;
  const bare = host.replace(/^\[|\]$/g, '');
  if (isIP(bare) === 4) return bare.startsWith('127.');
  if (isIP(bare) === 6) return bare === '::1' || /^::ffff:127\./i.test(bare);
  return false;
}

/**
 * Decides at start-up. A server reachable from other machines never runs keyless: without a
 * key to give out, it refuses to start, saying how to make one.
 */
export function resolveAuthMode(setting: AuthSetting, host: string, keys: KeyPresence, stateDir: string): AuthMode {
  const loopback = isLoopbackAddress(host);
  if (setting === 'off') {
    if (!loopback) {
      throw new Error(
        `refusing to serve without authentication on ${host}, which is not a loopback address: ` +
          'keyless mode (--no-auth, SBX_AUTH=off) is for local development on 127.0.0.1 only',
      );
    }
    return 'keyless';
  }
  if (!loopback) {
    if (!keys.usable) {
      throw new Error(
        `refusing to serve on ${host} (not a loopback address) without API keys: nobody could use it, or everybody ` +
          `could. Create a key first: \`sbx keys create --tenant <name> --state-dir ${stateDir}\` (it prints the key once), ` +
          'or serve on 127.0.0.1 for keyless local development',
      );
    }
    return 'required';
  }
  if (setting === 'on' || keys.ever) return 'required';
  return 'keyless-until-first-key';
}
