import { executionAsyncResource } from 'node:async_hooks';
import type Redis from 'ioredis';

/**
 * Whether the code running is a `setImmediate` callback: the event loop is in its check
 * phase, and an immediate scheduled now would run only in the next turn, after that turn's
 * timers and I/O callbacks.
 */
const inImmediate = (): boolean => (executionAsyncResource() as { constructor?: { name?: string } } | undefined)?.constructor?.name === 'Immediate';

/**
 * The commands a Redis connection sends in one turn of the event loop go to the kernel in one
 * system call instead of one each.
 *
 * ioredis writes every command to its socket as it is made. A device handshake in
 * distributed mode sends eight (bench/README.md, "What a device handshake asks of Redis"),
 * and a process taking over a dead one's hubs makes hundreds of handshakes a second: their
 * writes were a tenth of its CPU on the machines of bench/README.md, each a system call.
 * Here the first command of a turn corks the connection's socket, and the socket is uncorked
 * once the turn's I/O callbacks have run (`setImmediate`): everything written in between
 * leaves in one `writev`, in the order it was written. Nothing waits for an answer, and
 * nothing else changes: each command is sent and answered as before, only later within the
 * same turn (ioredis's auto-pipelining, which builds a pipeline per turn and keeps one in
 * flight, made the failover slower: bench/README.md).
 *
 * A command made in a `setImmediate` callback (the watermark's and the revocations' publishes
 * are) would wait a whole turn for an immediate scheduled then: its socket is uncorked at the
 * end of that callback instead (`process.nextTick`), still in the check phase. One phase is
 * left: a command made in a socket's `close` handler leaves in the next turn's check phase
 * (test/review/coalesce-writes-attacks.test.ts holds that bound).
 *
 * Only the connection's own socket is corked, and only while it is ready; commands queued
 * offline and pipelines go out as ioredis sends them.
 */
export function coalesceWrites<T extends Redis>(client: T): T {
  const send = client.sendCommand.bind(client);
  let corked: Redis['stream'] | null = null;
  const uncork = (): void => {
    const stream = corked;
    corked = null;
    stream?.uncork();
  };
  client.sendCommand = (...args: Parameters<Redis['sendCommand']>): unknown => {
    if (corked === null && args[1] === undefined && client.status === 'ready') {
      const stream = client.stream;
      if (stream.writable) {
        corked = stream;
        stream.cork();
        if (inImmediate()) process.nextTick(uncork);
        else setImmediate(uncork);
      }
    }
    return send(...args);
  };
  return client;
}
