import type { Logger } from 'pino';
import { UnavailableError } from '../../errors.js';
import type { Metrics } from '../../metrics/metrics.js';
import type { RuntimeName } from '../../runtimes/runtime.js';
import type { AddressSource, SessionLifecycle } from '../lifecycle.js';
import type { SandboxHost } from '../sandbox-host.js';
import { Session } from '../session.js';
import { LOCAL_TENANT, transportFor } from '../session-record.js';
import { newRecord } from '../session-request.js';
import type { SessionStore } from '../store.js';
import type { TemplateSource } from '../templates.js';
import type { PooledSandbox, ScreenShape, WarmPoolHooks } from './warm-pool.js';

export interface PooledSandboxOptions {
  lifecycle: SessionLifecycle;
  host: SandboxHost;
  addresses: AddressSource;
  store: SessionStore;
  metrics: Metrics;
  log: Logger;
  runtimeName: RuntimeName;
  templates: TemplateSource;
}

/** How the warm pool of `template` makes and unmakes its sandboxes (its WarmPoolHooks). */
export function pooledSandboxHooks(opts: PooledSandboxOptions, template: string): WarmPoolHooks {
  const release = async (pooled: PooledSandbox, reason: string): Promise<void> => {
    const { session } = pooled;
    opts.log.debug({ pooledSandbox: session.id, reason }, 'warm pool: destroying a pooled sandbox');
    try {
      await session.cleanup.run();
      opts.store.forgetResources(session.id);
      opts.store.delete(session.id);
    } catch (err) {
      // Its row and ledger stay: the next start-up reclaims what is left.
      opts.metrics.errors.inc({ kind: 'destroy' });
      opts.log.error({ err, pooledSandbox: session.id }, 'releasing a pooled sandbox failed');
    }
  };

  /** One sandbox for the warm pool: stored (so a restart reclaims it), booted, known ready. */
  const boot = async (shape: ScreenShape): Promise<PooledSandbox> => {
    if (opts.lifecycle.isShuttingDown) throw new UnavailableError('the orchestrator is shutting down');
    // Resolved at every boot: a template rebuilt meanwhile is what the next pooled sandbox runs.
    const { image } = await opts.templates.resolve(template);
    const request = opts.lifecycle.resolve({ ...shape, template });
    // Pooled sandboxes have no egress: reached over a socket, they need no NIC (lifecycle.ts).
    const lease = opts.host.controlTransport !== 'tcp' ? undefined : await opts.addresses.leaseFree();
    // Owned by no tenant until a create claims it (and not counted against any limit).
    const record = newRecord(request, lease?.index ?? null, true, LOCAL_TENANT, opts.runtimeName);
    record.transport = transportFor(lease !== undefined, opts.host.controlTransport);
    const session = new Session(record);
    session.image = image;
    const log = opts.log.child({ pooledSandbox: record.id });
    if (lease) await session.cleanup.push('address lease', () => opts.addresses.release(lease.index));
    // An insert that throws (a full disk) gives the lease back: nothing else knows of it (as a cold create: lifecycle.ts).
    try {
      opts.store.insert(record);
    } catch (err) {
      await session.cleanup.run();
      throw err;
    }
    try {
      const pooled = await opts.host.bootPooled(session, lease, log);
      opts.lifecycle.setState(session, 'ready');
      return pooled;
    } catch (err) {
      await release({ session, hostPublicKey: '' }, 'it failed to boot');
      throw err;
    }
  };

  return { boot, release };
}
