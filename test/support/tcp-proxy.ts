import { createServer, createConnection, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy in front of one server (Redis, MongoDB, the EventStoreDB stand-in) for one
 * client process, to cut that process off while the others carry on:
 * - `blackhole()`: traffic stops in both directions, silently, and connections stay open, as
 *   when a network path drops packets: nothing is refused, nothing is answered (both sockets
 *   stop being read, so what is sent piles up in the kernel's buffers, as TCP would keep
 *   retransmitting it). New connections are accepted and hang the same way.
 * - `delay(ms)`: every chunk is passed on `ms` later, in order.
 * - `heal()`: traffic flows again, what was held is delivered (TCP's retransmissions getting
 *   through); `heal({ reset: true })` instead closes every connection (TCP gave up).
 */
export interface TcpProxy {
  readonly port: number;
  /** The upstream URL with the proxy's port instead. */
  readonly url: (upstreamUrl: string) => string;
  blackhole(): void;
  delay(ms: number): void;
  heal(options?: { readonly reset?: boolean }): void;
  readonly mode: () => 'pass' | 'blackhole' | 'delay';
  close(): Promise<void>;
}

interface Link {
  readonly client: Socket;
  readonly upstream: Socket;
}

export async function startTcpProxy(upstreamPort: number, upstreamHost = '127.0.0.1'): Promise<TcpProxy> {
  let mode: 'pass' | 'blackhole' | 'delay' = 'pass';
  let delayMs = 0;
  const links = new Set<Link>();

  /** Passes `from`'s data on to `to`, held back while blackholed, later while delayed. */
  const pipe = (from: Socket, to: Socket): void => {
    let tail = 0;
    from.on('data', (chunk: Buffer) => {
      if (mode === 'delay' && delayMs > 0) {
        const due = Math.max(tail, Date.now() + delayMs);
        tail = due;
        setTimeout(() => {
          if (!to.destroyed) to.write(chunk);
        }, due - Date.now());
      } else if (!to.destroyed) {
        to.write(chunk);
      }
    });
    from.on('end', () => to.end());
  };

  const server: Server = createServer((client) => {
    const upstream = createConnection({ port: upstreamPort, host: upstreamHost });
    const link: Link = { client, upstream };
    links.add(link);
    const drop = (): void => {
      links.delete(link);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
    pipe(client, upstream);
    pipe(upstream, client);
    if (mode === 'blackhole') {
      client.pause();
      upstream.pause();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  const forEachSocket = (act: (socket: Socket) => void): void => {
    for (const link of links) {
      act(link.client);
      act(link.upstream);
    }
  };

  return {
    port,
    url: (upstreamUrl) => upstreamUrl.replace(`:${upstreamPort}`, `:${port}`),
    mode: () => mode,
    blackhole() {
      mode = 'blackhole';
      forEachSocket((socket) => socket.pause());
    },
    delay(ms) {
      if (mode === 'blackhole') forEachSocket((socket) => socket.resume());
      mode = 'delay';
      delayMs = ms;
    },
    heal(options = {}) {
      const was = mode;
      mode = 'pass';
      delayMs = 0;
      if (options.reset === true) {
        forEachSocket((socket) => socket.destroy());
        links.clear();
      } else if (was === 'blackhole') {
        forEachSocket((socket) => socket.resume());
      }
    },
    async close() {
      forEachSocket((socket) => socket.destroy());
      links.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
