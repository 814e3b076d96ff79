/**
 * What the Firecracker test files share around the stand-ins of ./bin: the host they make (the
 * contract emulator, and the jailer stand-in when jailed), a work directory per file (jails,
 * sessions, logs) and the emulator's records of every process and call, read back per session.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { findImage, type GuestImage } from '../../../src/guest/image/builder.js';
import type { AddressPool } from '../../../src/network/address-pool.js';
import { ResourceNames } from '../../../src/network/names.js';
import { createSandboxNetwork } from '../../../src/network/netns.js';
import type { FirecrackerRuntime } from '../../../src/runtimes/firecracker/firecracker-runtime.js';
import type { FirecrackerHost } from '../../../src/runtimes/firecracker/host/host-check.js';
import { hostCgroupVersion } from '../../../src/runtimes/vm/cgroups.js';
import { newSessionId } from '../../../src/sessions/session.js';
import { generateSessionKeys, writeSessionKeys } from '../../../src/transport/ssh-keys.js';
import type { CleanupStack } from '../../../src/util/cleanup-stack.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX } from '../orchestrator.js';

const BIN = path.join(import.meta.dirname, 'bin');

/** A line of the emulator's record: a VMM process as it started, or a call it answered (or refused). */
export interface Recorded {
  process?: { pid: number; uid: number; gid: number; netns: string; argv: string[]; root: string };
  call?: string;
  body?: Record<string, unknown>;
  status?: number;
  fault?: string;
  vsockConnect?: string;
}

/** The stand-ins as a runtime's host: the emulator as `firecracker`, the jailer stand-in when jailed. */
export function emulatorHost(jailed: boolean): FirecrackerHost {
  return {
    firecrackerBin: path.join(BIN, 'firecracker'),
    jailerBin: jailed ? path.join(BIN, 'jailer') : undefined,
    version: 'v1.16.1',
    cgroupVersion: hostCgroupVersion(),
  };
}

export interface EmulatorWorkspace {
  /** The file's own directory (0711: the emulator runs as a jail's user and reaches the jails through it). */
  readonly workDir: string;
  /** Where the emulator records (FAKE_FIRECRACKER_RECORD_DIR). */
  readonly recordDir: string;
  /** What the emulator recorded for a session's VMMs, in order. */
  records(sessionId: string): Promise<Recorded[]>;
}

/**
 * A work directory made at once (a file's own `before` hooks may use it: root hooks do not
 * wait for one another in their order), with the emulator pointed at its records, and
 * removed after the file's tests.
 */
export function emulatorWorkspace(prefix: string, envSet: readonly string[] = []): EmulatorWorkspace {
  const workDir = mkdtempSync(path.join(os.tmpdir(), prefix));
  const recordDir = path.join(workDir, 'records');
  mkdirSync(recordDir);
  chmodSync(workDir, 0o711);
  chmodSync(recordDir, 0o777);
  process.env.FAKE_FIRECRACKER_RECORD_DIR = recordDir;
  after(async () => {
    for (const name of ['FAKE_FIRECRACKER_RECORD_DIR', ...envSet]) delete process.env[name];
    await rm(workDir, { recursive: true, force: true });
    await removeEmptyPrefixCgroups();
  });
  return {
    workDir,
    recordDir,
    async records(sessionId: string): Promise<Recorded[]> {
      const text = await readFile(path.join(recordDir, `${TEST_PREFIX}${sessionId}.jsonl`), 'utf8').catch(() => '');
      return text
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Recorded);
    },
  };
}

/**
 * What the session layer makes before a runtime starts: the session's keys and config dir, its
 * address, the VM's own uid/gid (jailed: it owns the TAP) and the netns with that TAP; and the
 * spec the runtime starts it from (512 MiB, logs in the work dir).
 */
export async function sessionBase(
  runtime: FirecrackerRuntime,
  workDir: string,
  pool: AddressPool,
  cleanup: CleanupStack,
  image: GuestImage,
  screen: { width: number; height: number },
) {
  const sessionId = newSessionId();
  const sessionDir = path.join(workDir, sessionId);
  const configDir = path.join(sessionDir, 'config');
  await writeSessionKeys(sessionDir, configDir, generateSessionKeys(sessionId));
  const lease = pool.lease();
  await cleanup.push('lease', () => pool.release(lease.index));
  const vmUser = await runtime.leaseVmUser?.(cleanup);
  const network = await createSandboxNetwork(new ResourceNames(TEST_PREFIX), sessionId, lease, cleanup, 'tap', vmUser);
  const spec = {
    sessionId,
    image,
    sessionDir,
    configDir,
    screen,
    hostname: `sbx-${sessionId}`,
    network,
    memoryMiB: 512,
    pidsLimit: 256,
    logsDir: path.join(workDir, 'logs'),
    vmUser,
  };
  return { sessionId, sessionDir, configDir, lease, spec };
}

/** The guest image the tests boot (the README's test command builds it before them). */
export async function builtImage(): Promise<GuestImage> {
  const found = await findImage(process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images');
  assert.ok(found, 'the guest image must be built first (scripts/test.sh does it)');
  return found;
}
