/**
 * Whether an error says a store (MongoDB, EventStoreDB, Redis) could not be reached or
 * answered "not now", as opposed to a fault in what was asked. Such an error is the
 * outage's, not the request's: the API answers it 503 (never 500), and the projector
 * resumes from its checkpoint after it. The one place this is decided.
 */
export function isTransientStoreError(error: unknown): boolean {
  // An error may wrap the one that matters (`cause`); a few levels are enough.
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current !== undefined && current !== null; depth++) {
    if (isTransientItself(current)) return true;
    current = current instanceof Error ? current.cause : undefined;
  }
  return false;
}

/**
 * MongoDB server codes that mean "this node cannot serve now" (the driver's own list of
 * retryable codes, minus what a single node never says).
 */
const MONGO_TRANSIENT_CODES: ReadonlySet<number> = new Set([
  6, // HostUnreachable
  7, // HostNotFound
  89, // NetworkTimeout
  91, // ShutdownInProgress
  189, // PrimarySteppedDown
  262, // ExceededTimeLimit
  9001, // SocketException
  10107, // NotWritablePrimary
  11600, // InterruptedAtShutdown
  11602, // InterruptedDueToReplStateChange
  13435, // NotPrimaryNoSecondaryOk
  13436, // NotPrimaryOrSecondary
]);

/** Node's socket errors: the peer is gone, refused, or never answered. */
const NETWORK_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTCONN',
  'EAI_AGAIN',
]);

/**
 * The drivers' error classes by name, matched along the prototype chain (what `instanceof`
 * does, subclasses included) without importing the drivers: embedded mode never loads
 * `mongodb` or `@eventstore/db-client`, and their classes keep their names.
 */
function classNames(error: object): Set<string> {
  const names = new Set<string>();
  for (let proto: unknown = Object.getPrototypeOf(error); proto !== null && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    const ctor = (proto as { constructor?: unknown }).constructor;
    if (typeof ctor === 'function') names.add(ctor.name);
  }
  return names;
}

/** MongoDB: the network (a dropped connection, a cleared pool), no server to select, or a client closed under a request (at shutdown). */
const MONGO_TRANSIENT_CLASSES = [
  'MongoNetworkError',
  'MongoServerSelectionError',
  'MongoNotConnectedError',
  'MongoTopologyClosedError',
  'MongoClientClosedError',
  'MongoServerClosedError',
] as const;

/** EventStoreDB (gRPC, each a `CommandErrorBase`): the server unreachable, not answering in time, or not the leader. */
const ESDB_TRANSIENT_CLASSES = ['UnavailableError', 'DeadlineExceededError', 'TimeoutError', 'NotLeaderError', 'CancelledError'] as const;

function hasErrorLabel(error: object, label: string): boolean {
  const method = (error as { hasErrorLabel?: unknown }).hasErrorLabel;
  return typeof method === 'function' && (method as (label: string) => unknown).call(error, label) === true;
}

function isTransientItself(error: unknown): boolean {
  if (typeof error === 'object' && error !== null) {
    const names = classNames(error);
    if (names.has('MongoError')) {
      if (MONGO_TRANSIENT_CLASSES.some((name) => names.has(name))) return true;
      if (names.has('MongoServerError') || names.has('MongoWriteConcernError')) {
        const code = (error as { code?: unknown }).code;
        if (typeof code === 'number' && MONGO_TRANSIENT_CODES.has(code)) return true;
      }
      if (hasErrorLabel(error, 'ResetPool') || hasErrorLabel(error, 'TransientTransactionError')) return true;
    }
    if (names.has('CommandErrorBase') && ESDB_TRANSIENT_CLASSES.some((name) => names.has(name))) return true;
  }
  // Redis (ioredis, whose error classes are not exported): a command given up on while
  // disconnected, a closed connection, or a server that is loading or failing over.
  if (error instanceof Error) {
    if (error.name === 'MaxRetriesPerRequestError' || error.message === 'Connection is closed.') return true;
    if (/^(LOADING|BUSY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN) /.test(error.message)) return true;
  }
  // Any socket error on the way to a store.
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && NETWORK_CODES.has(code);
}
