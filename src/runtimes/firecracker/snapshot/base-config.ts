import { writeFile } from 'node:fs/promises';
import path from 'node:path';

/** In a snapshot base's config dir only: the base key's root access, tied to sbx-rekey. */
export const ROOT_AUTHORIZED_KEYS = 'root_authorized_keys';
export const REKEY_COMMAND = '/usr/local/sbin/sbx-rekey';

/**
 * Lets the snapshot base's client key log in as root, to run sbx-rekey and nothing else:
 * `restrict` takes away ptys, forwarding and the rest; `command=` replaces whatever the
 * client asks to run (sbx-rekey reads the request from SSH_ORIGINAL_COMMAND).
 */
export async function writeBaseRootKey(configDir: string, clientPublicKey: string): Promise<void> {
  const line = `restrict,command="${REKEY_COMMAND}" ${clientPublicKey.trim()}\n`;
  await writeFile(path.join(configDir, ROOT_AUTHORIZED_KEYS), line, { mode: 0o600, flag: 'wx' });
}
