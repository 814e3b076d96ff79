import { run, type RunResult } from '../../util/exec.js';

/**
 * The `nft` command, fed a generated script on standard input (`nft -f -`): one script is
 * one kernel transaction, so a change applies whole or not at all, and no value ever passes
 * through a shell. Listings use `nft --json`, parsed, never scraped from the text form.
 */
const NFT = 'nft';
const NFT_TIMEOUT_MS = 10_000;

export class NftMissingError extends Error {
  constructor(cause: unknown) {
    super('the `nft` command (Debian package nftables) is needed to enforce the guest network policy: apt-get install nftables', { cause });
    this.name = 'NftMissingError';
  }
}

/** Runs nft; a host without it gets an error that says what to install. */
async function nft(args: readonly string[], input?: string): Promise<RunResult> {
  try {
    return await run([NFT, ...args], { input, timeoutMs: NFT_TIMEOUT_MS, allowFailure: true });
  } catch (err) {
    if (err instanceof Error && /ENOENT/.test(err.message)) throw new NftMissingError(err);
    throw err;
  }
}

/** Applies a script as one transaction; throws with nft's own message on failure. */
export async function applyNft(script: string): Promise<void> {
  const res = await nft(['-f', '-'], script);
  if (res.exitCode !== 0) throw new Error(`nft -f -: ${res.stderr.trim()}\n--- script ---\n${script}`);
}

/** Like applyNft, but a missing table or set ("No such file or directory") is not an error. */
export async function applyNftIfPresent(script: string): Promise<void> {
  const res = await nft(['-f', '-'], script);
  if (res.exitCode !== 0 && !/No such file or directory/.test(res.stderr)) {
    throw new Error(`nft -f -: ${res.stderr.trim()}`);
  }
}

interface NftJsonTable {
  table: { family: string; name: string };
}
interface NftJsonSet {
  set: { name: string; elem?: unknown[] };
}

async function listJson(args: readonly string[]): Promise<unknown[] | undefined> {
  const res = await nft(['--json', ...args]);
  if (res.exitCode !== 0) {
    if (/No such file or directory/.test(res.stderr)) return undefined;
    throw new Error(`nft --json ${args.join(' ')}: ${res.stderr.trim()}`);
  }
  const parsed = JSON.parse(res.stdout) as { nftables?: unknown[] };
  return parsed.nftables ?? [];
}

/** A whole table as nft's JSON objects (metainfo left out); undefined when it does not exist. */
export async function listTable(family: string, table: string): Promise<unknown[] | undefined> {
  const objects = await listJson(['list', 'table', family, table]);
  return objects?.filter((o) => !(typeof o === 'object' && o !== null && 'metainfo' in o));
}

/** Every nftables table on the host, as family and name. */
export async function listTables(): Promise<Array<{ family: string; name: string }>> {
  const objects = (await listJson(['list', 'tables'])) ?? [];
  return objects
    .filter((o): o is NftJsonTable => typeof o === 'object' && o !== null && 'table' in o)
    .map((o) => ({ family: o.table.family, name: o.table.name }));
}

/**
 * The elements of a set, as nft's JSON gives them (a string, or {concat: [...]} for a
 * concatenated key); undefined when the table or set does not exist.
 */
export async function listSetElements(family: string, table: string, set: string): Promise<unknown[] | undefined> {
  const objects = await listJson(['list', 'set', family, table, set]);
  if (!objects) return undefined;
  const found = objects.find((o): o is NftJsonSet => typeof o === 'object' && o !== null && 'set' in o);
  return found?.set.elem ?? [];
}
