import pino, { type Logger } from 'pino';

export type { Logger };

/**
 * Structured JSON logs. Anything that could carry a credential is redacted by path, so
 * a careless `log.info({req})` still cannot leak a token or a password.
 */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'home-hub-cloud' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: [
          'password',
          '*.password',
          'token',
          '*.token',
          'refreshToken',
          '*.refreshToken',
          'accessToken',
          '*.accessToken',
          'headers.authorization',
          'headers["x-internal-api-key"]',
          '*.headers.authorization',
          '*.headers["x-internal-api-key"]',
          'apiKey',
          'secret',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
