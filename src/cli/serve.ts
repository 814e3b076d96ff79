import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { AUTH_SETTINGS, type AuthSetting } from '../api/auth/auth-mode.js';
import type { OrchestratorConfig } from '../config.js';
import { createLogger } from '../logger.js';
import { startOrchestrator, type Orchestrator } from '../orchestrator.js';
import { RUNTIMES } from '../runtimes/registered.js';
import type { RuntimeChoice } from '../runtimes/settings.js';
import { imagesDirFromEnv, warmPoolSize } from '../sessions/settings.js';

export function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('must be an integer');
  return n;
}

/** What `sbx serve` and `sbx node` are told on their command line. */
export interface OrchestratorFlags {
  host: string;
  port: number;
  stateDir: string;
  runtime: RuntimeChoice;
  warmPool: number;
  auth: AuthSetting | false;
}

/** The options `sbx serve` and `sbx node` share. */
export function addOrchestratorOptions(command: Command, defaults: OrchestratorConfig): Command {
  return command
    .addOption(new Option('--host <host>', 'address to listen on').env('SBX_HOST').default(defaults.host))
    .addOption(new Option('--port <port>', 'port to listen on').env('SBX_PORT').default(defaults.port).argParser(integer))
    .addOption(new Option('--state-dir <dir>', 'keys, per-session files and the store').env('SBX_STATE_DIR').default(defaults.stateDir))
    .addOption(
      new Option('--runtime <name>', 'sandbox runtime')
        .env('SBX_RUNTIME')
        .choices([...RUNTIMES.choices])
        .default(defaults.runtime),
    )
    .addOption(
      new Option(
        '--warm-pool <n>',
        `booted sandboxes of the default template kept ready for creates of ${defaults.warmPoolScreen.width}x${defaults.warmPoolScreen.height} (SBX_WARM_POOL_SCREEN; per template: SBX_WARM_POOL=name:count,...)`,
      )
        .env('SBX_WARM_POOL_SIZE')
        .default(defaults.warmPoolSize)
        .argParser((v) => {
          try {
            return warmPoolSize(integer(v));
          } catch (err) {
            throw new InvalidArgumentError((err as Error).message);
          }
        }),
    )
    .addOption(
      new Option('--auth <mode>', 'API keys: auto (required once a key has ever existed; always off loopback), on, off (loopback only)')
        .env('SBX_AUTH')
        .choices([...AUTH_SETTINGS])
        .default(defaults.auth),
    )
    .addOption(new Option('--no-auth', 'serve without API keys (loopback only; same as --auth off)'));
}

/** The configuration the flags describe (flags win over the environment's defaults). */
export function configOf(opts: OrchestratorFlags, defaults: OrchestratorConfig): OrchestratorConfig {
  return {
    ...defaults,
    // commander turns --no-auth into auth: false.
    auth: opts.auth === false ? ('off' as const) : opts.auth,
    host: opts.host,
    port: opts.port,
    stateDir: opts.stateDir,
    imagesDir: imagesDirFromEnv(process.env, opts.stateDir),
    runtime: opts.runtime,
    warmPoolSize: opts.warmPool,
  };
}

/** Stops the orchestrator (and what runs beside it) on SIGTERM/SIGINT, then exits. */
export function stopOnSignals(log: ReturnType<typeof createLogger>, close: () => Promise<void>, what = 'shutting down: destroying every session'): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, what);
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

/** `sbx serve`: one host, its own gateway, its SQLite store. */
export function serveCommand(defaults: OrchestratorConfig): Command {
  return addOrchestratorOptions(new Command('serve').description('run the orchestrator (as root): HTTP API, sandboxes, metrics'), defaults)
    .option('--demo', 'create one demo sandbox once started, and save its screenshot')
    .action(async (opts: OrchestratorFlags & { demo?: boolean }) => {
      const log = createLogger(undefined, defaults.logLevel);
      const config = configOf(opts, defaults);
      let orchestrator: Orchestrator;
      try {
        // The loop's API key comes from the environment only (never a flag: it would show in ps).
        orchestrator = await startOrchestrator(config, log, { anthropic: { apiKey: process.env.ANTHROPIC_API_KEY, baseURL: process.env.ANTHROPIC_BASE_URL } });
      } catch (err) {
        console.error(`sbx: ${err instanceof Error ? err.message : String(err)}`);
        process.exit(1);
      }
      const url = `http://${config.host}:${config.port}`;
      stopOnSignals(log, () => orchestrator.close());
      console.error(`sbx: orchestrator listening on ${url} (runtime ${orchestrator.manager.runtimeName}, state in ${config.stateDir})`);
      if (opts.demo) await demo(orchestrator, url);
    });
}

/** The demo sandbox of `serve --demo`, with the commands to try on it. */
async function demo(orchestrator: Orchestrator, url: string): Promise<void> {
  // The demo sandbox is made without a key (tenant "local"): only a keyless server can
  // hand it to curl. With keys, `sbx create` with one makes a sandbox of the key's tenant.
  const keyless = !orchestrator.keyRequirement.keysRequired();
  if (!keyless) {
    console.error('sbx: API keys exist, so every request needs one: no demo sandbox; try `SBX_API_KEY=<key> node dist/cli/main.js create`');
  } else {
    // Recorded from the start: afterwards the user replays it step by step and as video.
    const session = await orchestrator.manager.create({ metadata: { demo: true }, record: true });
    const png = await orchestrator.manager.screenshot(session.id);
    const file = path.resolve(`demo-${session.id}.png`);
    await writeFile(file, png.data);
    // The live view is opened by a browser on this machine, so its URL names the listening address.
    const live = await orchestrator.views.create(session.id, session.tenant, 'view', undefined);
    console.error(
      [
        `sbx: demo sandbox ${session.id} is ready (${session.display.width}x${session.display.height}, runtime ${session.runtime})`,
        `sbx: screenshot saved to ${file}`,
        `sbx: watch it live in a browser (view only, 1 hour): ${url}/v1/views/${live.token}`,
        `sbx: try:`,
        `  curl -s -X POST ${url}/v1/sessions/${session.id}/actions -H 'content-type: application/json' -d '{"action":"left_click","coordinate":[200,150]}'`,
        `  curl -s -X POST ${url}/v1/sessions/${session.id}/actions -H 'content-type: application/json' -d '{"action":"type","text":"hello"}'`,
        `  curl -s -o shot.png ${url}/v1/sessions/${session.id}/screenshot`,
        `  curl -s -X DELETE ${url}/v1/sessions/${session.id}`,
        `sbx: afterwards, replay it step by step: ${url}/v1/sessions/${session.id}/trajectory/view`,
        `sbx:   and as video (recorded from the start): ${url}/v1/sessions/${session.id}/recording`,
        `sbx: Ctrl-C stops the orchestrator and destroys its sandboxes.`,
      ].join('\n'),
    );
  }
}
