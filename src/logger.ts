import { pino, type DestinationStream, type Logger } from 'pino';
import { envString, type Env } from './util/env.js';

/** SBX_LOG_LEVEL (default info): pino's levels, trace to fatal, or silent. */
export function logLevelFromEnv(env: Env): string {
  return envString(env, 'SBX_LOG_LEVEL', 'info');
}

/**
 * Structured logs (JSON lines) at `level` (SBX_LOG_LEVEL, given by the entry points). Keys
 * and typed text are never logged: nothing logs them on purpose (request logs carry lengths
 * and key ids only, see api/logging/request-log.ts), and these paths are removed should one
 * slip into an object.
 */
export function createLogger(destination?: DestinationStream, level = 'info'): Logger {
  const options = {
    level,
    redact: {
      paths: ['*.privateKey', '*.clientPrivateKey', '*.hostPrivateKey', 'req.headers.authorization', 'headers.authorization', 'apiKey', '*.apiKey'],
      remove: true,
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
