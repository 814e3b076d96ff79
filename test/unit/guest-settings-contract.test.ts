import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CONFIG_FILES, CONFIG_MOUNT, GUEST_INIT, renderSettings, sandboxSettings, type GuestSettings } from '../../src/guest/contract.js';
import { initScript } from '../../src/guest/image/initrd-init.js';
import { GUEST_ROOT_DEVICE, guestKernelCmdline } from '../../src/guest/kernel-cmdline.js';
import { DEFAULT_BOOT_ARGS } from '../../src/runtimes/firecracker/boot/kernel-args.js';
import { run } from '../../src/util/exec.js';

/**
 * The settings sandbox-init reads are exactly the ones the host writes. The host writes
 * sandbox.env through renderSettings from a GuestSettings (boot.ts, the Firecracker template):
 * the compiler holds every writer to that interface, and `written` below is one of them. This
 * test holds sandbox-init to it, by running the guest's own parser (read_settings, cut out of
 * the script) in a shell on what renderSettings wrote, and by comparing the names and paths
 * both sides use. No root, no sandbox.
 */
const ROOT = path.resolve(import.meta.dirname, '../..');

/** Every setting, with values unlike sandbox-init's defaults so that a dropped key shows. */
const written: GuestSettings = {
  SANDBOX_ID: 'abc123def4',
  SANDBOX_HOSTNAME: 'sbx-abc123def4',
  SANDBOX_DISPLAY: 42,
  SANDBOX_WIDTH: 1280,
  SANDBOX_HEIGHT: 800,
  SANDBOX_DEPTH: 16,
  SANDBOX_NET_CONFIGURE: 1,
  SANDBOX_ADDRESS: '10.241.3.6/30',
  SANDBOX_GATEWAY: '10.241.3.5',
  SANDBOX_TRANSPORT: 'vsock',
};

/** The lines of sandbox-init from `# Defaults, used when` to the end of read_settings(). */
function settingsPart(script: string): string {
  const start = script.indexOf('# Defaults, used when sandbox.env lacks a key');
  const fn = script.indexOf('read_settings() {', start);
  const end = script.indexOf('\n}\n', fn);
  assert.ok(start >= 0 && fn > start && end > fn, 'sandbox-init has its defaults and read_settings()');
  return script.slice(start, end + 3);
}

/** The value of `NAME=value` at the start of a line of the script. */
function assignment(script: string, name: string): string {
  const value = new RegExp(`^${name}=(.*)$`, 'm').exec(script)?.[1];
  assert.ok(value !== undefined, `sandbox-init sets ${name}`);
  return value;
}

