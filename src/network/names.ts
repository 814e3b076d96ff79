/**
 * Every host resource we create carries the prefix and the session id in its name, so that
 * a scan after a crash can tell ours from everything else on the host and reclaim it.
 */
export const RESOURCE_PREFIX = 'sbx-';

/** Session ids: 10 characters of [a-z0-9], so that `sbx-<id>` fits a 15-byte interface name. */
export const SESSION_ID_PATTERN = /^[a-z0-9]{10}$/;

export function netnsName(sessionId: string): string {
  return `${RESOURCE_PREFIX}${sessionId}`;
}

/** The host's end of the sandbox's veth pair (the other end is eth0 inside the netns). */
export function hostVethName(sessionId: string): string {
  return `${RESOURCE_PREFIX}${sessionId}`;
}

export function containerName(sessionId: string): string {
  return `${RESOURCE_PREFIX}${sessionId}`;
}

/** Extracts the session id from one of our resource names, or undefined if it is not ours. */
export function sessionIdOf(resourceName: string): string | undefined {
  if (!resourceName.startsWith(RESOURCE_PREFIX)) return undefined;
  const id = resourceName.slice(RESOURCE_PREFIX.length);
  return SESSION_ID_PATTERN.test(id) ? id : undefined;
}
