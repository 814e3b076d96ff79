#!/usr/bin/env node
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { AUTH_SETTINGS, type AuthSetting } from '../api/auth/auth-mode.js';
import { DEFAULT_ORCHESTRATOR_URL, SandboxClient, SandboxError } from '../client/index.js';
import { defaultConfig } from '../config.js';
import { buildImage } from '../guest/image/builder.js';
import { BUILT_IN_TEMPLATE_NAMES, builtInRecipe } from '../guest/image/templates.js';
import { createLogger } from '../logger.js';
import { startOrchestrator } from '../orchestrator.js';
import { RUNTIME_NAMES, type RuntimeChoice } from '../runtimes/settings.js';
import { imagesDirFromEnv, warmPoolSize } from '../sessions/settings.js';
import { desktopCommand } from './desktop.js';
import { keysCommand } from './keys.js';
import { runStdioServer } from '../mcp/stdio.js';
import { templateCommand } from './templates.js';
import { trajectoryCommand } from './trajectory.js';
import { recordingCommand } from './recording.js';
import { runCommand } from './run.js';

/** The file extension of an image by its first bytes (the session's default format may be any). */
function extensionOf(image: Buffer): string {
  if (image.subarray(0, 3).equals(Buffer.from([0xff, 0xd8, 0xff]))) return 'jpg';
  if (image.toString('latin1', 0, 4) === 'RIFF' && image.toString('latin1', 8, 12) === 'WEBP') return 'webp';
  return 'png';
}

function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('must be an integer');
  return n;
}

// The entry point: the only place (with src/bench/main.ts) that reads the process's environment.
const defaults = defaultConfig(process.env);
const program = new Command('sbx')
  .description('Disposable Linux desktops for computer-use agents')
  .addOption(new Option('--url <url>', 'orchestrator URL (client commands)').env('SBX_URL').default(DEFAULT_ORCHESTRATOR_URL))
  .addOption(new Option('--api-key <key>', 'API key (client commands)').env('SBX_API_KEY'));

