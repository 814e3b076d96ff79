import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import { GUEST_SSH_PORT } from '../../src/guest/contract.js';
import { MINIMAL_RECIPE } from '../../src/guest/image/recipe.js';
import { run } from '../../src/util/exec.js';

/**
 * sandbox-init's vsock listener (docs/transport.md): what it runs, cut out of the script and run
 * in sh with socat stubbed. This host is a VM without vsock_loopback (no AF_VSOCK connection to
 * ourselves can be made here), so the listener is checked as the command it starts: stock sshd
 * in inetd mode behind socat on vsock port GUEST_SSH_PORT, the port the host's hybrid-vsock
 * dialer asks Firecracker to CONNECT to; nothing when the config says tcp or there is no
 * /dev/vsock.
 */
const ROOT = path.resolve(import.meta.dirname, '../..');

async function listenerPart(): Promise<string> {
  const script = await readFile(path.join(ROOT, 'src/guest/files/sandbox-init'), 'utf8');
  const start = script.indexOf('VSOCK_PORT=');
  const end = script.indexOf('\n}\n', script.indexOf('start_vsock_listener() {'));
  assert.ok(start > 0 && end > start, 'sandbox-init has its vsock listener');
  return script.slice(start, end + 3);
}

/** Runs start_vsock_listener with `transport`; socat records its argv, one per line. */
async function listenerRuns(transport: string, vsockDevice: string): Promise<{ argv: string[]; log: string }> {
  const program = [
    'log() { echo "log: $*"; }',
    'is_running() { return 1; }',
    'socat() { for a in "$@"; do echo "argv: $a"; done; }',
    `SANDBOX_TRANSPORT=${transport}`,
    'SSHD_LOG=/run/sandbox/sshd.log',
    'LOG_DIR=/dev/null/none',
    (await listenerPart()).replaceAll('/dev/vsock', vsockDevice).replaceAll('>>"$LOG_DIR/vsock.log" 2>&1', ''),
    'start_vsock_listener',
    'wait',
  ].join('\n');
  const res = await run(['sh', '-c', program], { allowFailure: true });
  const lines = res.stdout.split('\n');
  return { argv: lines.filter((l) => l.startsWith('argv: ')).map((l) => l.slice(6)), log: lines.filter((l) => l.startsWith('log: ')).join('\n') };
}

describe("the guest's vsock listener (sandbox-init)", () => {
  it('with transport vsock and /dev/vsock: socat on vsock port 22 running stock sshd -i per connection', async () => {
    const { argv, log } = await listenerRuns('vsock', '/dev/null'); // a character device, as /dev/vsock is
    assert.deepEqual(argv, [`VSOCK-LISTEN:${GUEST_SSH_PORT},fork,reuseaddr`, 'EXEC:/usr/sbin/sshd -i -E /run/sandbox/sshd.log -f /etc/ssh/sshd_config']);
    assert.match(log, /sshd on vsock port 22/);
  });

  it('nothing with transport tcp; an error line without /dev/vsock', async () => {
    assert.deepEqual((await listenerRuns('tcp', '/dev/null')).argv, []);
    const missing = await listenerRuns('vsock', '/nonexistent/vsock');
    assert.deepEqual(missing.argv, []);
    assert.match(missing.log, /error: transport vsock, but this VM has no /);
  });

  it('the images carry socat, and the initrd the virtio vsock transport', () => {
    assert.ok(MINIMAL_RECIPE.packages.includes('socat'));
    assert.ok(MINIMAL_RECIPE.vm.initrdModules.includes('vmw_vsock_virtio_transport'));
  });
});
