/**
 * The runtimes a server may name in a session's `runtime`: the names registered in the
 * server's src/runtimes/registered.ts, copied here because the client imports nothing of the
 * server. test/unit/runtime-registry.test.ts fails when the two differ.
 */
export type RuntimeName = 'container' | 'qemu' | 'firecracker';
