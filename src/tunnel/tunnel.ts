import type { IncomingMessage, Server as HttpServer } from 'node:http';
import { Server, type ServerOptions } from 'socket.io';
import { appOriginOf } from '../api/middleware';
import type { AccessRevocations } from '../auth/access-revocations';
import type { Tokens } from '../auth/tokens';
import type { StateCache } from '../commands/handler';
import type { DeviceState } from '../domain/device';
import { systemClock, type Clock } from '../commands/handler';
import type { EventStore } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import type { Logger } from '../logger';
import type { AdmissionFigures, RelayDirection } from '../metrics';
import { createDeviceAccess } from './access';
import { admitHandshakes, appHandshakeFrame, createAdmission, startLoopDelayMonitor, type AdmissionOptions } from './admission';
import { createTurns } from '../runtime/turns';
import { createAppSockets } from './apps';
import { createLocalCluster, type TunnelCluster } from './cluster';
import type { RedisAdapterKind } from './redis-cluster';
import { acceptConnections, handshakeError } from './connection';
import { createSessions, DEFAULT_TUNNEL_OPTIONS, errorText, type TunnelContext, type TunnelNamespace, type TunnelOptions, type TunnelServer } from './context';
import { createDeviceSockets } from './devices';
import { TUNNEL_NAMESPACE, UNAUTHORIZED } from './events';
import { createEventRunner, startSlowConsumerSweep } from './limits';
import { unlimited, type TunnelLimiter } from './limiter';
import { peerAddress, unlimitedHandshakes, type ClientIp, type HandshakeLimiter } from './handshake-limit';
import { startExpirySweep } from './expiry';
import { startLiveFeed } from './live-feed';
import { releaseUpgradeResponse, TunnelWebSocketServer } from './websocket';
import { TunnelEngine } from './engine';
import { leanRooms } from './lean-rooms';

/**
 * The tunnel (decisions §5): Socket.IO namespace `/tunnel` on the API's HTTP server. This
 * file only wires its concerns, each in a file of its own with the state it owns passed in:
 *
 * | file            | concern                                                                   |
 * | --------------- | ------------------------------------------------------------------------- |
 * | `events.ts`     | the typed contract apps and hubs import                                   |
 * | `context.ts`    | sessions, rooms and options every concern shares                          |
 * | `connection.ts` | handshake, a session per socket                                           |
 * | `expiry.ts`     | sockets cut when their token expires, one sweep for all                   |
 * | `apps.ts`       | subscribe, unsubscribe, relay to a device                                 |
 * | `devices.ts`    | the one live socket per device, relay to apps, status on connect and drop |
 * | `live-feed.ts`  | device events → presence `device:status`, revocations; deactivations      |
 * | `limits.ts`     | event order, the per-socket bound, rate limits, slow consumers            |
 * | `cluster.ts`    | other processes: the Redis adapter and device claims                      |
 * | `engine.ts`     | engine.io with a lean connection for every client straight over WebSocket |
 */

/** Socket.IO closes a connection whose namespace handshake has not come within this (ms). */
const CONNECT_TIMEOUT_MS = 10_000;
/** The length of a turn of the event loop the handshakes' and upgrades' turns aim at while hubs pour in (src/runtime/turns.ts). */
const TURN_TARGET_MS = 40;

export { DEFAULT_TUNNEL_OPTIONS, deviceRoom, subscribersRoom, userSubscribersRoom, type TunnelOptions } from './context';

export interface TunnelRedis {
  readonly url: string;
  /** Chosen by `npm run bench:tunnel` (bench/README.md). */
  readonly adapter?: RedisAdapterKind;
}

export interface TunnelDeps {
  readonly tokens: Pick<Tokens, 'verifyAccess' | 'verifyDevice'>;
  readonly eventStore: EventStore;
  readonly logger: Logger;
  readonly clock?: Clock;
  readonly limiter?: TunnelLimiter;
  /** Failed handshakes per client IP (general tier); none when absent. */
  readonly handshakeLimiter?: HandshakeLimiter;
  /** The client IP of a handshake, as HTTP sees it (TRUST_PROXY); the TCP peer when absent. */
  readonly clientIp?: ClientIp;
  /** Distributed mode: the Redis adapter. Absent or null: one process, the in-memory adapter. */
  readonly redis?: TunnelRedis | null;
  /** CORS for the polling transport (browsers); the WebSocket transport needs none. */
  readonly appOrigin?: string | undefined;
  readonly options?: Partial<TunnelOptions>;
  /** Device handshakes admitted at a pace (src/tunnel/admission.ts); absent: no admission control. */
  readonly admission?: AdmissionOptions;
  /** Told of every message relayed (metrics). */
  readonly onRelayed?: (direction: RelayDirection) => void;
  /** The device read model: the heartbeat presence `device:status` carries when the tunnel socket connects or drops. */
  readonly readStore?: ReadStore;
  /** Deactivated accounts: their app sockets are told ACCESS_REVOKED and closed. */
  readonly accessRevocations?: Pick<AccessRevocations, 'onRevoked' | 'isRevoked'>;
  /** The heartbeat path's device folds: the tunnel starts from them and keeps the same ones (src/tunnel/access.ts). */
  readonly deviceStates?: Pick<StateCache<DeviceState>, 'get' | 'set'>;
  /** Told of a device stream whose token generation changed or that was deleted, on any process. */
  readonly onDeviceRevoked?: (streamName: string) => void;
}

