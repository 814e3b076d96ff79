import { writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * In a snapshot base's config dir, and every QEMU session's (its rekey key, so that a snapshot
 * of it can be forked: docs/snapshots.md): a key's root access, tied to sbx-rekey.
 */
export const ROOT_AUTHORIZED_KEYS = 'root_authorized_keys';
export const REKEY_COMMAND = '/usr/local/sbin/sbx-rekey';

/**
 * Lets the snapshot base's client key log in as root, to run sbx-rekey and nothing else:
 * `restrict` takes away ptys, forwarding and the rest; `command=` replaces whatever the
 * client asks to run (sbx-rekey reads the request from SSH_ORIGINAL_COMMAND).
 */
export async function writeBaseRootKey(configDir: string, clientPublicKey: string): Promise<void> {
  await writeFile(path.join(configDir, ROOT_AUTHORIZED_KEYS), rekeyLine(clientPublicKey), { mode: 0o600, flag: 'wx' });
}

/** The root_authorized_keys line of a key that may run sbx-rekey and nothing else (a QEMU session's rekey key too). */
export function rekeyLine(clientPublicKey: string): string {
  return `restrict,command="${REKEY_COMMAND}" ${clientPublicKey.trim()}\n`;
}
