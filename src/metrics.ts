import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { openDescriptors } from './runtime/descriptor-headroom';

/**
 * The service's Prometheus metrics (decisions §8), one registry per service instance so
 * that several services in one process (tests) never share counters.
 */
export interface Metrics {
  readonly registry: Registry;
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'method' | 'route' | 'status'>;
  readonly httpInFlight: Gauge;
  readonly tunnelSockets: Gauge<'kind'>;
  readonly tunnelMessages: Counter<'direction'>;
  readonly heartbeats: Counter;
  readonly offlineExpiries: Counter;
  readonly eventStoreAppendSeconds: Histogram;
  readonly projectorLagEvents: Gauge;
  readonly projectorLagMs: Gauge;
  readonly rateLimitRejections: Counter<'tier'>;
  readonly rateLimitStoreErrors: Counter<'tier'>;
  readonly logins: Counter<'outcome'>;
  readonly passwordHashesWaiting: Gauge;
  readonly tunnelHandshakes: Counter<'outcome'>;
  readonly tunnelAdmission: Gauge<'measure'>;
  /** Where the gauges read their values at each scrape; parts of the service fill it in as they start. */
  readonly sources: MetricSources;
}

/** Values read at scrape time rather than counted as they happen. */
export interface MetricSources {
  tunnel?: () => { readonly appSockets: number; readonly deviceSockets: number };
  passwordHashesWaiting?: () => number;
  projectorLag?: () => { readonly events: number; readonly ms: number };
  admission?: () => AdmissionFigures | undefined;
}

/** Device handshake admission (src/tunnel/admission.ts), as counted since the process started. */
export interface AdmissionFigures {
  readonly admitted: number;
  /** Refused, for any reason: the pace, the window or the event loop late. */
  readonly refused: number;
  /** Of those, refused because the event loop was late. */
  readonly refusedLate: number;
  readonly inFlight: number;
  /** The most in flight at once (Infinity: no window). */
  readonly window: number;
  /** Handshakes a second that refused hubs are spread at now (those refused while the loop is late: at most). */
  readonly pace: number;
  /** Device handshakes waiting for their turn of the event loop (src/runtime/turns.ts). */
  readonly waiting?: number;
}

/** Default metrics whose scrape costs a walk of every handle the process has open. */
export const O_N_DEFAULT_METRICS = ['nodejs_active_handles', 'nodejs_active_handles_total', 'nodejs_active_resources', 'nodejs_active_resources_total'] as const;

export type LoginOutcome = 'succeeded' | 'failed';
export type RelayDirection = 'to_device' | 'to_apps';