program
  .command('serve')
  .description('run the orchestrator (as root): HTTP API, sandboxes, metrics')
  .addOption(new Option('--host <host>', 'address to listen on').env('SBX_HOST').default(defaults.host))
  .addOption(new Option('--port <port>', 'port to listen on').env('SBX_PORT').default(defaults.port).argParser(integer))
  .addOption(new Option('--state-dir <dir>', 'keys, per-session files and the store').env('SBX_STATE_DIR').default(defaults.stateDir))
  .addOption(new Option('--runtime <name>', 'sandbox runtime').env('SBX_RUNTIME').choices([...RUNTIME_NAMES]).default(defaults.runtime))
  .addOption(
    new Option('--warm-pool <n>', `booted sandboxes of the default template kept ready for creates of ${defaults.warmPoolScreen.width}x${defaults.warmPoolScreen.height} (SBX_WARM_POOL_SCREEN; per template: SBX_WARM_POOL=name:count,...)`)
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
  .addOption(new Option('--no-auth', 'serve without API keys (loopback only; same as --auth off)'))
  .option('--demo', 'create one demo sandbox once started, and save its screenshot')
  .action(async (opts: { host: string; port: number; stateDir: string; runtime: RuntimeChoice; warmPool: number; auth: AuthSetting | false; demo?: boolean }) => {
    const log = createLogger(undefined, defaults.logLevel);
    const config = {
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
    let orchestrator: Awaited<ReturnType<typeof startOrchestrator>>;
    try {
      // The loop's API key comes from the environment only (never a flag: it would show in ps).
      orchestrator = await startOrchestrator(config, log, { anthropic: { apiKey: process.env.ANTHROPIC_API_KEY, baseURL: process.env.ANTHROPIC_BASE_URL } });
    } catch (err) {
      console.error(`sbx: ${err instanceof Error ? err.message : String(err)}`);
      process.exit(1);
    }
    const url = `http://${config.host}:${config.port}`;
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      log.info({ signal }, 'shutting down: destroying every session');
      orchestrator.close().then(
        () => process.exit(0),
        (err: unknown) => {
          log.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    console.error(`sbx: orchestrator listening on ${url} (runtime ${orchestrator.manager.runtimeName}, state in ${config.stateDir})`);
    // The demo sandbox is made without a key (tenant "local"): only a keyless server can
    // hand it to curl. With keys, `sbx create` with one makes a sandbox of the key's tenant.
    const keyless = !orchestrator.keyRequirement.keysRequired();
    if (opts.demo && !keyless) {
      console.error('sbx: API keys exist, so every request needs one: no demo sandbox; try `SBX_API_KEY=<key> node dist/cli/main.js create`');
    } else if (opts.demo) {
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
  });

const image = program.command('image').description('the guest images of the built-in templates');
image
  .command('build')
  .description('build the built-in templates\' guest images with debootstrap (each cached by a hash of its recipe)')
  .addOption(
    new Option('--template <name>', 'build only this built-in template (default: all of them, minimal first)').choices(BUILT_IN_TEMPLATE_NAMES),
  )
  .option('--force', 'rebuild even if the image is cached')
  .addOption(new Option('--images-dir <dir>').env('SBX_IMAGES_DIR').default(defaults.imagesDir))
  .action(async (opts: { template?: string; force?: boolean; imagesDir: string }) => {
    // One at a time: two debootstraps at once would only compete for the same disk and mirror.
    for (const name of opts.template ? [opts.template] : BUILT_IN_TEMPLATE_NAMES) {
      console.error(`sbx: template ${name}`);
      const built = await buildImage({
        imagesDir: opts.imagesDir,
        recipe: builtInRecipe(name),
        force: opts.force,
        onProgress: (line) => console.error(`[${name}] ${line}`),
      });
      console.log(`${name} ${built.dir}`);
    }
  });

function client(): SandboxClient {
  const { url, apiKey } = program.opts<{ url: string; apiKey?: string }>();
  return new SandboxClient({ baseUrl: url, apiKey });
}

program.addCommand(keysCommand(defaults.stateDir));
program.addCommand(desktopCommand(client));
program.addCommand(templateCommand(defaults.imagesDir));
program.addCommand(trajectoryCommand(client));
program.addCommand(recordingCommand(client));
program.addCommand(runCommand(client));

interface CreateFlags {
  width?: number;
  height?: number;
  timeout?: number;
  maxLifetime?: number;
  egress?: boolean;
  screenshotFormat?: 'png' | 'jpeg' | 'webp';
  screenshotQuality?: number;
  template?: string;
  record?: boolean;
}

program
  .command('create')
  .description('create a sandbox and print its description')
  .option('-W, --width <px>', 'screen width', integer)
  .option('-H, --height <px>', 'screen height', integer)
  .option('-t, --timeout <seconds>', 'idle timeout', integer)
  .option('--max-lifetime <seconds>', 'maximum lifetime (at most the server maximum)', integer)
  .option('--egress', 'let the sandbox reach the internet (NAT); off by default')
  .option('--template <name>', 'the template to boot (`sbx template ls`; default: the server\'s)')
  .option('--record', 'record the screen to a video from the start (`sbx recording <id>` downloads it)')
  .addOption(new Option('--screenshot-format <format>', "the session's default screenshot format (png)").choices(['png', 'jpeg', 'webp']))
  .option('--screenshot-quality <1-100>', 'its quality, for jpeg and webp (default jpeg 80, webp 100: lossless)', integer)
  .action(async (opts: CreateFlags) => {
    const screenshot = opts.screenshotFormat || opts.screenshotQuality !== undefined ? { format: opts.screenshotFormat, quality: opts.screenshotQuality } : undefined;
    const sandbox = await client().create({
      ...(opts.template ? { template: opts.template } : {}),
      width: opts.width,
      height: opts.height,
      timeoutSeconds: opts.timeout,
      maxLifetimeSeconds: opts.maxLifetime,
      ...(opts.egress ? { network: { egress: true } } : {}),
      ...(screenshot ? { screenshot } : {}),
      ...(opts.record ? { record: true } : {}),
    });
    console.log(JSON.stringify(sandbox.info, null, 2));
  });

program
  .command('mcp')
  .description('an MCP server on stdin/stdout (for Claude Desktop, Claude Code, IDEs) using the orchestrator at --url with --api-key')
  .action(async () => {
    await runStdioServer(client());
    // stdin's end closes the server; the client's keep-alive sockets must not keep the process.
    process.exit(0);
  });

program
  .command('keepalive <id>')
  .description("reset a session's idle timer (and optionally set its idle timeout)")
  .option('-t, --timeout <seconds>', 'new idle timeout', integer)
  .action(async (id: string, opts: { timeout?: number }) => {
    const info = await client().keepalive(id, opts.timeout === undefined ? {} : { timeoutSeconds: opts.timeout });
    console.log(`${info.id} expires ${info.expiresAt} (lifetime ends ${info.lifetimeEndsAt})`);
  });

program
  .command('ls')
  .description('list live sessions')
  .action(async () => {
    const sessions = await client().list();
    for (const s of sessions) console.log(`${s.id}  ${s.state.padEnd(10)} ${s.runtime.padEnd(10)} ${s.template.padEnd(12)} ${s.display.width}x${s.display.height}  expires ${s.expiresAt}`);
    if (sessions.length === 0) console.error('no sessions');
  });

program
  .command('screenshot <id>')
  .description("save an image of the sandbox screen (PNG unless --format or the session's default says otherwise)")
  .option('-o, --output <file>', 'where to write it (default screenshot.<format>)')
  .addOption(new Option('-f, --format <format>', 'image format').choices(['png', 'jpeg', 'webp']))
  .option('-q, --quality <1-100>', 'jpeg and webp quality (webp at 100 is lossless)', integer)
  .option('--scaled', 'as the model sees the screen (scaled down), not at its real size')
  .action(async (id: string, opts: { output?: string; format?: 'png' | 'jpeg' | 'webp'; quality?: number; scaled?: boolean }) => {
    const image = await client().screenshot(id, { scaled: opts.scaled, format: opts.format, quality: opts.quality });
    const output = opts.output ?? `screenshot.${extensionOf(image)}`;
    await writeFile(output, image);
    console.log(path.resolve(output));
  });

program
  .command('act <id> <json>')
  .description('perform a computer-use action, e.g. \'{"action":"left_click","coordinate":[10,20]}\'')
  .action(async (id: string, json: string) => {
    const result = await client().action(id, JSON.parse(json) as { action: string });
    if (result.image) result.image.data = `<${result.image.data.length} base64 characters>`;
    console.log(JSON.stringify(result, null, 2));
  });

program
  .command('view <id>')
  .description('print a live-view URL of a sandbox for a browser (view only unless --control)')
  .option('--control', 'the URL may also type and click (and take over from the agent)')
  .option('--ttl <seconds>', 'how long the URL works (default 3600)', integer)
  .action(async (id: string, opts: { control?: boolean; ttl?: number }) => {
    const sandbox = await client().connect(id);
    const view = await sandbox.liveView({ mode: opts.control ? 'control' : 'view', ttlSeconds: opts.ttl });
    console.log(view.url);
  });

program
  .command('rm <id>')
  .description('destroy a sandbox (idempotent)')
  .action(async (id: string) => {
    const info = await client().destroy(id);
    console.log(`${info.id} ${info.state}`);
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof SandboxError) console.error(`sbx: ${err.message} (${err.code})`);
  else if (err instanceof Error && /ECONNREFUSED|fetch failed/.test(err.message + String(err.cause))) {
    console.error(`sbx: cannot reach the orchestrator at ${program.opts<{ url: string }>().url}: start it with \`sbx serve\` or set --url`);
  } else console.error(`sbx: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
