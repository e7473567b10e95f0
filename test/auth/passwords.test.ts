import { createPasswordHasher, createSemaphore } from '../../src/auth/passwords';

describe('password hashing', () => {
  const hasher = createPasswordHasher({ concurrency: 2 });

  test('argon2id at m=19456 KiB, t=2, p=1, salted', async () => {
    const [a, b] = await Promise.all([hasher.hash('correct horse battery'), hasher.hash('correct horse battery')]);
    const params = /^\$argon2id\$v=19\$([^$]+)\$/.exec(a)?.[1]?.split(',').sort();
    expect(params).toEqual(['m=19456', 'p=1', 't=2']);
    expect(a).not.toBe(b);
    expect(await hasher.verify(a, 'correct horse battery')).toBe(true);
    expect(await hasher.verify(a, 'correct horse battery!')).toBe(false);
    expect(await hasher.verify('not-a-hash', 'anything')).toBe(false);
  });

  test('hashes stored by the earlier binding (argon2 0.45, node-argon2) still verify, whatever their parameters', async () => {
    // Written by node-argon2, which orders the parameters m, p, t; the second at other parameters.
    const stored = [
      '$argon2id$v=19$m=19456,p=1,t=2$fRmQ8oSWgcK9lBHxbynYkA$D1Yjxo9CALrqoxtLUEav8zm4EIICzt6OvLKuNlo6rsc',
      '$argon2id$v=19$m=4096,p=1,t=3$hBe612jdmISXj6CsyTGtyg$ymb1dXERVXSuguMx24XFGJB9T27QcbQ9gMrK9Xv5Lok',
    ];
    for (const hash of stored) {
      expect(await hasher.verify(hash, 'correct horse battery')).toBe(true);
      expect(await hasher.verify(hash, 'correct horse battery!')).toBe(false);
    }
  });

  test('verifying nothing answers false after the cost of a real verification', async () => {
    const hash = await hasher.hash('some password');
    await hasher.verifyNothing('warm-up');
    const time = async (run: () => Promise<boolean>): Promise<number> => {
      const started = performance.now();
      expect(await run()).toBe(false);
      return performance.now() - started;
    };
    const nothing: number[] = [];
    const wrong: number[] = [];
    for (let i = 0; i < 5; i++) {
      nothing.push(await time(() => hasher.verifyNothing('guess')));
      wrong.push(await time(() => hasher.verify(hash, 'guess')));
    }
    const median = (v: number[]) => [...v].sort((x, y) => x - y)[2] as number;
    expect(median(nothing) / median(wrong)).toBeGreaterThan(0.5);
    expect(median(nothing) / median(wrong)).toBeLessThan(2);
  });

  test('runs at most `concurrency` at once; the others wait, counted', async () => {
    const counted = createPasswordHasher({ concurrency: 2 });
    // The dummy hash is built at creation: let it finish first.
    await counted.verifyNothing('warm-up');
    const all = Promise.all(Array.from({ length: 5 }, (_, i) => counted.hash(`password-${i}`)));
    expect(counted.stats()).toEqual({ running: 2, waiting: 3 });
    await all;
    expect(counted.stats()).toEqual({ running: 0, waiting: 0 });
  });
});

describe('semaphore', () => {
  test('first come, first served, and a failed task frees its slot', async () => {
    const semaphore = createSemaphore(1);
    const order: string[] = [];
    const gate = { open: () => undefined as void };
    const first = semaphore.run(() => new Promise<void>((resolve) => (gate.open = resolve)).then(() => order.push('first')));
    const failing = semaphore.run(async () => {
      order.push('failing');
      throw new Error('boom');
    });
    const third = semaphore.run(async () => order.push('third'));
    expect(semaphore.stats()).toEqual({ running: 1, waiting: 2 });
    gate.open();
    await first;
    await expect(failing).rejects.toThrow('boom');
    await third;
    expect(order).toEqual(['first', 'failing', 'third']);
    expect(semaphore.stats()).toEqual({ running: 0, waiting: 0 });
  });

  test('needs a slot', () => {
    expect(() => createSemaphore(0)).toThrow(RangeError);
  });
});
