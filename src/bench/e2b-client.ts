/**
 * The e2b bench's client (`npm run bench -- e2b`), a process of its own as a user's program
 * is: the SDK's CPU does not compete with the orchestrator's event loop, and it reaches the
 * orchestrator over loopback. The bench (e2b-desktop.ts) drives it by lines on stdin and reads
 * one JSON line per answer on stdout:
 *
 *   {"url", "apiKey"}\n -> {"sandboxId"}  an @e2b/desktop sandbox made (its X server and XFCE started)
 *   <phase> <i>\n       -> {"ms"}         one call of that phase (round i), timed
 *   end\n               -> the sandbox killed, the process exits
 *
 * One call per line, so that the bench can interleave the layers' calls and the guest's own
 * runs of the same commands: under a host's changing load each pair sees the same load.
 */
import { createInterface } from 'node:readline';
import { createClient, type Interceptor } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { Sandbox as Desktop } from '@e2b/desktop';
import { SandboxClient } from '../client/index.js';
import { Process } from '../e2b/gen/process/process_pb.js';
import { CLICK_COMMAND, clickPoint, READ_FILE, type ClientPhase, type ClientSettings } from './e2b-phases.js';

async function main(): Promise<void> {
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const first = await lines.next();
  if (first.done === true) return;
  const { url, apiKey, floorUrl } = JSON.parse(first.value) as ClientSettings;
  const desktop = await Desktop.create({ apiUrl: url, sandboxUrl: url, apiKey, timeoutMs: 600_000 });
  const say = (answer: unknown) => process.stdout.write(`${JSON.stringify(answer)}\n`);
  try {
    const ours = await new SandboxClient({ baseUrl: url, apiKey }).connect(desktop.sandboxId);
    // A lean Connect client (connect-node, JSON as the SDK's): the SDK's Start without the SDK around it.
    const token = Reflect.get(desktop, 'envdAccessToken') as string;
    const headers: Interceptor = (next) => (req) => {
      req.header.set('e2b-sandbox-id', desktop.sandboxId);
      req.header.set('x-access-token', token);
      return next(req);
    };
    const rpc = createClient(Process, createConnectTransport({ baseUrl: url, httpVersion: '1.1', interceptors: [headers] }));
    const argv = ['/bin/bash', '-l', '-c', CLICK_COMMAND];
    // The same SDK class, its envd calls sent to the floor's server instead (E2B's sandbox-URL override).
    const floor = Reflect.construct(Desktop, [
      { apiKey, apiUrl: url, sandboxUrl: floorUrl, sandboxId: desktop.sandboxId, envdAccessToken: token, envdVersion: '0.5.7' },
    ]) as Desktop;
    const phases: Record<ClientPhase, (i: number) => Promise<unknown>> = {
      'sdk.screenshot': () => desktop.screenshot(),
      'sdk.leftClick': (i) => desktop.leftClick(...clickPoint(i)),
      'sdk.run': () => desktop.commands.run(CLICK_COMMAND),
      'sdk.read': () => desktop.files.read(READ_FILE, { format: 'bytes' }),
      'connect.run': async (): Promise<void> => {
        // Read to the stream's end, as the SDK does.
        let ended = false;
        for await (const res of rpc.start({ process: { cmd: argv[0] as string, args: argv.slice(1), envs: {} } })) ended ||= res.event?.event.case === 'end';
        if (!ended) throw new Error('the Start stream ended without an end event');
      },
      'processes.run': async (): Promise<void> => {
        for await (const event of ours.processes.run({ argv })) if (event.type === 'exit') return;
        throw new Error('the process stream ended without an exit');
      },
      'api.screenshot': () => ours.screenshot(),
      'api.leftClick': (i) => ours.leftClick(...clickPoint(i)),
      'floor.screenshot': () => floor.screenshot(),
      'floor.leftClick': (i) => floor.leftClick(...clickPoint(i)),
      'floor.run': () => floor.commands.run(CLICK_COMMAND),
    };
    say({ sandboxId: desktop.sandboxId });
    for (let next = await lines.next(); next.done !== true && next.value !== 'end'; next = await lines.next()) {
      const [name = '', round = '0'] = next.value.split(' ');
      const phase = phases[name as ClientPhase] as ((i: number) => Promise<unknown>) | undefined;
      if (!phase) throw new Error(`no phase ${name}`);
      const start = performance.now();
      await phase(Number(round));
      say({ ms: performance.now() - start });
    }
  } finally {
    await desktop.kill().catch(() => undefined);
  }
}

main().catch((err: unknown) => {
  console.error(`e2b bench client: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exit(1);
});
