/**
 * The jailer's `--id`: it names the chroot (`<base>/<exec>/<id>/root`) and the cgroup, and
 * the jailer accepts only letters, digits and hyphens, 64 at most. It carries our resource
 * prefix and the session id like every other host resource, so a scan after a crash can
 * tell our jails from anyone else's (and the session id back from the jail).
 */
export const JAIL_ID_PATTERN = /^[A-Za-z0-9-]{1,64}$/;

export function assertJailId(id: string): void {
  if (!JAIL_ID_PATTERN.test(id)) {
    throw new Error(`invalid jailer id "${id}": the jailer accepts 1-64 letters, digits and hyphens`);
  }
}

/** `<prefix><sessionId>`, e.g. "sbx-k3v9x0a1b2". */
export function jailId(prefix: string, sessionId: string): string {
  const id = prefix + sessionId;
  assertJailId(id);
  return id;
}
