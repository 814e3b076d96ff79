import { writeFile } from 'node:fs/promises';
import path from 'node:path';

/** In a template's config dir only: the template key's root access, tied to sbx-rekey. */
export const ROOT_AUTHORIZED_KEYS = 'root_authorized_keys';
export const REKEY_COMMAND = '/usr/local/sbin/sbx-rekey';

/**
 * Lets the template's client key log in as root, to run sbx-rekey and nothing else:
 * `restrict` takes away ptys, forwarding and the rest; `command=` replaces whatever the
 * client asks to run (sbx-rekey reads the request from SSH_ORIGINAL_COMMAND).
 */
export async function writeTemplateRootKey(configDir: string, clientPublicKey: string): Promise<void> {
  const line = `restrict,command="${REKEY_COMMAND}" ${clientPublicKey.trim()}\n`;
  await writeFile(path.join(configDir, ROOT_AUTHORIZED_KEYS), line, { mode: 0o600, flag: 'wx' });
}
