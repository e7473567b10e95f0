import { unverifiedTokenType } from '../auth/tokens';
import type { AdmissionFigures } from '../metrics';
import type { TunnelNamespace, TunnelSocket } from './context';
import { handshakeError } from './connection';
import { RATE_LIMITED_HANDSHAKE } from './events';
import { RateLimitedHandshake, type ClientIp, type HandshakeLimiter } from './handshake-limit';

/**
 * Handshake admission: the hubs of a fleet that lost the service at once (a crash, a deploy)
 * come back at a pace this process can serve without making people wait. Three bounds, all on
 * device handshakes only:
 *
 * - a pace: `perSecond`, with a burst of one second's worth;
 * - a window of handshakes in flight that follows what the process sustains: it grows by one
 *   for each handshake answered within `targetMs` and, while they take longer, shrinks to a
 *   tenth below what was in flight then (at most once per `targetMs`);
 * - the event loop's delay (`loopDelay`, late persistently: `startLoopDelayMonitor`): past
 *   `maxLoopDelayMs` while device handshakes are in flight, every device handshake is
 *   refused. A client gives up on a connection whose WebSocket upgrade and engine.io `open`
 *   are not answered within its timeout (the hub client's 10 s), and those wait for the event
 *   loop, behind whatever the admitted handshakes and their heartbeats left queued. A process
 *   given a fraction of a core (a busy machine, a crash start) would otherwise accept
 *   connections it cannot answer before the clients give up, do the work anyway and see every
 *   client come back: a storm that feeds itself. A refusal costs a fraction of an accepted
 *   handshake and tells the hub when to come back. A loop that is late with nothing in flight
 *   (a stall, a GC pause, a process resumed after a stop) is not one the handshakes make late:
 *   it neither refuses nor closes the window.
 *
 * Times are read from a monotonic clock (`performance.now()`): a wall clock stepped back would
 * otherwise leave the pace in debt for the step's length. Time that appears to run backwards
 * (an injected clock) refills and counts nothing.
 *
 * Past any bound a hub is refused before any token check with `connect_error`
 * `rate_limited` and `data: {retryAfter}` (decisions §5), each refused hub given its own
 * later moment at the pace (refused while the loop is late: at no more than the rate the
 * process answers), so the fleet returns spread over the time it needs instead of all at the
 * next second. App handshakes (a user access token) are never
 * held back by hubs: people first.
 */

export const RATE_LIMITED = RATE_LIMITED_HANDSHAKE;
export const ADMISSION_MESSAGE = 'Too many connections at once, retry later';

export interface AdmissionWindow {
  /** Handshakes in flight at the start (default 64). */
  readonly initial?: number;
  /** Never fewer than this (default 16). */
  readonly min?: number;
  /** Never more than this (default 4096). */
  readonly max?: number;
  /** A handshake answered within this is one the process had room for (default 1000 ms). */
  readonly targetMs?: number;
}

/** Handshakes refused while the event loop is this late (ms) persistently, by default. */
export const MAX_LOOP_DELAY_MS = 500;

export interface AdmissionOptions {
  /** Device handshakes admitted per second by this process (0: no pace). */
  readonly perSecond: number;
  /** The in-flight window (default on; `false`: none). */
  readonly window?: AdmissionWindow | false;
  /** The latest second a refused hub is sent to (default 60). */
  readonly maxRetryAfterSeconds?: number;
  /** How late the event loop has run persistently, ms (`startLoopDelayMonitor`); absent: not looked at. */
  readonly loopDelay?: () => number;
  /** Device handshakes are refused while `loopDelay` is above this and some are in flight (default MAX_LOOP_DELAY_MS). */
  readonly maxLoopDelayMs?: number;
  /** The clock, ms (default `performance.now()`: monotonic). */
  readonly now?: () => number;
}

export interface Admission {
  /** The clock `settled` is given times of. */
  readonly now: () => number;
  /** Null when admitted (the caller then reports `settled`); else the seconds to wait. */
  readonly decide: () => number | null;
  /** An admitted handshake was answered (accepted or refused), `admittedAt` being when `decide` admitted it. */
  readonly settled: (admittedAt: number) => void;
  readonly stats: () => AdmissionFigures;
}

