import type { RedisOptions } from 'ioredis';

/**
 * Options of a Redis connection that subscribes (the tunnel adapter's, the watermark's).
 *
 * No ready check: ioredis checks readiness with `INFO` after a (re)connection, and a
 * subscription sent in the moment between the connection and that check (the tunnel
 * adapter subscribes to a room's channel whenever a room appears) puts the connection in
 * subscriber mode first; Redis then refuses the `INFO`, ioredis drops the connection, and
 * the same happens again at each reconnection (redis/ioredis#2037). Subscriptions need no
 * such check: Redis accepts them while it loads its data set.
 */
export const SUBSCRIBER_OPTIONS = { enableReadyCheck: false } as const satisfies RedisOptions;
