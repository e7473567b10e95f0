import { Router, type Response } from 'express';
import type { Tokens } from '../../auth/tokens';
import { currentRegistration, deviceHistory, deviceStateAt, deviceStreamExists, type RegistrationStart } from '../../audit/device-audit';
import { DEVICE_MESSAGES } from '../../domain/device';
import { ForbiddenError, NotFoundError } from '../../domain/errors';
import type { EventStore } from '../../infra/eventstore/port';
import type { ReadStore } from '../../infra/readstore/port';
import { findDevice, roleOf } from '../../projections/devices';
import type { AdminCheck } from '../admin-check';
import { caller, requireAccessToken } from '../auth-middleware';
import { documentRoute } from '../openapi-registry';
import { deviceHistoryQuery, deviceHistoryResponse, deviceStateQuery, deviceStateResponse } from '../schemas/audit';
import { deviceIdParams } from '../schemas/devices';
import { parseInput } from '../validation';

/**
 * The auditor endpoints (decisions §9). They read the event store, the one exception to
 * "every GET is served from a read model" (decisions §1); the read model only answers who
 * may ask.
 */
export interface AuditDeps {
  readonly tokens: Tokens;
  readonly readStore: ReadStore;
  readonly eventStore: EventStore;
  readonly clock: { now(): Date };
  readonly isAdmin: AdminCheck;
}

export const AUDIT_MESSAGES = {
  ownerOnly: 'Only the device owner can read the device history',
} as const;

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const auditErrors = {
  401: { description: 'Missing, invalid or expired access token' },
  403: { description: '`Only the device owner can read the device history`: a linked editor or viewer' },
  404: {
    description:
      '`Device not found`: no such device, or the caller has no active link to it. A deleted device is found only by an admin, by its uuid.',
  },
} as const;

documentRoute({
  method: 'get',
  path: '/devices/:id/history',
  tag: 'audit',
  summary:
    'The events of `device-<uuid>`, oldest first, with actor and request id, paginated by revision (owner or admin). ' +
    'Pass `meta.nextAfter` back as `after` while `meta.hasMore`. With `include=heartbeats` the heartbeat stream is merged in ' +
    'the order the events were recorded, and it has its own cursor (`heartbeatAfter` / `meta.nextHeartbeatAfter`). ' +
    'An owner sees the current registration only (from its `DeviceRegistered` on); an admin sees the whole stream of every ' +
    'device, a deleted one too (by uuid).',
  security: 'access',
  params: deviceIdParams,
  query: deviceHistoryQuery,
  responses: {
    200: { description: '`{data: [{stream, revision, type, data, occurredAt, actor, requestId}], meta}`', schema: deviceHistoryResponse },
    400: { description: 'A bad `after`, `limit` (above 100 included), `include` or `heartbeatAfter`' },
    ...auditErrors,
  },
});
documentRoute({
  method: 'get',
  path: '/devices/:id/state',
  tag: 'audit',
  summary:
    'The device as it was at `at`: its events up to that instant folded by the same code as the command side, with the ' +
    'users who had an active link then and their roles (owner now, or admin). An owner sees the current registration only: ' +
    'before it, `status: none`.',
  security: 'access',
  params: deviceIdParams,
  query: deviceStateQuery,
  responses: {
    200: { description: 'The state at `at`; `status: none` and `device: null` before the first registration', schema: deviceStateResponse },
    400: { description: 'A bad `at`' },
    ...auditErrors,
  },
});

/** The device an audit request reads, and where the caller's view of it begins (null: the whole stream). */
interface Audited {
  readonly uuid: string;
  readonly since: RegistrationStart | null;
}

export function auditRoutes(deps: AuditDeps): Router {
  const router = Router();
  const signedIn = requireAccessToken(deps.tokens);

  /**
   * The uuid the caller may audit: a device it owns now, or any device for an admin. The
   * read model drops deleted devices, so for those an admin names the uuid and the stream
   * answers whether it ever existed.
   */
  const auditedUuid = async (res: Response, idOrUuid: string): Promise<Audited> => {
    const who = caller(res);
    const isAdmin = await deps.isAdmin(res);
    const key = idOrUuid.toLowerCase();
    const doc = await findDevice(deps.readStore, key);
    if (doc !== null) {
      const role = roleOf(doc, who.sub);
      if (isAdmin) return { uuid: doc.uuid, since: null };
      // An owner sees the current registration only (decisions §9).
      if (role === 'owner') return { uuid: doc.uuid, since: await currentRegistration(deps.eventStore, doc.uuid) };
      if (role !== null) throw new ForbiddenError(AUDIT_MESSAGES.ownerOnly);
      throw new NotFoundError(DEVICE_MESSAGES.notFound);
    }
    if (isAdmin && GUID.test(key) && (await deviceStreamExists(deps.eventStore, key))) return { uuid: key, since: null };
    throw new NotFoundError(DEVICE_MESSAGES.notFound);
  };

  router.get('/:id/history', signedIn, async (req, res) => {
    const query = parseInput(deviceHistoryQuery, req.query);
    const { uuid, since } = await auditedUuid(res, parseInput(deviceIdParams, req.params).id);
    const page = await deviceHistory(deps.eventStore, uuid, {
      after: query.after,
      limit: query.limit,
      includeHeartbeats: query.include === 'heartbeats',
      heartbeatAfter: query.heartbeatAfter,
      since,
    });
    res.status(200).json(page);
  });

  router.get('/:id/state', signedIn, async (req, res) => {
    const query = parseInput(deviceStateQuery, req.query);
    const { uuid, since } = await auditedUuid(res, parseInput(deviceIdParams, req.params).id);
    res.status(200).json(await deviceStateAt(deps.eventStore, uuid, query.at ?? deps.clock.now().toISOString(), since));
  });

  return router;
}
