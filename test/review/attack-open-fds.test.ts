import { closeSync, openSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { openDescriptors } from '../../src/runtime/descriptor-headroom';
import { createMetrics } from '../../src/metrics';

/**
 * `openDescriptors` (src/runtime/descriptor-headroom.ts), which `process_open_fds` and the
 * head-room guard read, from outside: with sockets opening and closing, and on a kernel that
 * gives `/proc/self/fd` no size (before Linux 6.2). The function has no seam for its `stat`:
 * `node:fs` is replaced here for it, a kernel's answer (size 0, or a `/proc` that fails) chosen
 * by the test; every other call goes to the real `fs`.
 */

type Kernel = 'sized' | 'unsized' | 'no proc';
let kernel: Kernel = 'sized';

jest.mock('node:fs', () => {
  const actual = jest.requireActual<typeof import('node:fs')>('node:fs');
  const isFdDir = (path: unknown): boolean => String(path) === '/proc/self/fd';
  return {
    ...actual,
    statSync: (...args: Parameters<typeof actual.statSync>) => {
      if (isFdDir(args[0]) && kernel !== 'sized') {
        if (kernel === 'no proc') throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
        return { ...actual.statSync(...args), size: 0 };
      }
      return actual.statSync(...args);
    },
    readdirSync: (...args: Parameters<typeof actual.readdirSync>) => {
      if (isFdDir(args[0]) && kernel === 'no proc') throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
      return actual.readdirSync(...args);
    },
  };
});

afterEach(() => {
  kernel = 'sized';
});

/** The descriptors open, as the kernel counts them (the `stat`'s size, no descriptor of its own). */
const counted = (): number => jest.requireActual<typeof import('node:fs')>('node:fs').statSync('/proc/self/fd').size;

async function withSockets<T>(n: number, body: () => Promise<T> | T): Promise<T> {
  const server = createServer();
  const accepted: Socket[] = [];
  server.on('connection', (socket) => accepted.push(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const clients = await Promise.all(Array.from({ length: n }, () => new Promise<Socket>((resolve) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
  })));
  while (accepted.length < n) await new Promise((resolve) => setImmediate(resolve));
  try {
    return await body();
  } finally {
    for (const socket of [...clients, ...accepted]) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

test('with the kernel\'s size: exactly the descriptors open, sockets opening and closing', async () => {
  const before = openDescriptors();
  expect(before).toBe(counted());
  await withSockets(40, () => {
    // 40 clients, 40 accepted, and the listener.
    expect(openDescriptors()).toBe((before ?? 0) + 81);
    expect(openDescriptors()).toBe(counted());
  });
  await new Promise((resolve) => setTimeout(resolve, 50));
  expect(openDescriptors()).toBe(counted());
});

test('a kernel that says size 0: the listing counts the same descriptors, not one more for its own', async () => {
  kernel = 'unsized';
  expect(openDescriptors()).toBe(counted());
  await withSockets(20, () => {
    expect(openDescriptors()).toBe(counted());
  });
  const opened = Array.from({ length: 10 }, () => openSync('/dev/null', 'r'));
  try {
    expect(openDescriptors()).toBe(counted());
  } finally {
    for (const fd of opened) closeSync(fd);
  }
});

test('process_open_fds says the same on either kernel', async () => {
  const { registry } = createMetrics();
  const value = async (): Promise<number> => Number(/^process_open_fds\S* (\d+)$/m.exec(await registry.getSingleMetricAsString('process_open_fds'))?.[1]);
  const sized = await value();
  kernel = 'unsized';
  expect(await value()).toBe(sized);
});

test('no /proc: unknown (null)', () => {
  kernel = 'no proc';
  expect(openDescriptors()).toBeNull();
});
