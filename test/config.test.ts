import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultConfig, describeConfig, type OrchestratorConfig } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { containerSettingsFromEnv } from '../src/runtimes/container/settings.js';
import { firecrackerSettingsFromEnv } from '../src/runtimes/firecracker/settings.js';
import { qemuSettingsFromEnv } from '../src/runtimes/qemu/settings.js';
import { defaultMaxSessions } from '../src/sessions/capacity.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const MiB = 1024 * 1024;

describe('the configuration an environment describes', () => {
  it('has the documented default for every setting', () => {
    const config = defaultConfig({});
    const expected: OrchestratorConfig = {
      runtime: 'auto',
      runtimes: { container: containerSettingsFromEnv({}), qemu: qemuSettingsFromEnv({}), firecracker: firecrackerSettingsFromEnv({}) },
      host: '127.0.0.1',
      port: 8080,
      auth: 'auto',
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 120_000,
      sendTimeoutMs: 30_000,
      tenantMaxConcurrentRequests: 64,
      tenantRequestsPerSecond: 50,
      tenantRequestBurst: 200,
      tenantRequestLimitOverrides: new Map(),
      tenantMaxStreams: 8,
      maxFileBytes: 100 * MiB,
      bashTimeoutSeconds: 120,
      bashOutput: { bytesPerSecond: 8 * MiB, burstBytes: 64 * MiB, maxUnreadBytes: 256 * 1024 },
      stateDir: '/var/lib/sandboxes',
      imagesDir: '/var/lib/sandboxes/images',
      template: 'desktop',
      display: 99,
      defaultTimeoutSeconds: 300,
      maxLifetimeSeconds: 3600,
      bootTimeoutMs: 30_000,
      sshReconnectGiveUpMs: 30_000,
      memoryLimitMiB: 1024,
      pidsLimit: 512,
      settleMaxMs: 2_000,
      settleIntervalMs: 100,
      maxSessions: defaultMaxSessions(1024),
      maxSessionsPerTenant: 10,
      memoryReserveMiB: 512,
      diskReserveMiB: 2048,
      warmPoolSize: 0,
      warmPool: new Map(),
      warmPoolScreen: { width: 1024, height: 768 },
      warmPoolMax: 0,
      consoleLog: { maxBytes: 4 * MiB, keptMaxCount: 100, keptMaxBytes: 64 * MiB },
      pause: { onIdle: 'destroy', autoResume: true, pausedRetentionSeconds: 604800 },
      tenantSessionLimits: new Map(),
      volumes: { minMiB: 16, maxMiB: 16384, quotaMiB: 65536, quotaCount: 32 },
      snapshots: { quotaMiB: 20480, quotaCount: 16 },
      subnet: '10.241.0.0/16',
      networkPolicyCheckMs: 3_000,
      resourcePrefix: 'sbx-',
      logLevel: 'info',
      trajectory: { retentionSeconds: 7 * 24 * 3600, maxSessionBytes: 64 * MiB, maxTotalBytes: 1024 * MiB, maxSteps: 5000 },
      recording: { dir: undefined, fps: 5, maxBytes: 256 * MiB, maxSeconds: 3600, keepSeconds: 7 * 24 * 3600, totalMaxBytes: 4096 * MiB },
      liveViews: { maxViewersPerSession: 8, maxViewersPerTenant: 16 },
      ports: { maxChannelsPerSession: 32, idleTimeoutMs: 300_000, keepAliveChannelsPerPort: 2 },
      e2b: {
        templates: new Map([
          ['base', 'minimal'],
          ['desktop', 'xfce'],
        ]),
      },
      runs: {
        models: ['claude-sonnet-4-6', 'claude-opus-4-6', 'claude-opus-4-5', 'claude-haiku-4-5'],
        tenantModels: new Map(),
        limits: { maxConcurrentRuns: 4, tokensPerDay: 50_000_000, secondsPerDay: 86_400 },
        tenantLimits: new Map(),
      },
    };
    assert.deepEqual(config, expected);
    assert.equal(config.runtimes.firecracker.snapshotBaseMemoryMiB, 1024);
  });

  it('reads each variable, and one variable means one thing everywhere', () => {
    const config = defaultConfig({
      SBX_STATE_DIR: '/srv/sbx',
      SBX_DISPLAY: '7',
      SBX_MEMORY_MIB: '2048',
      SBX_DISK_MIB: '512',
      RUNC_BIN: '/opt/runc',
      SBX_BASH_TIMEOUT_SECONDS: '1.5',
      SBX_BASH_OUTPUT_BYTES_PER_SECOND: '1048576',
      SBX_BASH_UNREAD_OUTPUT_BYTES: '65536',
      SBX_MAX_FILE_BYTES: '1000',
      SBX_WARM_POOL_SCREEN: '1280x800',
      SBX_FC_TEMPLATE_SCREEN: '1280x800',
      SBX_TENANT_REQUEST_LIMITS: 'ci=256/500/1000',
      SBX_LOG_LEVEL: 'debug',
      SBX_TEMPLATE: 'minimal',
      SBX_RUN_MODELS: 'claude-haiku-4-5',
      SBX_TENANT_RUN_MODELS: 'ci=claude-opus-4-6|claude-sonnet-4-6',
      SBX_TENANT_RUN_LIMITS: 'ci=8/200000000/172800',
      SBX_TENANT_SESSION_LIMITS: 'ci=maxLifetimeSeconds:604800/onIdle:pause',
    });
    assert.deepEqual(Object.fromEntries(config.tenantSessionLimits), { ci: { maxLifetimeSeconds: 604_800, onIdle: 'pause' } });
    assert.deepEqual(config.runs.models, ['claude-haiku-4-5']);
    assert.deepEqual(Object.fromEntries(config.runs.tenantModels), { ci: ['claude-opus-4-6', 'claude-sonnet-4-6'] });
    assert.deepEqual(Object.fromEntries(config.runs.tenantLimits), { ci: { maxConcurrentRuns: 8, tokensPerDay: 200_000_000, secondsPerDay: 172_800 } });
    assert.equal(config.imagesDir, '/srv/sbx/images', 'the images live under the state dir unless SBX_IMAGES_DIR says otherwise');
    assert.equal(config.display, 7);
    // SBX_MEMORY_MIB sizes the sessions, their capacity and the Firecracker template alike.
    assert.equal(config.memoryLimitMiB, 2048);
    assert.equal(config.runtimes.firecracker.snapshotBaseMemoryMiB, 2048);
    assert.equal(config.maxSessions, defaultMaxSessions(2048));
    assert.equal(config.runtimes.container.diskMiB, 512);
    assert.equal(config.runtimes.container.runcBin, '/opt/runc');
    assert.equal(config.bashTimeoutSeconds, 1.5);
    assert.deepEqual(config.bashOutput, { bytesPerSecond: 1024 * 1024, burstBytes: 64 * 1024 * 1024, maxUnreadBytes: 65536 });
    assert.equal(config.maxFileBytes, 1000);
    assert.deepEqual(config.warmPoolScreen, { width: 1280, height: 800 });
    assert.deepEqual(config.runtimes.firecracker.snapshotBaseScreen, config.warmPoolScreen);
    assert.deepEqual(Object.fromEntries(config.tenantRequestLimitOverrides), { ci: { maxConcurrent: 256, perSecond: 500, burst: 1000 } });
    assert.equal(config.logLevel, 'debug');
    assert.equal(config.template, 'minimal');
  });

  it('refuses a bad value naming its variable', () => {
    const bad: Array<[string, string, RegExp]> = [
      ['SBX_PORT', 'http', /SBX_PORT must be an integer, got "http"/],
      ['SBX_RUNTIME', 'docker', /SBX_RUNTIME must be one of auto, container, qemu, firecracker, got "docker"/],
      ['SBX_AUTH', 'maybe', /SBX_AUTH must be one of auto, on, off, got "maybe"/],
      ['SBX_DISPLAY', '1.5', /SBX_DISPLAY must be an integer/],
      ['SBX_TIMEOUT_SECONDS', '0', /SBX_TIMEOUT_SECONDS must be at least 1, got 0/],
      ['SBX_MAX_SESSIONS', '0', /SBX_MAX_SESSIONS must be at least 1/],
      ['SBX_WARM_POOL_SIZE', '65', /warm pool size must be between 0 and 64, got 65/],
      ['SBX_CONSOLE_LOG_MAX_BYTES', '4095', /SBX_CONSOLE_LOG_MAX_BYTES must be at least 4096/],
      ['SBX_NETWORK_POLICY_CHECK_MS', '0', /SBX_NETWORK_POLICY_CHECK_MS must be at least 1/],
      ['SBX_TENANT_REQUEST_BURST', '0', /SBX_TENANT_REQUEST_BURST must be at least 1/],
      ['SBX_TENANT_REQUEST_LIMITS', 'ci=1', /SBX_TENANT_REQUEST_LIMITS/],
      [
        'SBX_TENANT_SESSION_LIMITS',
        'ci=maxLifetimeSeconds:0',
        /SBX_TENANT_SESSION_LIMITS: tenant "ci": maxLifetimeSeconds must be a whole number of seconds from 10/,
      ],
      ['SBX_MAX_FILE_BYTES', '1e3', /SBX_MAX_FILE_BYTES must be a positive whole number of bytes, got "1e3"/],
      ['SBX_BASH_TIMEOUT_SECONDS', '-1', /SBX_BASH_TIMEOUT_SECONDS must be a positive number of seconds/],
      ['SBX_BASH_OUTPUT_BYTES_PER_SECOND', '100', /SBX_BASH_OUTPUT_BYTES_PER_SECOND must be at least 65536, got 100/],
      ['SBX_BASH_UNREAD_OUTPUT_BYTES', 'lots', /SBX_BASH_UNREAD_OUTPUT_BYTES must be an integer/],
      ['SBX_DISK_MIB', '10', /SBX_DISK_MIB must be between 64 and 1048576, got 10/],
      ['SBX_CPUS', 'lots', /SBX_CPUS/],
      ['SBX_QEMU_ACCEL', 'hvf', /SBX_QEMU_ACCEL/],
      ['SBX_FC_JAILER', 'maybe', /SBX_FC_JAILER must be auto, on or off/],
      ['SBX_FC_SNAPSHOTS', 'yes', /SBX_FC_SNAPSHOTS must be on or off, got "yes"/],
      ['SBX_VM_UID_COUNT', '0', /SBX_VM_UID_COUNT/],
      ['SBX_TEMPLATE', 'gnome', /SBX_TEMPLATE must be one of minimal, desktop, xfce, got "gnome"/],
      ['SBX_FC_UID', '1000', /SBX_FC_UID is no longer used/],
      ['SBX_MAX_VIEWERS_PER_SESSION', '0', /SBX_MAX_VIEWERS_PER_SESSION must be at least 1/],
      ['SBX_MAX_VIEWERS_PER_TENANT', '0', /SBX_MAX_VIEWERS_PER_TENANT must be at least 1/],
      ['SBX_TENANT_MAX_STREAMS', '0', /SBX_TENANT_MAX_STREAMS must be at least 1/],
      ['SBX_TENANT_MAX_RUNS', '0', /SBX_TENANT_MAX_RUNS must be at least 1/],
      ['SBX_TENANT_RUN_TOKENS_PER_DAY', '0', /SBX_TENANT_RUN_TOKENS_PER_DAY must be at least 1/],
      ['SBX_TENANT_RUN_SECONDS_PER_DAY', 'x', /SBX_TENANT_RUN_SECONDS_PER_DAY must be an integer/],
      ['SBX_TENANT_RUN_LIMITS', 'ci=1/2', /SBX_TENANT_RUN_LIMITS: "ci=1\/2" is not tenant=runs\/tokensPerDay\/secondsPerDay/],
      ['SBX_RUN_MODELS', 'claude sonnet', /SBX_RUN_MODELS: "claude sonnet" is not a model id/],
      ['SBX_TENANT_RUN_MODELS', 'ci', /SBX_TENANT_RUN_MODELS: "ci" is not tenant=model\|model/],
    ];
    for (const [name, value, message] of bad) assert.throws(() => defaultConfig({ [name]: value }), message, `${name}=${value}`);
  });

  it('has one parser of screen sizes: the warm pool and the Firecracker template refuse the same sizes in the same words', () => {
    for (const text of ['1280', '1280x', '100x100', '5000x800', '1280X800', ' 1280x800']) {
      for (const name of ['SBX_WARM_POOL_SCREEN', 'SBX_FC_TEMPLATE_SCREEN']) {
        assert.throws(
          () => defaultConfig({ [name]: text }),
          new RegExp(`^Error: ${name} must look like 1024x768 \\(each side 320 to 3840\\), got "${text}"$`),
          `${name}=${text}`,
        );
      }
    }
  });

  it('is described for the log with every setting, as plain JSON', () => {
    const config = defaultConfig({ SBX_TENANT_REQUEST_LIMITS: 'ci=256/500/1000' });
    const described = describeConfig(config);
    assert.deepEqual(Object.keys(described).sort(), Object.keys(config).sort());
    assert.deepEqual(described.tenantRequestLimitOverrides, { ci: { maxConcurrent: 256, perSecond: 500, burst: 1000 } });
    assert.deepEqual(JSON.parse(JSON.stringify(described)), described);
    assert.deepEqual((described.runtimes as { container: unknown }).container, config.runtimes.container);
  });
});

