import { connectionId } from '../../src/tunnel/connection-ids';
import { TunnelEngine } from '../../src/tunnel/engine';

test('ids are 20 characters of base64url, unique over many pools, and not in sequence', () => {
  const ids = Array.from({ length: 5000 }, () => connectionId());
  expect(ids.every((id) => /^[A-Za-z0-9_-]{20}$/.test(id))).toBe(true);
  expect(new Set(ids).size).toBe(ids.length);
  // Random bytes: every character of the alphabet turns up at every place, none dominates.
  for (const place of [0, 10, 19]) {
    const counts = new Map<string, number>();
    for (const id of ids) counts.set(id[place] ?? '', (counts.get(id[place] ?? '') ?? 0) + 1);
    expect(counts.size).toBe(64);
    expect(Math.max(...counts.values())).toBeLessThan(5000 / 64 * 2);
  }
});

test('the tunnel engine gives its connections these ids, engine.io\'s long polling included', () => {
  const engine = new TunnelEngine({ pingInterval: 25_000, pingTimeout: 20_000 });
  try {
    const id = engine.generateId();
    expect(id).toMatch(/^[A-Za-z0-9_-]{20}$/);
    expect(engine.generateId()).not.toBe(id);
  } finally {
    engine.close();
  }
});
