import { type MessageAck, type MessageToDevice, type TunnelError } from '../../src/tunnel/events';
import { exceedsSize } from '../../src/tunnel/schemas';
import { mulberry32 } from '../support/prng';
import { request } from '../support/tunnel';
import { tunnelFixture } from '../support/tunnel-fixture';

/**
 * The 64 KiB limit of a tunnel message counts the UTF-8 bytes of its JSON (decisions §5),
 * not characters: a CJK character is three bytes, an escaped quote two, a control character six.
 */

const LIMIT = 64 * 1024;
const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value), 'utf8');

describe('exceedsSize', () => {
  test('counts UTF-8 bytes of strings and of keys', () => {
    const cjk = '漢'.repeat(30_000); // 30,000 characters, 90,000 bytes
    expect(exceedsSize({ payload: cjk })).toBe(true);
    expect(exceedsSize({ [cjk]: 1 })).toBe(true);
    expect(exceedsSize({ ['漢'.repeat(40_000)]: null })).toBe(true);
    // Emoji: two UTF-16 units, four bytes.
    expect(exceedsSize(['😀'.repeat(17_000)])).toBe(true);
    expect(exceedsSize(['😀'.repeat(16_000)])).toBe(false);
  });

  test('counts escapes as JSON writes them, and numbers by their digits', () => {
    expect(exceedsSize('"'.repeat(40_000))).toBe(true);
    expect(exceedsSize('\u0001'.repeat(20_000))).toBe(true);
    expect(exceedsSize(Array.from({ length: 5_000 }, () => -1.234567890123457e-300))).toBe(true);
  });

  test('agrees with the serialized size exactly, at the limit, on random JSON values', () => {
    const random = mulberry32(25_012);
    const alphabet = ['a', 'é', '漢', '😀', '"', '\\', '\n', '\u0000', '\ud800'];
    const text = (n: number): string => Array.from({ length: n }, () => alphabet[Math.floor(random() * alphabet.length)]).join('');
    const value = (depth: number): unknown => {
      const pick = random();
      if (depth > 3 || pick < 0.3) return text(Math.floor(random() * 400));
      if (pick < 0.4) return random() < 0.5 ? Math.floor(random() * 1e9) : random() * -1e-30;
      if (pick < 0.45) return random() < 0.5 ? null : random() < 0.5;
      if (pick < 0.7) return Array.from({ length: Math.floor(random() * 12) }, () => value(depth + 1));
      return Object.fromEntries(Array.from({ length: Math.floor(random() * 12) }, () => [text(1 + Math.floor(random() * 40)), value(depth + 1)]));
    };
    for (let i = 0; i < 300; i++) {
      const v = value(0);
      const bytes = jsonBytes(v);
      expect([bytes, exceedsSize(v, bytes)]).toEqual([bytes, false]);
      expect([bytes, exceedsSize(v, bytes - 1)]).toEqual([bytes, true]);
    }
  });
});

describe('over the tunnel', () => {
  const { on, household } = tunnelFixture();

  test('a message whose key is 40,000 CJK characters (120,000 bytes) is refused; one just under 64 KiB in bytes goes through', async () => {
    const { owner, hub, token } = await household();
    const device = await on(token);
    const app = await on(owner.accessToken);

    const tooBig = { deviceUuid: hub.uuid, type: 'x', payload: { ['漢'.repeat(40_000)]: 1 } };
    expect(await request<MessageAck>(app, 'tunnel:message', tooBig)).toEqual({ success: false, delivered: false });
    expect(await app.next<TunnelError>('tunnel:error')).toEqual({ code: 'INVALID_PAYLOAD', message: 'Message is larger than 64 KiB' });

    const fromDevice = await request<MessageAck>(device, 'tunnel:message', { type: 'x', payload: '漢'.repeat(22_000) });
    expect(fromDevice).toEqual({ success: false, delivered: false });
    expect(await device.next<TunnelError>('tunnel:error')).toEqual({ code: 'INVALID_PAYLOAD', message: 'Message is larger than 64 KiB' });

    // 21,000 CJK characters: 63,000 bytes, under the limit with the envelope.
    const fits = { deviceUuid: hub.uuid, type: 'x', payload: '漢'.repeat(21_000) };
    expect(jsonBytes(fits)).toBeLessThan(LIMIT);
    expect(await request<MessageAck>(app, 'tunnel:message', fits)).toEqual({ success: true, delivered: true });
    expect((await device.next<MessageToDevice>('tunnel:message')).payload).toBe('漢'.repeat(21_000));
  });
});
