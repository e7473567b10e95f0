/**
 * Not a defect: a check that held. The counter names of client addresses are kept (the last
 * 10,000): a kept name is always the one a process that never saw the address computes, for
 * spellings that differ only by case, IPv6 forms, IPv4-mapped addresses and forwarded-for
 * lists, also once more than 10,000 other addresses pushed them out and they come back. (How
 * an address is normalized before it becomes `ip:<address>` is not changed by the cache.)
 */
import { withKeyedCounters } from '../../src/privacy/counter-keys';
import { recordingLimiter } from '../support/recording-limiter';

const KEY = Buffer.alloc(32, 9);
const VARIANTS = [
  'ip:2001:db8::1',
  'ip:2001:DB8::1',
  'ip:2001:0db8:0000:0000:0000:0000:0000:0001',
  'ip:::ffff:203.0.113.9',
  'ip:203.0.113.9',
  'ip:203.0.113.9, 10.0.0.1',
  'ip: 203.0.113.9',
  'ip:fe80::1%eth0',
  'ip:__proto__',
  'ip:',
];

/** The name a wrapper that never saw the counter gives it. */
async function freshName(counter: string): Promise<string> {
  const { limiter, names } = recordingLimiter();
  await withKeyedCounters(limiter, KEY).consume('login', counter);
  return names[0] as string;
}

test('kept counter names are the names a fresh process computes, before and after eviction', async () => {
  const { limiter, names } = recordingLimiter();
  const keyed = withKeyedCounters(limiter, KEY);
  const expected = await Promise.all(VARIANTS.map(freshName));
  expect(new Set(expected).size).toBe(VARIANTS.length);
  for (const v of VARIANTS) await keyed.consume('login', v);
  for (const v of VARIANTS) await keyed.consume('login', v);
  for (let i = 0; i < 10_050; i++) await keyed.consume('login', `ip:198.51.${i >> 8}.${i & 255}`);
  for (const v of VARIANTS) await keyed.consume('login', v);
  const got = [...names.slice(0, VARIANTS.length * 2), ...names.slice(-VARIANTS.length)];
  expect(got).toEqual([...expected, ...expected, ...expected]);
});
