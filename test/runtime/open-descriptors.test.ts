import { closeSync, openSync, readdirSync } from 'node:fs';
import { openDescriptors } from '../../src/runtime/descriptor-headroom';
import { createMetrics } from '../../src/metrics';

/**
 * The descriptors a process has open, as the head-room guard and `process_open_fds` count them:
 * the figure a listing of `/proc/self/fd` gives, without listing it at each scrape (19 ms at
 * 19,000 descriptors) where the kernel says the count as the directory's size.
 */

const listed = (): number => readdirSync('/proc/self/fd').length;

test('openDescriptors counts what /proc/self/fd lists, and follows opens and closes', () => {
  // A listing holds the directory open while it reads: one more than the count.
  expect(Math.abs((openDescriptors() ?? -1) - listed())).toBeLessThanOrEqual(1);
  const before = openDescriptors() ?? -1;
  const opened = Array.from({ length: 50 }, () => openSync('/dev/null', 'r'));
  try {
    expect(openDescriptors()).toBe(before + 50);
  } finally {
    for (const fd of opened) closeSync(fd);
  }
  expect(openDescriptors()).toBe(before);
});

test('process_open_fds is the same count, at each scrape', async () => {
  const { registry } = createMetrics();
  const value = async (): Promise<number> => Number(/^process_open_fds\S* (\d+)$/m.exec(await registry.getSingleMetricAsString('process_open_fds'))?.[1]);
  const before = await value();
  expect(Math.abs(before - (openDescriptors() ?? -1))).toBeLessThanOrEqual(1);
  const opened = Array.from({ length: 20 }, () => openSync('/dev/null', 'r'));
  try {
    expect(await value()).toBe(before + 20);
  } finally {
    for (const fd of opened) closeSync(fd);
  }
  expect((await registry.metrics()).match(/^process_open_fds[{ ]/gm)).toHaveLength(1);
});
