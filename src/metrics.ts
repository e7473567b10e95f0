import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * The service's Prometheus metrics (decisions §8), one registry per service instance so
 * that several services in one process (tests) never share counters.
 */
export interface Metrics {
  readonly registry: Registry;
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'method' | 'route' | 'status'>;
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
}

export function createMetrics(): Metrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'home-hub-cloud' });
  collectDefaultMetrics({ register: registry });
  const on = { registers: [registry] };
  return {
    registry,
    httpRequests: new Counter({ name: 'http_requests_total', help: 'HTTP requests by route template and status', labelNames: ['method', 'route', 'status'], ...on }),
    httpDuration: new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency by route template and status',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      ...on,
    }),
    tunnelSockets: new Gauge({ name: 'tunnel_sockets', help: 'Open tunnel sockets by kind (app, device)', labelNames: ['kind'], ...on }),
    tunnelMessages: new Counter({ name: 'tunnel_messages_relayed_total', help: 'Tunnel messages relayed by direction', labelNames: ['direction'], ...on }),
    heartbeats: new Counter({ name: 'heartbeats_accepted_total', help: 'Device heartbeats accepted', ...on }),
    offlineExpiries: new Counter({ name: 'offline_expiries_total', help: 'Devices marked offline after heartbeat silence', ...on }),
    eventStoreAppendSeconds: new Histogram({
      name: 'event_store_append_seconds',
      help: 'Latency of event-store appends',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      ...on,
    }),
    projectorLagEvents: new Gauge({ name: 'projector_lag_events', help: 'Events appended by this process that the projections have not applied yet', ...on }),
    projectorLagMs: new Gauge({ name: 'projector_lag_milliseconds', help: 'How long the projections have been behind the event store', ...on }),
    rateLimitRejections: new Counter({ name: 'rate_limit_rejections_total', help: 'Requests and tunnel events refused by rate limit, by tier', labelNames: ['tier'], ...on }),
    rateLimitStoreErrors: new Counter({ name: 'rate_limit_store_errors_total', help: 'Rate-limit checks let through because the counters store was unreachable', labelNames: ['tier'], ...on }),
    logins: new Counter({ name: 'logins_total', help: 'Logins by outcome', labelNames: ['outcome'], ...on }),
    passwordHashesWaiting: new Gauge({ name: 'password_hashes_waiting', help: 'Password hashes waiting for a free slot', ...on }),
  };
}
