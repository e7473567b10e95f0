import { Writable } from 'node:stream';
import { createLogger } from '../src/logger';

/** Redaction by path: whatever a log call is handed, credentials come out as `[redacted]`. */
function logged(fields: Record<string, unknown>): string {
  let out = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      out += chunk.toString();
      done();
    },
  });
  createLogger('info', sink).info(fields, 'line');
  return out;
}

describe('log redaction', () => {
  test('a whole request object handed to the logger keeps no credential', () => {
    const line = logged({
      req: {
        headers: { authorization: 'Bearer secret-access-token', 'x-internal-api-key': 'secret-crm-key' },
        body: { email: 'someone@example.com', password: 'secret-password', token: 'secret-reset-token', refreshToken: 'secret-refresh' },
      },
    });
    expect(line).not.toMatch(/secret-/);
    expect(JSON.parse(line)).toMatchObject({
      req: { headers: { authorization: '[redacted]', 'x-internal-api-key': '[redacted]' }, body: { email: 'someone@example.com', password: '[redacted]' } },
    });
  });

  test('keys at the top and one level down', () => {
    const line = logged({ password: 'secret-1', apiKey: 'secret-2', user: { apiKey: 'secret-3', accessToken: 'secret-4' }, link: 'https://app/reset?token=secret-5', mail: { resetLink: 'secret-6' } });
    expect(line).not.toMatch(/secret-/);
    expect(JSON.parse(line)).toMatchObject({ password: '[redacted]', user: { apiKey: '[redacted]' } });
  });
});