describe('guest settings: what sandbox-init reads is what the host writes', () => {
  let script: string;
  let scratch: string;

  before(async () => {
    script = await readFile(path.join(ROOT, 'src/guest/files/sandbox-init'), 'utf8');
    scratch = await mkdtemp(path.join(os.tmpdir(), 'sbx-contract-'));
  });
  after(async () => {
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  /**
   * Runs sandbox-init's defaults and read_settings() in sh on `settingsFile`; returns the
   * variables it ended with and what it logged.
   */
  async function guestReads(settingsFile: string): Promise<{ values: Record<string, string>; log: string[] }> {
    const names = Object.keys(written);
    const program = [
      'log() { echo "log: $*"; }',
      `SETTINGS_FILE='${settingsFile}'`,
      settingsPart(script),
      'read_settings',
      ...names.map((name) => `echo "value: ${name}=$${name}"`),
    ].join('\n');
    const res = await run(['sh', '-c', program], { allowFailure: true });
    assert.equal(res.exitCode, 0, res.stderr);
    const lines = res.stdout.split('\n');
    const values = Object.fromEntries(lines.filter((l) => l.startsWith('value: ')).map((l) => l.slice(7).split(/=(.*)/s).slice(0, 2) as [string, string]));
    return { values, log: lines.filter((l) => l.startsWith('log: ')) };
  }

  it('reads back every setting renderSettings writes, with its value, and warns of none', async () => {
    const file = path.join(scratch, CONFIG_FILES.settings);
    await writeFile(file, renderSettings(written));
    const { values, log } = await guestReads(file);
    assert.deepEqual(values, Object.fromEntries(Object.entries(written).map(([k, v]) => [k, String(v)])));
    assert.deepEqual(
      log.filter((l) => /warning|error/.test(l)),
      [],
      'no setting ignored or replaced',
    );
  });

  it('knows no setting the host does not write, and has a default for each it knows', () => {
    const part = settingsPart(script);
    const read = [...part.matchAll(/^\t\t(SANDBOX_[A-Z_]+)\) \1=\$value ;;$/gm)].map((m) => m[1]).sort();
    const defaults = [...part.matchAll(/^(SANDBOX_[A-Z_]+)=/gm)].map((m) => m[1]).sort();
    const keys = Object.keys(written).sort();
    assert.deepEqual(read, keys, 'the keys read_settings() takes');
    assert.deepEqual(defaults, keys, 'the keys sandbox-init has defaults for');
  });

  it('accepts exactly the characters renderSettings lets through', async () => {
    // Every printable ASCII character, in a value of its own: the host refuses it (throws)
    // or writes it; the guest must keep what the host writes, and nothing else matters.
    const lines: string[] = [];
    for (let code = 0x21; code < 0x7f; code++) {
      const value = `a${String.fromCharCode(code)}b`;
      let hostWrites: boolean;
      try {
        renderSettings({ ...written, SANDBOX_HOSTNAME: value });
        hostWrites = true;
      } catch {
        hostWrites = false;
      }
      const file = path.join(scratch, `chars-${code}.env`);
      await writeFile(file, `SANDBOX_HOSTNAME=${value}\n`);
      const { values } = await guestReads(file);
      if (hostWrites !== (values.SANDBOX_HOSTNAME === value))
        lines.push(`${JSON.stringify(value)}: host ${hostWrites ? 'writes' : 'refuses'}, guest ${values.SANDBOX_HOSTNAME === value ? 'keeps' : 'drops'}`);
    }
    assert.deepEqual(lines, []);
  });

  it('a VM without a NIC, over vsock (issue 23): told vsock and no address, it waits for no eth0', async () => {
    const file = path.join(scratch, 'vsock.env');
    const vm = { id: 'abc123def4', hostname: 'sbx-abc123def4', display: 99, screen: { width: 1024, height: 768 }, guestConfiguresNetwork: true };
    await writeFile(file, renderSettings(sandboxSettings({ ...vm, lease: undefined, transport: 'vsock' })));
    const { values } = await guestReads(file);
    assert.equal(values.SANDBOX_TRANSPORT, 'vsock', 'its sandbox-init starts the vsock listener');
    assert.equal(values.SANDBOX_ADDRESS, '');
    assert.equal(values.SANDBOX_NET_CONFIGURE, '0', 'no eth0 to bring up');
    // sandbox-init's configure_network on these settings, with `ip` stood in for: no wait for an eth0 that never comes.
    const fn = (name: string) => {
      const start = script.indexOf(`${name}() {`);
      return script.slice(start, script.indexOf('\n}\n', start) + 3);
    };
    const program = [
      'log() { echo "log: $*"; }',
      'ip() { echo "ip $*"; }',
      `SETTINGS_FILE='${file}'`,
      settingsPart(script),
      fn('wait_for_link'),
      fn('configure_network'),
      'read_settings',
      'configure_network',
    ];
    const started = Date.now();
    const res = await run(['sh', '-c', program.join('\n')]);
    assert.ok(Date.now() - started < 2_000, 'no 5-second wait for eth0');
    assert.doesNotMatch(res.stdout, /eth0/, res.stdout);
    // With a lease, the same VM configures its eth0.
    const tcp = sandboxSettings({ ...vm, lease: { guest: '10.241.0.2', prefixLength: 30, gateway: '10.241.0.1' } });
    assert.deepEqual([tcp.SANDBOX_TRANSPORT, tcp.SANDBOX_NET_CONFIGURE, tcp.SANDBOX_ADDRESS], ['tcp', 1, '10.241.0.2/30']);
  });

  it('looks for the config where the host puts it, under the names the host uses', async () => {
    assert.equal(assignment(script, 'CONFIG_DIR'), CONFIG_MOUNT);
    assert.equal(assignment(script, 'SETTINGS_FILE'), `$CONFIG_DIR/${CONFIG_FILES.settings}`);
    assert.equal(assignment(script, 'HOST_KEY'), `$CONFIG_DIR/${CONFIG_FILES.hostKey}`);
    // The VM runtimes attach the root disk first and the config drive second.
    assert.equal(GUEST_ROOT_DEVICE, '/dev/vda');
    assert.equal(assignment(script, 'CONFIG_DEVICE'), '/dev/vdb');
    const sshd = await readFile(path.join(ROOT, 'src/guest/files/sshd_config'), 'utf8');
    assert.match(sshd, new RegExp(`^HostKey ${CONFIG_MOUNT}/${CONFIG_FILES.hostKey}$`, 'm'));
    assert.match(sshd, new RegExp(`^AuthorizedKeysFile ${CONFIG_MOUNT}/${CONFIG_FILES.authorizedKeys}$`, 'm'));
  });

  it("sees itself booted as a VM's init on the command lines the VM runtimes give the kernel", async () => {
    // sandbox-init reboots (ends the VM) only when /proc/cmdline has this word; the initrd
    // hands over to the init= it finds there.
    assert.match(script, new RegExp(`\\*" init=${GUEST_INIT.replace(/\//g, '\\/')} "\\*\\)`));
    for (const cmdline of [guestKernelCmdline(), guestKernelCmdline({ quiet: false }), DEFAULT_BOOT_ARGS]) {
      assert.ok(` ${cmdline} `.includes(` init=${GUEST_INIT} `), cmdline);
    }
    // The initrd's /init, run on the qemu command line, picks the same root and init.
    const init = initScript({ modules: [], defaultRoot: GUEST_ROOT_DEVICE, defaultInit: '/sbin/other', rootWaitSeconds: 1 });
    const parse = init.slice(init.indexOf('root='), init.indexOf('\ndone\n', init.indexOf('for arg in')) + 6);
    const cmdlineFile = path.join(scratch, 'cmdline');
    await writeFile(cmdlineFile, `${guestKernelCmdline()}\n`);
    const res = await run(['sh', '-c', `${parse.replaceAll('/proc/cmdline', cmdlineFile)}\necho "$root $init $mode"`]);
    assert.equal(res.stdout.trim(), `${GUEST_ROOT_DEVICE} ${GUEST_INIT} rw`);
  });
});
