import { StoreUnreachableError, untilAnswered } from '../../src/runtime/store-probes';

const NAME = { store: 'Thing', variable: 'THING_URL' };

describe('a start waits for a store to answer, then names it', () => {
  test('a store that refuses at first and then answers is waited for', async () => {
    let tries = 0;
    const answer = await untilAnswered(
      NAME,
      async () => {
        tries += 1;
        if (tries < 3) throw new Error('connect ECONNREFUSED 127.0.0.1:1');
        return 'pong';
      },
      5_000,
      10,
    );
    expect(answer).toBe('pong');
    expect(tries).toBe(3);
  });

  test('a store that keeps refusing: the error names the variable, the store and the last reason', async () => {
    const error = await untilAnswered(NAME, () => Promise.reject(new Error('14 UNAVAILABLE: No connection established\nmore')), 200, 20).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnreachableError);
    expect((error as Error).message).toBe('THING_URL: Thing did not answer within 0.2 s (14 UNAVAILABLE: No connection established)');
  });

  test('a store that never answers (a try that hangs) is given up at the deadline', async () => {
    const started = Date.now();
    const error = await untilAnswered(NAME, () => new Promise<never>(() => undefined), 300, 20).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnreachableError);
    expect((error as Error).message).toMatch(/^THING_URL: Thing did not answer within 0.3 s \(no answer\)$/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
  });
});
