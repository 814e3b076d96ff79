import { lstat, rm } from 'node:fs/promises';
import path from 'node:path';
import { removeTreeOnOneMount } from '../../../host/remove-tree.js';

/**
 * Removes `relative` (a path of ours, such as `dev` or `run/firecracker.socket`) from a jail
 * whose root is the VM's user's: a VMM that got out of its guest could have put a link where
 * a directory was, to have the orchestrator delete elsewhere. So each component is looked at
 * without following it: a link is removed as a link, never followed; a real directory at the
 * end goes with everything in it (on its own filesystem only).
 */
export async function removeInJail(jailRoot: string, relative: string): Promise<void> {
  const parts = relative.split('/').filter((part) => part !== '' && part !== '.');
  if (parts.length === 0 || parts.includes('..')) throw new Error(`not a path inside the jail: ${relative}`);
  let at = jailRoot;
  for (const [index, part] of parts.entries()) {
    at = path.join(at, part);
    const info = await lstat(at).catch(() => undefined);
    if (!info) return;
    const last = index === parts.length - 1;
    if (last && info.isDirectory()) return removeTreeOnOneMount(at);
    if (last || !info.isDirectory()) return rm(at, { force: true });
  }
}