export function createAdmission(options: AdmissionOptions): Admission {
  const now = options.now ?? (() => performance.now());
  const rate = options.perSecond;
  const maxWait = options.maxRetryAfterSeconds ?? 60;
  const bounds = options.window === false ? null : { initial: 64, min: 16, max: 4096, targetMs: 1000, ...options.window };
  const loopDelay = options.loopDelay;
  const maxLoopDelay = options.maxLoopDelayMs ?? MAX_LOOP_DELAY_MS;
  let window = bounds?.initial ?? Infinity;
  let inFlight = 0;
  let shrunkAt = -Infinity;
  // Handshakes answered per second of work, measured over a second or so of time with
  // handshakes in flight (idle time does not count: the first answers after a quiet spell or a
  // restart would say one a second), and the best of the last measurements, fading by a tenth
  // each (a stall, when the loop ran late, does not send refused hubs a minute away). What hubs
  // refused while the loop is late are spread at, at most (and every refused hub without a pace).
  let answeredRate = 0;
  let peakRate = 0;
  let answeredInPeriod = 0;
  let busyMs = 0;
  let changedAt = now();
  /** Time with handshakes in flight is counted up to `t`. */
  const busyUntil = (t: number): void => {
    if (inFlight > 0) busyMs += Math.max(0, t - changedAt);
    changedAt = t;
  };
  let tokens = rate;
  let refilledAt = now();
  // The appointment book: the moment the last refused hub was told to come back.
  let booked = 0;
  let admitted = 0;
  let refused = 0;
  // Refused because the event loop was late.
  let refusedLate = 0;

  /** An answer came late, or the loop is: the window to a tenth below what is in flight (once per target period). */
  const shrink = (t: number, busy: number): void => {
    if (bounds === null || (t >= shrunkAt && t - shrunkAt < bounds.targetMs)) return;
    window = Math.max(bounds.min, Math.floor(Math.min(window, busy) * 0.9));
    shrunkAt = t;
  };

  /** Handshakes answered per second of work: the last measurement or the fading best before it. */
  const measuredRate = (): number => Math.max(answeredRate, peakRate);

  /**
   * What refused hubs are spread at: the pace, when there is one; else the pace the process
   * answers at. Not the lower of the two: a rate measured while the process was cold (its
   * first handshakes after a restart read every device and wait behind the start's work)
   * booked thousands of hubs a minute away, at 200 a second, and left the process two-thirds
   * idle while they waited. A hub booked too early is refused again, on the connection it
   * already has; one booked too late costs the whole fleet time.
   */
  const paceNow = (): number => (rate > 0 ? rate : Math.max(measuredRate(), 1));

  /**
   * Refused hubs come back one after another at the pace; those refused because the event loop
   * is late, no faster than the process answers (at the pace until a rate is measured: a
   * second of handshakes in flight and one answered). A refusal is work too (a new WebSocket,
   * the engine.io open, the refusal): hubs sent back at a pace far above what a process starved
   * of CPU answers keep it late with refusals alone, and it admits next to none of them.
   */
  const refuse = (t: number, late = false): number => {
    refused++;
    const measured = measuredRate();
    const pace = late && measured > 0 ? Math.max(Math.min(paceNow(), measured), 1) : paceNow();
    // Further than the latest second: booked on a clock that has run back since.
    if (booked > t + maxWait * 1000) booked = t;
    booked = Math.min(Math.max(booked, t) + 1000 / pace, t + maxWait * 1000);
    // Whole milliseconds: a monotonic clock's fractions would make a second 1000.0000000003 ms.
    return Math.max(1, Math.ceil(Math.round(booked - t) / 1000));
  };

  return {
    now,
    decide: () => {
      const t = now();
      // Late with handshakes in flight: they are what the loop is late with, or will be.
      if (inFlight > 0 && loopDelay !== undefined && loopDelay() > maxLoopDelay) {
        refusedLate++;
        shrink(t, inFlight);
        return refuse(t, true);
      }
      if (inFlight >= window) return refuse(t);
      if (rate > 0) {
        tokens = Math.min(rate, tokens + (Math.max(0, t - refilledAt) / 1000) * rate);
        refilledAt = t;
        if (tokens < 1) return refuse(t);
        tokens -= 1;
      }
      admitted++;
      busyUntil(t);
      inFlight++;
      return null;
    },
    settled: (admittedAt) => {
      const t = now();
      busyUntil(t);
      inFlight = Math.max(0, inFlight - 1);
      answeredInPeriod++;
      if (busyMs >= 1000) {
        answeredRate = (answeredInPeriod * 1000) / busyMs;
        peakRate = Math.max(answeredRate, peakRate * 0.9);
        answeredInPeriod = 0;
        busyMs = 0;
      }
      if (bounds === null) return;
      if (t - admittedAt <= bounds.targetMs) window = Math.min(bounds.max, window + 1);
      // In flight when it was answered: this one too.
      else shrink(t, inFlight + 1);
    },
    stats: () => ({ admitted, refused, inFlight, window, refusedLate, pace: paceNow() }),
  };
}

export interface LoopDelayMonitor {
  /** How late the event loop has run persistently, ms: the least delay of its ticks over the last period; 0 until a period is known. */
  readonly current: () => number;
  readonly stop: () => void;
}

/** How long the loop must have run late, at least, before the monitor says it is (ms), by default. */
export const LOOP_DELAY_PERIOD_MS = 1000;
/** And over how many ticks, at least. */
const LOOP_DELAY_TICKS = 3;

