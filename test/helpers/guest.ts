import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { CONFIG_FILES, GUEST_USER } from '../../src/guest/contract.js';
import { publicKeyBlob } from '../../src/transport/ssh-keys.js';
import { guestTransport, type GuestTransport, type ExecResult } from '../../src/transport/index.js';

/**
 * An SSH connection of the test's own to a live guest, made from the files the orchestrator
 * wrote (the session's client key and the pinned host key): what any SSH client could do.
 */
export async function connectToGuest(stateDir: string, sessionId: string, address: string): Promise<GuestTransport> {
  const sessionDir = path.join(stateDir, sessionId);
  const privateKey = await readFile(path.join(sessionDir, 'id_ed25519'), 'utf8');
  const hostPub = await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKeyPub), 'utf8');
  const conn = guestTransport({
    endpoint: { host: address, port: 22 },
    username: GUEST_USER,
    privateKey,
    pinnedHostKey: publicKeyBlob(hostPub.trim()),
  });
  await conn.open(10_000);
  return conn;
}

export async function guestSh(conn: GuestTransport, script: string): Promise<ExecResult & { text: string }> {
  const result = await conn.exec(script, { timeoutMs: 20_000 });
  return { ...result, text: result.stdout.toString('utf8') };
}

/** The guest address of a session (the orchestrator's own lookup). */
export { guestAddressOf as guestAddress } from '../../src/network/netns.js';

/** Reads the PNG header: width and height. */
export function pngSize(png: Buffer): { width: number; height: number } {
  if (png.readUInt32BE(0) !== 0x89504e47) throw new Error('not a PNG');
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

/** Maps an X keysym (as xev prints it) to the character it types, or undefined for modifiers. */
export function keysymToChar(keysym: number): string | undefined {
  if (keysym >= 0x20 && keysym <= 0x7e) return String.fromCharCode(keysym);
  if (keysym >= 0xa0 && keysym <= 0xff) return String.fromCharCode(keysym);
  if (keysym >= 0x01000100 && keysym <= 0x0110ffff) return String.fromCodePoint(keysym - 0x01000000);
  if (keysym === 0xff0d) return '\n';
  if (keysym === 0xff09) return '\t';
  return undefined;
}
