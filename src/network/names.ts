/**
 * Every host resource we create carries a prefix and the session id in its name, so that a
 * scan after a crash can tell ours from everything else on the host and reclaim it. The
 * prefix is configurable (SBX_RESOURCE_PREFIX) so that two orchestrators, say a test suite
 * and a dev server, can share a host without reclaiming each other's sandboxes.
 */
export const DEFAULT_RESOURCE_PREFIX = 'sbx-';

/** Session ids: 10 characters of [a-z0-9], so that `<prefix><id>` fits a 15-byte interface name. */
export const SESSION_ID_PATTERN = /^[a-z0-9]{10}$/;

export class ResourceNames {
  constructor(readonly prefix: string = DEFAULT_RESOURCE_PREFIX) {
    if (!/^[a-z]{3}-$/.test(prefix)) throw new Error(`resource prefix must be three lowercase letters and a dash, like "sbx-"; got "${prefix}"`);
  }

  /** The sandbox's network namespace. */
  netns(sessionId: string): string {
    return this.prefix + sessionId;
  }

  /** The host's end of the sandbox's veth pair (the other end is eth0 inside the netns). */
  hostVeth(sessionId: string): string {
    return this.prefix + sessionId;
  }

  /** The runc container id. */
  container(sessionId: string): string {
    return this.prefix + sessionId;
  }

  /** A VM's name (QEMU's -name, which is also its process name): found again by reclaim. */
  vm(sessionId: string): string {
    return this.prefix + sessionId;
  }

  /**
   * The nftables table of this orchestrator's guest network policy (see policy/ruleset.ts):
   * one per prefix, so orchestrators with other prefixes never touch each other's rules.
   * Its rules fence every interface named with the prefix as a sandbox's: name no other
   * interface of the host with it.
   */
  get policyTable(): string {
    return `${this.prefix}netpolicy`;
  }

  /** runc's state directory for our containers, apart from any other runc user's. */
  get runcRoot(): string {
    return `/run/${this.prefix}runc`;
  }

  /**
   * Where a sandbox container's root filesystem is mounted: outside the session dir, whose
   * 0700 (it holds the keys) the container's user namespace, being no host root, cannot cross.
   */
  containerRootfs(sessionId: string): string {
    return `${this.rootfsRoot}/${this.container(sessionId)}`;
  }

  /** The directory of the containers' rootfs mount points (see containerRootfs). */
  get rootfsRoot(): string {
    return `/run/${this.prefix}rootfs`;
  }

  /** The cgroup (path under each controller) of a sandbox container. */
  cgroup(sessionId: string): string {
    return `/${this.prefix.slice(0, -1)}/${this.prefix}${sessionId}`;
  }

  /** The session id in one of our resource names, or undefined if the name is not ours. */
  sessionIdOf(resourceName: string): string | undefined {
    if (!resourceName.startsWith(this.prefix)) return undefined;
    const id = resourceName.slice(this.prefix.length);
    return SESSION_ID_PATTERN.test(id) ? id : undefined;
  }
}