describe('the orchestrator logs its effective configuration at start', () => {
  const lines: string[] = [];
  let orch: TestOrchestrator;

  before(async () => {
    // The production logger (as `sbx serve` makes it), into memory.
    const log = createLogger({ write: (line: string) => void lines.push(line) }, 'info');
    orch = await startTestOrchestrator(
      { maxSessionsPerTenant: 3, tenantRequestLimitOverrides: new Map([['ci', { maxConcurrent: 2, perSecond: 3, burst: 4 }]]) },
      false,
      undefined,
      log,
    );
  });

  after(async () => {
    await orch?.stop();
  });

  it('in one info line with every setting, as it is after the overrides', () => {
    const logged = lines
      .map((line) => JSON.parse(line) as { level: number; msg: string; config?: Record<string, unknown> })
      .filter((line) => line.msg === 'configuration');
    assert.equal(logged.length, 1, 'one configuration line');
    const [line] = logged;
    assert.equal(line!.level, 30, 'at info');
    assert.deepEqual(line!.config, JSON.parse(JSON.stringify(describeConfig(orch.config))));
    assert.equal(line!.config!.maxSessionsPerTenant, 3);
    assert.equal(line!.config!.resourcePrefix, orch.config.resourcePrefix);
    assert.deepEqual(line!.config!.tenantRequestLimitOverrides, { ci: { maxConcurrent: 2, perSecond: 3, burst: 4 } });
    assert.deepEqual(Object.keys(line!.config!).sort(), Object.keys(defaultConfig({})).sort());
  });
});