/**
 * The event loop's delay, from a timer every `everyMs`: the least delay of its ticks over the
 * last `periodMs` and at least three ticks. One long pause (a GC pause, a stall, a process
 * stopped and resumed, the start of the process) is a single late tick followed by ticks on
 * time: it says nothing once the loop is on time again. Only a loop that has been late tick
 * after tick for the whole period is said to be.
 */
export function startLoopDelayMonitor(everyMs = 50, now: () => number = () => performance.now(), periodMs = LOOP_DELAY_PERIOD_MS): LoopDelayMonitor {
  // The recent ticks, oldest first: when the tick before each fired, and how late each came.
  const ticks: Array<{ readonly from: number; readonly late: number }> = [];
  // A clock that does not advance (or runs back) never covers the period: bounded all the same.
  const kept = 2 * Math.ceil(periodMs / everyMs) + LOOP_DELAY_TICKS;
  let last = now();
  let sustained = 0;
  const timer = setInterval(() => {
    const t = now();
    ticks.push({ from: last, late: Math.max(0, t - last - everyMs) });
    if (ticks.length > kept) ticks.shift();
    last = t;
    let least = Infinity;
    for (let i = ticks.length - 1; i >= 0; i--) {
      const tick = ticks[i] as (typeof ticks)[number];
      least = Math.min(least, tick.late);
      if (ticks.length - i >= LOOP_DELAY_TICKS && t - tick.from >= periodMs) {
        // Older ticks are not needed again.
        ticks.splice(0, i);
        sustained = least;
        return;
      }
    }
    sustained = 0;
  }, everyMs);
  timer.unref();
  return {
    current: () => sustained,
    stop: () => clearInterval(timer),
  };
}

/** Whether the handshake presents a user access token (read without verifying: only for ordering; the handshake verifies it). */
function presentsAccessToken(token: unknown): boolean {
  return typeof token === 'string' && unverifiedTokenType(token) === 'access';
}

/**
 * Whether a client's first frame is an app's handshake (a Socket.IO `CONNECT` to the tunnel's
 * namespace presenting a user access token, read without verifying): it does not wait behind
 * the hubs' (src/tunnel/engine.ts `handshakeTurns`). Anything else waits its turn.
 */
export function appHandshakeFrame(frame: string, namespace: string): boolean {
  const head = `40${namespace},`;
  if (!frame.startsWith(head)) return false;
  try {
    const auth: unknown = JSON.parse(frame.slice(head.length));
    return typeof auth === 'object' && auth !== null && presentsAccessToken((auth as { token?: unknown }).token);
  } catch {
    return false;
  }
}

/** The handshakes admitted and not answered yet, with when they were admitted. */
export interface AdmittedHandshakes {
  /** The handshake of `socket` was answered: its place in the window is free. */
  settled(socket: TunnelSocket): void;
}

/** The per-IP limit of failed handshakes, which admission asks first. */
export interface AddressLimit {
  readonly handshakes: Pick<HandshakeLimiter, 'check'>;
  readonly clientIp: ClientIp;
}

/**
 * Installs admission as the namespace's first handshake step. A device handshake from an
 * address this process has seen past its limit of failed handshakes is refused by that limit
 * (decisions §5: `rate_limited`, `data: {retryAfter}`, before any token check), without taking
 * a place of the pace or the window: one address sending junk does not keep the fleet out.
 */
export function admitHandshakes(nsp: TunnelNamespace, admission: Admission, limit: AddressLimit): AdmittedHandshakes {
  const admittedAt = new WeakMap<TunnelSocket, number>();
  const admit = (socket: TunnelSocket, next: (error?: Error) => void): void => {
    const retryAfter = admission.decide();
    if (retryAfter === null) {
      admittedAt.set(socket, admission.now());
      next();
    } else next(Object.assign(handshakeError(RATE_LIMITED, ADMISSION_MESSAGE), { data: { message: ADMISSION_MESSAGE, retryAfter } }));
  };
  nsp.use((socket, next) => {
    const token: unknown = (socket.handshake.auth as Record<string, unknown> | undefined)?.token;
    if (presentsAccessToken(token)) {
      next();
      return;
    }
    // No upgrade request (a second namespace connection): the next step refuses it.
    const request = socket.request as TunnelSocket['request'] | null;
    if (request === null) {
      admit(socket, next);
      return;
    }
    const decision = limit.handshakes.check(limit.clientIp(request));
    if (decision.allowed) admit(socket, next);
    else next(new RateLimitedHandshake(decision.retryAfter));
  });
  return {
    settled(socket) {
      const at = admittedAt.get(socket);
      if (at === undefined) return;
      admittedAt.delete(socket);
      admission.settled(at);
    },
  };
}
