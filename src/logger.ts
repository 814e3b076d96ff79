import { pino, type DestinationStream, type Logger } from 'pino';

/**
 * Structured logs (JSON lines); SBX_LOG_LEVEL sets the level. Keys and typed text are never
 * logged: nothing logs them on purpose (request logs carry lengths and key ids only, see
 * api/logging/request-log.ts), and these paths are removed should one slip into an object.
 */
export function createLogger(destination?: DestinationStream, level = process.env.SBX_LOG_LEVEL || 'info'): Logger {
  const options = {
    level,
    redact: {
      paths: ['*.privateKey', '*.clientPrivateKey', '*.hostPrivateKey', 'req.headers.authorization', 'headers.authorization', 'apiKey', '*.apiKey'],
      remove: true,
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