export interface TunnelStats {
  readonly appSockets: number;
  readonly deviceSockets: number;
  readonly subscriptions: number;
  /** App sessions in the subscriber index (each counted once per device): equals `subscriptions` unless some leaked. */
  readonly subscribedSessions: number;
}

export interface Tunnel {
  readonly stats: () => TunnelStats;
  /** Device handshake admission (src/tunnel/admission.ts); undefined without it. */
  readonly admission: () => AdmissionFigures | undefined;
  /** Closes every socket's transport (clients reconnect, to another process), then the adapter. */
  readonly close: () => Promise<void>;
}

export const DEFAULT_REDIS_ADAPTER: RedisAdapterKind = 'sharded';

const REFRESH_CLAIMS_MS = 30_000;
/** Socket.IO's default path, where clients look for it. */
const SOCKET_IO_PATH = '/socket.io';

export async function createTunnel(httpServer: HttpServer, deps: TunnelDeps): Promise<Tunnel> {
  const options: TunnelOptions = { ...DEFAULT_TUNNEL_OPTIONS, ...deps.options };
  const { logger } = deps;
  const clock = deps.clock ?? systemClock;
  const cluster: TunnelCluster =
    deps.redis === undefined || deps.redis === null
      ? createLocalCluster()
      : // ioredis and the Socket.IO Redis adapter load here, never in embedded mode.
        await (await import('./redis-cluster')).createRedisCluster({ url: deps.redis.url, adapter: deps.redis.adapter ?? DEFAULT_REDIS_ADAPTER, logger });

  let closing = false;
  const background = new Set<Promise<unknown>>();
  const origin = appOriginOf(deps.appOrigin);
  const serverOptions: Partial<ServerOptions> = {
    path: SOCKET_IO_PATH,
    serveClient: false,
    maxHttpBufferSize: options.maxFrameBytes,
    connectTimeout: CONNECT_TIMEOUT_MS,
    // Neither compresses: a deflate context per WebSocket is tens of KB per idle hub, and the
    // messages are small JSON.
    perMessageDeflate: false,
    httpCompression: false,
    // `ws` letting each frame's mask (a view into the chunk it was read in) go once it is used.
    wsEngine: TunnelWebSocketServer,
    allowRequest: (_req, callback) => callback(closing ? 'shutting down' : null, !closing),
    ...(cluster.adapter !== undefined ? { adapter: cluster.adapter } : {}),
    ...(origin !== undefined ? { cors: { origin, credentials: true } } : {}),
  };
  const io: TunnelServer = new Server(serverOptions);
  // The engine under Socket.IO: engine.io's, with a lean connection of its own for every
  // connection that comes straight over WebSocket (src/tunnel/engine.ts).
  const engine = new TunnelEngine(serverOptions);
  engine.attach(httpServer, serverOptions);
  io.bind(engine);
  // engine.io hands the middlewares a stand-in response for a WebSocket upgrade, which keeps the
  // upgrade request for as long as the TCP connection lives. Last of the middlewares: once they
  // ran, the stand-in, and the request it holds, are let go (src/tunnel/websocket.ts).
  io.engine.use((_req: IncomingMessage, res: unknown, next: (error?: unknown) => void) => {
    releaseUpgradeResponse(res);
    next();
  });
  // Nothing lives in the main namespace.
  io.of('/').use((_socket, next) => next(handshakeError(UNAUTHORIZED, 'Connect to the /tunnel namespace')));
  const nsp: TunnelNamespace = io.of(TUNNEL_NAMESPACE);
  // No socket in a room of its own, and one-member rooms small (src/tunnel/lean-rooms.ts).
  leanRooms(nsp.adapter);

  const ctx: TunnelContext = {
    nsp,
    options,
    logger,
    now: () => clock.now().toISOString(),
    cluster,
    access: createDeviceAccess(deps.eventStore, { maxEntries: options.accessCacheSize, now: () => Date.now(), shared: deps.deviceStates }),
    sessions: createSessions(),
    readStore: deps.readStore,
    onRelayed: deps.onRelayed,
    closing: () => closing,
    track: (work, what) => {
      const guarded = work.catch((error: unknown) => logger.warn({ err: errorText(error) }, `tunnel: ${what} failed`));
      background.add(guarded);
      void guarded.finally(() => background.delete(guarded));
    },
  };

  const runner = createEventRunner(ctx, deps.limiter ?? unlimited);
  const devices = createDeviceSockets(ctx, runner);
  const apps = createAppSockets(ctx, runner, devices);
  cluster.attach(nsp, (notice) => devices.onNotice(notice));
  await cluster.roomsReady();
  // Before any token check: device handshakes at the pace this process can serve.
  const loopDelay = deps.admission !== undefined ? startLoopDelayMonitor() : null;
  const handshakes = deps.handshakeLimiter ?? unlimitedHandshakes;
  const clientIp = deps.clientIp ?? peerAddress;
  const admission = deps.admission !== undefined ? createAdmission({ loopDelay: loopDelay?.current, ...deps.admission }) : null;
  // Hubs' handshakes (a client's first frame) a few a turn of the event loop, an app's at once;
  // one that has waited half of Socket.IO's connect timeout is taken besides the count, before
  // that timeout closes its connection (its client would come back at the end of the queue).
  // Turns of the event loop kept near 40 ms while hubs pour in, their jobs to 10 ms of each (a
  // quarter): a person's request read in the next turn waits less than the 100 ms an app's p99
  // is given (bench/README.md, "A budget for each turn").
  const newTurns = () => createTurns({ maxWaitMs: CONNECT_TIMEOUT_MS / 2, targetTurnMs: TURN_TARGET_MS });
  const turns = admission !== null ? newTurns() : null;
  if (turns !== null) {
    engine.handshakeTurns = { turns, atOnce: (frame) => appHandshakeFrame(frame, nsp.name) };
    // Upgrades in turns of their own: a crowd's upgrades read together are not one long turn
    // either, and an app's upgrade does not wait behind the hubs' first frames (its handshake
    // goes at once: behind them in the same queue, it would wait for all of them all the same).
    engine.upgradeTurns = newTurns();
  }
  const admitted = admission !== null ? admitHandshakes(nsp, admission, { handshakes, clientIp }) : null;
  const expiry = startExpirySweep(ctx, clock);
  acceptConnections(ctx, {
    tokens: deps.tokens,
    clock,
    runner,
    apps,
    devices,
    handshakes,
    clientIp,
    expiry,
    settled: (socket) => admitted?.settled(socket),
  });
  const feed = await startLiveFeed(ctx, { eventStore: deps.eventStore, apps, devices, accessRevocations: deps.accessRevocations, onDeviceRevoked: deps.onDeviceRevoked });
  const stopSweep = startSlowConsumerSweep(ctx);

  // Claims expire in Redis unless refreshed; after a Redis restart they are written again
  // and announced, since the other processes' answers about these devices may be stale.
  const refresh = setInterval(() => ctx.track(cluster.refreshDevices(devices.held()), 'device refresh'), REFRESH_CLAIMS_MS);
  refresh.unref();
  cluster.onReconnect((why) => {
    // Taken for dead, the others told their subscribers these devices were gone (ordered after
    // the claims they had): claimed again, their "connected" comes after that "gone".
    if (why === 'revived') {
      ctx.track(devices.reclaimHeld(), 'device reclaim');
      return;
    }
    const held = devices.held();
    ctx.track(cluster.refreshDevices(held), 'device refresh');
    for (const device of held) cluster.announce({ kind: 'device-connected', ...device });
  });
  // Another process died: its devices are gone, and this process's subscribers hear it.
  cluster.onDevicesGone((gone) => devices.onGone(gone));

  return {
    stats: () => {
      let appSockets = 0;
      let subscriptions = 0;
      for (const session of ctx.sessions.all.values()) {
        if (session.kind !== 'app') continue;
        appSockets++;
        subscriptions += session.subscriptions.size;
      }
      let subscribedSessions = 0;
      for (const set of ctx.sessions.subscribers.values()) subscribedSessions += set.size;
      return { appSockets, deviceSockets: ctx.sessions.all.size - appSockets, subscriptions, subscribedSessions };
    },
    admission: () => (admission === null ? undefined : { ...admission.stats(), waiting: turns?.stats().waiting ?? 0 }),
    close: async () => {
      if (closing) return;
      closing = true;
      stopSweep();
      expiry.stop();
      loopDelay?.stop();
      clearInterval(refresh);
      await feed.stop();
      // Closing the transports, not a Socket.IO disconnect: clients then reconnect (to another process).
      const connections = [...ctx.sessions.all.values()].flatMap((session) => session.raw ?? []);
      io.engine.close();
      const settle = Promise.allSettled([...background]);
      await Promise.race([settle, new Promise((resolve) => setTimeout(resolve, 2000).unref())]);
      // Clients that did not finish the closing handshake by now are not going to.
      for (const connection of connections) connection.destroy();
      await Promise.allSettled([io.of('/'), nsp].map(async (namespace) => namespace.adapter.close()));
      await cluster.close();
    },
  };
}
