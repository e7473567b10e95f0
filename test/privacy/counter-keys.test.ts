import { withKeyedCounters } from '../../src/privacy/counter-keys';
import { recordingLimiter } from '../support/recording-limiter';

/** HMACs computed in every module of this test. */
const mockHmacs = { count: 0 };

jest.mock('node:crypto', () => {
  const actual = jest.requireActual<typeof import('node:crypto')>('node:crypto');
  return {
    ...actual,
    createHmac: (...args: Parameters<typeof actual.createHmac>) => {
      mockHmacs.count++;
      return actual.createHmac(...args);
    },
  };
});

test('counters by client IP are named by a keyed hash, the same for each request of an address, computed once per address', async () => {
  const { limiter, names } = recordingLimiter();
  const keyed = withKeyedCounters(limiter, Buffer.alloc(32, 7));
  mockHmacs.count = 0;
  for (let i = 0; i < 5; i++) await keyed.consume('login', 'ip:203.0.113.9');
  await keyed.consume('login', 'ip:198.51.100.4');
  await keyed.refund?.('login', 'ip:203.0.113.9');
  await keyed.consume('general', 'user:42');
  expect(names.every((n) => !n.includes('203.0.113.9') && !n.includes('198.51.100.4'))).toBe(true);
  expect(new Set(names.slice(0, 5)).size).toBe(1);
  expect(names[0]).toMatch(/^iph:[0-9a-f]{32}$/);
  expect(names[5]).not.toBe(names[0]);
  expect(names[6]).toBe(`refund ${names[0]}`);
  expect(names[7]).toBe('user:42');
  // Another wrapper with the same key names an address the same way.
  const other = recordingLimiter();
  await withKeyedCounters(other.limiter, Buffer.alloc(32, 7)).consume('login', 'ip:203.0.113.9');
  expect(other.names[0]).toBe(names[0]);
  expect(mockHmacs.count).toBe(3);
});
