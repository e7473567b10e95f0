import { OneAtATime } from '../../src/infra/one-at-a-time';

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('one at a time per key', () => {
  test('work of one key runs in arrival order, never two at once; other keys do not wait', async () => {
    const queue = new OneAtATime();
    const log: string[] = [];
    let running = 0;
    let most = 0;
    const work = (name: string) => async (): Promise<string> => {
      running += 1;
      most = Math.max(most, running);
      log.push(`start ${name}`);
      await tick();
      await tick();
      log.push(`end ${name}`);
      running -= 1;
      return name;
    };
    const other = queue.run('b', async () => {
      log.push('b');
      return 'b';
    });
    const results = await Promise.all([queue.run('a', work('1')), queue.run('a', work('2')), queue.run('a', work('3')), other]);
    expect(results).toEqual(['1', '2', '3', 'b']);
    expect(most).toBe(1);
    expect(log.filter((line) => line !== 'b')).toEqual(['start 1', 'end 1', 'start 2', 'end 2', 'start 3', 'end 3']);
    // 'b' did not wait for a's queue.
    expect(log.indexOf('b')).toBeLessThan(log.indexOf('end 1'));
  });

  test("a failure is its caller's alone: the next one still runs, and the key is let go once idle", async () => {
    const queue = new OneAtATime();
    const failed = queue.run('a', () => Promise.reject(new Error('no')));
    const next = queue.run('a', () => Promise.resolve('yes'));
    await expect(failed).rejects.toThrow('no');
    await expect(next).resolves.toBe('yes');
    await tick();
    expect(queue.size).toBe(0);
  });

  test('work that throws before its first await rejects its own promise', async () => {
    const queue = new OneAtATime();
    await expect(
      queue.run('a', () => {
        throw new Error('at once');
      }),
    ).rejects.toThrow('at once');
    await expect(queue.run('a', () => Promise.resolve(1))).resolves.toBe(1);
  });
});
