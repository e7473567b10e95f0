import { unverifiedTokenType } from '../auth/tokens';
import type { TunnelNamespace, TunnelSocket } from './context';
import { handshakeError } from './connection';
import { RATE_LIMITED_HANDSHAKE } from './events';

/**
 * Handshake admission: the hubs of a fleet that lost the service at once (a crash, a deploy)
 * come back at a pace this process can serve without making people wait. Three bounds, all on
 * device handshakes only:
 *
 * - a pace: `perSecond`, with a burst of one second's worth;
 * - a window of handshakes in flight that follows what the process sustains: it grows by one
 *   for each handshake answered within `targetMs` and, while they take longer, shrinks to a
 *   tenth below what was in flight then (at most once per `targetMs`);
 * - the event loop's delay (`loopDelay`): past `maxLoopDelayMs` every device handshake is
 *   refused. A client gives up on a connection whose WebSocket upgrade and engine.io `open`
 *   are not answered within its timeout (the hub client's 10 s), and those wait for the event
 *   loop, behind whatever the admitted handshakes and their heartbeats left queued. A process
 *   given a fraction of a core (a busy machine, a crash start) would otherwise accept
 *   connections it cannot answer before the clients give up, do the work anyway and see every
 *   client come back: a storm that feeds itself. A refusal costs a fraction of an accepted
 *   handshake and tells the hub when to come back.
 *
 * Past any bound a hub is refused before any token check with `connect_error`
 * `rate_limited` and `data: {retryAfter}` (decisions §5), each refused hub given its own
 * later moment at the rate the process answers, so the fleet returns spread over the time it
 * needs instead of all at the next second. App handshakes (a user access token) are never
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

/** Handshakes refused while the event loop is this late (ms), by default. */
export const MAX_LOOP_DELAY_MS = 500;

export interface AdmissionOptions {
  /** Device handshakes admitted per second by this process (0: no pace). */
  readonly perSecond: number;
  /** The in-flight window (default on; `false`: none). */
  readonly window?: AdmissionWindow | false;
  /** The latest second a refused hub is sent to (default 60). */
  readonly maxRetryAfterSeconds?: number;
  /** How late the event loop runs now, ms (`startLoopDelayMonitor`); absent: not looked at. */
  readonly loopDelay?: () => number;
  /** Device handshakes are refused while `loopDelay` is above this (default MAX_LOOP_DELAY_MS). */
  readonly maxLoopDelayMs?: number;
  readonly now?: () => number;
}

export interface Admission {
  /** The clock `settled` is given times of. */
  readonly now: () => number;
  /** Null when admitted (the caller then reports `settled`); else the seconds to wait. */
  readonly decide: () => number | null;
  /** An admitted handshake was answered (accepted or refused), `admittedAt` being when `decide` admitted it. */
  readonly settled: (admittedAt: number) => void;
  readonly stats: () => { readonly admitted: number; readonly refused: number; readonly inFlight: number; readonly window: number; readonly refusedLate: number };
}

export function createAdmission(options: AdmissionOptions): Admission {
  const now = options.now ?? (() => Date.now());
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
  // each (a stall, when the loop ran late, does not send refused hubs a minute away). What
  // refused hubs are spread at.
  let answeredRate = 0;
  let peakRate = 0;
  let answeredInPeriod = 0;
  let busyMs = 0;
  let changedAt = now();
  /** Time with handshakes in flight is counted up to `t`. */
  const busyUntil = (t: number): void => {
    if (inFlight > 0) busyMs += t - changedAt;
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
    if (bounds === null || t - shrunkAt < bounds.targetMs) return;
    window = Math.max(bounds.min, Math.floor(Math.min(window, busy) * 0.9));
    shrunkAt = t;
  };

  /** Refused hubs come back one after another at the pace the process answers. */
  const refuse = (t: number): number => {
    refused++;
    const measured = Math.max(answeredRate, peakRate);
    const pace = Math.max(rate > 0 ? Math.min(rate, measured || rate) : measured, 1);
    booked = Math.min(Math.max(booked, t) + 1000 / pace, t + maxWait * 1000);
    return Math.max(1, Math.ceil((booked - t) / 1000));
  };

  return {
    now,
    decide: () => {
      const t = now();
      if (loopDelay !== undefined && loopDelay() > maxLoopDelay) {
        refusedLate++;
        shrink(t, inFlight);
        return refuse(t);
      }
      if (inFlight >= window) return refuse(t);
      if (rate > 0) {
        tokens = Math.min(rate, tokens + ((t - refilledAt) / 1000) * rate);
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
    stats: () => ({ admitted, refused, inFlight, window, refusedLate }),
  };
}

export interface LoopDelayMonitor {
  /** How late the event loop is now, ms: the latest tick's delay, or the time the next tick is overdue by. */
  readonly current: () => number;
  readonly stop: () => void;
}

/**
 * The event loop's delay, from a timer every `everyMs`: how late its last tick fired, decaying
 * by half each tick, or, while a tick is overdue (the loop is busy right now), by how much.
 */
export function startLoopDelayMonitor(everyMs = 50, now: () => number = () => performance.now()): LoopDelayMonitor {
  let last = now();
  let delay = 0;
  const timer = setInterval(() => {
    const t = now();
    delay = Math.max(t - last - everyMs, delay / 2);
    last = t;
  }, everyMs);
  timer.unref();
  return {
    current: () => Math.max(delay, now() - last - everyMs),
    stop: () => clearInterval(timer),
  };
}

/** Whether the handshake presents a user access token (read without verifying: only for ordering; the handshake verifies it). */
function presentsAccessToken(token: unknown): boolean {
  return typeof token === 'string' && unverifiedTokenType(token) === 'access';
}

/** The handshakes admitted and not answered yet, with when they were admitted. */
export interface AdmittedHandshakes {
  /** The handshake of `socket` was answered: its place in the window is free. */
  settled(socket: TunnelSocket): void;
}

/** Installs admission as the namespace's first handshake step. */
export function admitHandshakes(nsp: TunnelNamespace, admission: Admission): AdmittedHandshakes {
  const admittedAt = new WeakMap<TunnelSocket, number>();
  nsp.use((socket, next) => {
    const token: unknown = (socket.handshake.auth as Record<string, unknown> | undefined)?.token;
    if (presentsAccessToken(token)) {
      next();
      return;
    }
    const retryAfter = admission.decide();
    if (retryAfter === null) {
      admittedAt.set(socket, admission.now());
      next();
    } else next(Object.assign(handshakeError(RATE_LIMITED, ADMISSION_MESSAGE), { data: { message: ADMISSION_MESSAGE, retryAfter } }));
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