export function createMetrics(): Metrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'home-hub-cloud' });
  collectDefaultMetrics({ register: registry });
  // Not these: each lists every libuv handle of the process at each scrape (the grouped and the
  // total series twice over), which with 20,000 hub sockets is four arrays of 20,000 objects and
  // a stall of the event loop per scrape. `tunnel_sockets` and `process_open_fds` say as much.
  for (const name of O_N_DEFAULT_METRICS) registry.removeSingleMetric(name);
  const on = { registers: [registry] };
  // prom-client's own lists `/proc/self/fd` at each scrape (19 ms at 19,000 descriptors, on the
  // event loop); the same figure, counted as the head-room guard counts it.
  if (openDescriptors() !== null) {
    registry.removeSingleMetric('process_open_fds');
    new Gauge({
      name: 'process_open_fds',
      help: 'Number of open file descriptors.',
      collect() {
        const open = openDescriptors();
        if (open !== null) this.set(open);
      },
      ...on,
    });
  }
  const sources: MetricSources = {};
  const metrics: Metrics = {
    registry,
    sources,
    httpRequests: new Counter({ name: 'http_requests_total', help: 'HTTP requests by route template and status', labelNames: ['method', 'route', 'status'], ...on }),
    httpDuration: new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency by route template and status',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      ...on,
    }),
    httpInFlight: new Gauge({ name: 'http_requests_in_flight', help: 'HTTP requests received and not yet answered', ...on }),
    tunnelSockets: new Gauge({
      name: 'tunnel_sockets',
      help: 'Open tunnel sockets on this process by kind (app, device)',
      labelNames: ['kind'],
      collect() {
        const stats = sources.tunnel?.() ?? { appSockets: 0, deviceSockets: 0 };
        this.set({ kind: 'app' }, stats.appSockets);
        this.set({ kind: 'device' }, stats.deviceSockets);
      },
      ...on,
    }),
    tunnelMessages: new Counter({
      name: 'tunnel_messages_relayed_total',
      help: 'Tunnel messages relayed by this process, by direction (to_device, to_apps)',
      labelNames: ['direction'],
      ...on,
    }),
    heartbeats: new Counter({ name: 'heartbeats_accepted_total', help: 'Device heartbeats accepted', ...on }),
    offlineExpiries: new Counter({ name: 'offline_expiries_total', help: 'Devices marked offline after heartbeat silence', ...on }),
    eventStoreAppendSeconds: new Histogram({
      name: 'event_store_append_seconds',
      help: 'Latency of event-store appends',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      ...on,
    }),
    projectorLagEvents: new Gauge({
      name: 'projector_lag_events',
      help: 'Events appended by this process that the projections have not applied yet (sum over processes: the whole lag)',
      collect() {
        this.set(sources.projectorLag?.().events ?? 0);
      },
      ...on,
    }),
    projectorLagMs: new Gauge({
      name: 'projector_lag_milliseconds',
      help: 'Age of the oldest event appended by this process that the projections have not applied yet (0 when none)',
      collect() {
        this.set(sources.projectorLag?.().ms ?? 0);
      },
      ...on,
    }),
    rateLimitRejections: new Counter({ name: 'rate_limit_rejections_total', help: 'Requests and tunnel events refused by rate limit, by tier', labelNames: ['tier'], ...on }),
    rateLimitStoreErrors: new Counter({ name: 'rate_limit_store_errors_total', help: 'Rate-limit checks let through because the counters store was unreachable', labelNames: ['tier'], ...on }),
    logins: new Counter({ name: 'logins_total', help: 'Logins by outcome (succeeded; failed: wrong credentials or inactive account)', labelNames: ['outcome'], ...on }),
    passwordHashesWaiting: new Gauge({
      name: 'password_hashes_waiting',
      help: 'Password hashes and verifications waiting for a free slot',
      collect() {
        this.set(sources.passwordHashesWaiting?.() ?? 0);
      },
      ...on,
    }),
    tunnelHandshakes: new Counter({
      name: 'tunnel_device_handshakes_total',
      help: 'Device handshakes by admission outcome (admitted; refused: at the pace or the window; refused_late: the event loop was late), with retryAfter',
      labelNames: ['outcome'],
      collect() {
        const figures = sources.admission?.();
        if (figures === undefined) return;
        // Counted by the admission itself: the counter follows it.
        this.reset();
        this.inc({ outcome: 'admitted' }, figures.admitted);
        this.inc({ outcome: 'refused' }, figures.refused - figures.refusedLate);
        this.inc({ outcome: 'refused_late' }, figures.refusedLate);
      },
      ...on,
    }),
    tunnelAdmission: new Gauge({
      name: 'tunnel_device_handshake_admission',
      help: 'Device handshake admission now: in_flight, window (the most in flight; -1: none), pace (handshakes a second refused hubs are spread at; those refused while the event loop is late, at most), waiting (for their turn of the event loop)',
      labelNames: ['measure'],
      collect() {
        const figures = sources.admission?.();
        if (figures === undefined) return;
        this.set({ measure: 'in_flight' }, figures.inFlight);
        this.set({ measure: 'window' }, Number.isFinite(figures.window) ? figures.window : -1);
        this.set({ measure: 'pace' }, figures.pace);
        this.set({ measure: 'waiting' }, figures.waiting ?? 0);
      },
      ...on,
    }),
  };
  // Series that exist from the start, at 0, so that rates and alerts see them before the first event.
  for (const outcome of ['succeeded', 'failed'] satisfies LoginOutcome[]) metrics.logins.inc({ outcome }, 0);
  for (const direction of ['to_device', 'to_apps'] satisfies RelayDirection[]) metrics.tunnelMessages.inc({ direction }, 0);
  return metrics;
}
