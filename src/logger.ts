import { pino, type Logger } from 'pino';

/** Structured logs (JSON lines); SBX_LOG_LEVEL sets the level. Keys and typed text are never logged. */
export function createLogger(): Logger {
  return pino({
    level: process.env.SBX_LOG_LEVEL || 'info',
    redact: { paths: ['*.privateKey', '*.clientPrivateKey', '*.hostPrivateKey', 'req.headers.authorization'], remove: true },
  });
}
