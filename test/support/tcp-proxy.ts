import { createServer, createConnection, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a server (Redis, MongoDB, the EventStoreDB stand-in,
 * the service itself), for outages of one client while the server keeps going:
 * - `drop()`: every open connection destroyed at once (a network drop); the proxy keeps
 *   listening; `setDown(true)`: new connections are accepted and closed at once (a service
 *   that is down) until `setDown(false)`;
 * - `cut()`: every connection dropped and new ones refused (the port is closed);
 *   `resume()` listens on the same port again;
 * - `blackhole()`: traffic stops in both directions, silently, and connections stay open, as
 *   when a network path drops packets: nothing is refused, nothing is answered (both sockets
 *   stop being read, so what is sent piles up in the kernel's buffers, as TCP would keep
 *   retransmitting it). New connections are accepted and hang the same way;
 * - `delay(ms)`: every chunk is passed on `ms` later, in order;
 * - `heal()`: traffic flows again and what was held is delivered (TCP's retransmissions
 *   getting through); `heal({ reset: true })` instead closes every connection (TCP gave up).
 */
export interface TcpProxy {
  readonly port: number;
  /** `http://127.0.0.1:<port>`: for a proxy in front of an HTTP server. */
  readonly baseUrl: string;
  /** The upstream URL with the proxy's port instead. */
  readonly url: (upstreamUrl: string) => string;
  /** Destroys every open connection; new ones are still accepted. */
  drop(): void;
  /** While down, new connections are closed as soon as they are accepted. */
  setDown(down: boolean): void;
  cut(): Promise<void>;
  resume(): Promise<void>;
  blackhole(): void;
  delay(ms: number): void;
  heal(options?: { readonly reset?: boolean }): void;
  readonly mode: () => 'pass' | 'blackhole' | 'delay';
  stop(): Promise<void>;
  close(): Promise<void>;
}

interface Link {
  readonly client: Socket;
  readonly upstream: Socket;
}

/** In front of `upstream`: a port (on `upstreamHost`), or a URL such as a service's base URL. */
export async function startTcpProxy(upstream: number | string, upstreamHost = '127.0.0.1'): Promise<TcpProxy> {
  const target = typeof upstream === 'string' ? new URL(upstream) : { port: String(upstream), hostname: upstreamHost };
  const upstreamPort = Number(target.port);
  const host = target.hostname;
  let mode: 'pass' | 'blackhole' | 'delay' = 'pass';
  let down = false;
  let delayMs = 0;
  const links = new Set<Link>();

  /**
   * Passes `from`'s data on to `to`, held back while blackholed, later while delayed. Delayed
   * chunks wait in one queue per direction, drained by one timer, so they keep their order
   * (timers of different durations due at the same moment may fire in any order).
   */
  const pipe = (from: Socket, to: Socket): void => {
    const queue: Array<{ readonly due: number; readonly chunk: Buffer }> = [];
    let timer: NodeJS.Timeout | undefined;
    const drain = (): void => {
      timer = undefined;
      while (queue.length > 0 && (queue[0]?.due ?? 0) <= Date.now()) {
        const next = queue.shift();
        if (next !== undefined && !to.destroyed) to.write(next.chunk);
      }
      const head = queue[0];
      if (head !== undefined) timer = setTimeout(drain, Math.max(0, head.due - Date.now()));
    };
    from.on('data', (chunk: Buffer) => {
      if ((mode === 'delay' && delayMs > 0) || queue.length > 0) {
        queue.push({ due: Date.now() + (mode === 'delay' ? delayMs : 0), chunk });
        if (timer === undefined) timer = setTimeout(drain, Math.max(0, (queue[0]?.due ?? 0) - Date.now()));
      } else if (!to.destroyed) {
        to.write(chunk);
      }
    });
    from.on('end', () => {
      if (queue.length === 0) to.end();
      else setTimeout(() => to.end(), Math.max(0, (queue[queue.length - 1]?.due ?? 0) - Date.now() + 1));
    });
  };

  const onConnection = (client: Socket): void => {
    if (down) {
      client.destroy();
      return;
    }
    const upstream = createConnection({ port: upstreamPort, host });
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
  };

  const listen = (server: Server, port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve((server.address() as AddressInfo).port);
      });
    });
  const closeServer = (server: Server): Promise<void> => new Promise((resolve) => server.close(() => resolve()));

  let server: Server | null = createServer(onConnection);
  const port = await listen(server, 0);

  const forEachSocket = (act: (socket: Socket) => void): void => {
    for (const link of links) {
      act(link.client);
      act(link.upstream);
    }
  };
  const drop = (): void => {
    forEachSocket((socket) => socket.destroy());
    links.clear();
  };
  const cut = async (): Promise<void> => {
    const closing = server === null ? Promise.resolve() : closeServer(server);
    server = null;
    drop();
    await closing;
  };

  return {
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    url: (upstreamUrl) => upstreamUrl.replace(`:${upstreamPort}`, `:${port}`),
    mode: () => mode,
    drop,
    setDown(value) {
      down = value;
    },
    cut,
    async resume() {
      if (server !== null) return;
      const next = createServer(onConnection);
      await listen(next, port);
      server = next;
    },
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
        drop();
      } else if (was === 'blackhole') {
        forEachSocket((socket) => socket.resume());
      }
    },
    stop: cut,
    close: cut,
  };
}
