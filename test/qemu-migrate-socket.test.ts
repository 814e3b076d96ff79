import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { listenFor } from '../src/runtimes/qemu/disk-pause.js';

/**
 * Red team, pause to disk (src/runtimes/qemu/disk-pause.ts): the socket a VM's QEMU sends its
 * state to is reachable by that VM's own uid only. Another VM's QEMU (a guest that broke out
 * into its VMM runs as its own uid) cannot connect to it to feed another session a state of its
 * making, nor list the directory. Runs as root (it changes owners).
 */
const run = promisify(execFile);
const OWNER = { uid: 64_001, gid: 64_001 };
const OTHER = { uid: 64_002, gid: 64_002 };

/** Connects to `socket` as `who`; the connect's errno name, or 'connected'. */
async function connectAs(who: { uid: number; gid: number }, socket: string): Promise<string> {
  const script = `const s = require('net').connect(process.argv[1]); s.on('connect', () => { console.log('connected'); s.destroy(); }); s.on('error', (e) => console.log(e.code));`;
  const { stdout } = await run('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', process.execPath, '-e', script, socket]);
  return stdout.trim();
}

describe('red team: the migration socket of a pause to disk', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'sbx-migrate-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("is the VM's own user's alone: another VM's uid cannot connect or look in", async () => {
    const dir = path.join(root, 'migrate', 'abcdefghij');
    const listener = await listenFor(dir, OWNER);
    try {
      // The root above it must be traversable for the owner (mkdtemp made it 0700): as the runtime's /run dir is.
      await run('chmod', ['0711', root]);
      assert.equal((await stat(path.dirname(dir))).mode & 0o777, 0o711, 'the parent: traverse only');
      assert.equal((await stat(dir)).mode & 0o777, 0o700);
      assert.equal((await stat(dir)).uid, OWNER.uid);
      const started = performance.now();
      assert.equal(await connectAs(OTHER, listener.socketPath), 'EACCES', "another VM's uid is refused");
      const refusedMs = performance.now() - started;
      const { stdout } = await run('setpriv', [`--reuid=${OTHER.uid}`, `--regid=${OTHER.gid}`, '--clear-groups', 'ls', path.dirname(dir)]).catch(
        (err: { stdout?: string; code?: number }) => ({ stdout: `failed ${err.code}` }),
      );
      assert.match(stdout, /failed/, 'nor can it list the sockets of other sessions');
      assert.equal(await connectAs(OWNER, listener.socketPath), 'connected', 'the control: its own QEMU gets in');
      console.log(`another VM's uid refused (EACCES) in ${refusedMs.toFixed(0)} ms (a setpriv + node start); host cost: nothing buffered`);
    } finally {
      listener.close();
    }
  });
});
