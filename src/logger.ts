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
          // At the top, one level down (`{user: {...}}`) and two (`{req: {body: {...}}}`).
          ...['password', 'token', 'refreshToken', 'accessToken', 'resetToken', 'resetLink', 'link', 'apiKey', 'secret'].flatMap((key) => [
            key,
            `*.${key}`,
            `*.*.${key}`,
          ]),
          'headers.authorization',
          'headers["x-internal-api-key"]',
          '*.headers.authorization',
          '*.headers["x-internal-api-key"]',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
