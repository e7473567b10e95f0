import { Router, type Request, type Response } from 'express';
import { bearerToken, DEVICE_TOKEN_TTL_SECONDS, type DeviceClaims, type Tokens } from '../../auth/tokens';
import type { DeviceCommands } from '../../commands/devices';
import { DEVICE_MESSAGES, type ActiveDevice } from '../../domain/device';
import { ForbiddenError, NotFoundError } from '../../domain/errors';
import type { ReadStore } from '../../infra/readstore/port';
import { findDevice, listDevicesForUser, metadataOf, roleOf, type DeviceDoc } from '../../projections/devices';
import { USERS_COLLECTION, type UserDoc } from '../../projections/users';
import { caller, requireAccessToken } from '../auth-middleware';
import { requestContext } from '../context';
import { deferredBodyError } from '../middleware';
import type { AdminCheck } from '../admin-check';
import { documentRoute } from '../openapi-registry';
import {
  deviceDetailResponse,
  deviceIdParams,
  deviceListResponse,
  deviceResponse,
  deviceTokenResponse,
  deviceUserParams,
  deviceUuidParams,
  heartbeatBody,
  heartbeatResponse,
  linkResponse,
  linkUserBody,
  listDevicesQuery,
  registerDeviceBody,
  successResponse,
  updateDeviceBody,
  updatedDeviceResponse,
} from '../schemas/devices';
import { parseInput } from '../validation';

export interface DeviceDeps {
  readonly tokens: Tokens;
  readonly readStore: ReadStore;
  readonly devices: DeviceCommands;
  readonly isAdmin: AdminCheck;
}

export const HEARTBEAT_UUID_MISMATCH = 'Device token does not belong to this device';

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

type DeviceFields = Pick<ActiveDevice, 'id' | 'uuid' | 'deviceId' | 'name' | 'ipAddress' | 'port' | 'isOnline' | 'metadata' | 'createdAt' | 'updatedAt'>;

/** The device as register answers it (interface: POST /devices/register). */
function deviceView(d: DeviceFields): Record<string, unknown> {
  return {
    id: d.id,
    uuid: d.uuid,
    deviceId: d.deviceId,
    name: d.name,
    ipAddress: d.ipAddress,
    port: d.port,
    isOnline: d.isOnline,
    metadata: d.metadata,
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
  };
}

function fieldsOf(doc: DeviceDoc): DeviceFields {
  return { ...doc, id: doc.internalId, metadata: metadataOf(doc) };
}

const user = (res: Response) => ({ type: 'user' as const, id: caller(res).sub });

// ---------------------------------------------------------------------------------------
// Route documentation

const accessErrors = {
  401: { description: 'Missing, invalid or expired access token' },
  404: { description: '`Device not found`: no such device, or the caller has no active link to it' },
} as const;

documentRoute({
  method: 'post',
  path: '/devices/register',
  tag: 'devices',
  summary: 'Register a device; the caller becomes its owner',
  security: 'access',
  body: registerDeviceBody,
  responses: {
    201: { description: 'The device, offline', schema: deviceResponse },
    400: { description: 'Validation failure' },
    401: accessErrors[401],
    409: { description: '`Device already registered` or `Device limit reached`' },
  },
});
documentRoute({
  method: 'get',
  path: '/devices',
  tag: 'devices',
  summary: 'The devices the caller has an active link to, with filters, sort and paging',
  security: 'access',
  query: listDevicesQuery,
  responses: {
    200: { description: 'Collection envelope `{data, meta}`', schema: deviceListResponse },
    400: { description: 'An unknown or out-of-range query value (a limit above 100 included)' },
    401: accessErrors[401],
  },
});
documentRoute({
  method: 'get',
  path: '/devices/:id',
  tag: 'devices',
  summary: 'A device with the caller\'s role and its users. An admin may read any device (`role` is then null unless linked).',
  security: 'access',
  params: deviceIdParams,
  responses: { 200: { description: 'The device', schema: deviceDetailResponse }, ...accessErrors },
});
documentRoute({
  method: 'put',
  path: '/devices/:id',
  tag: 'devices',
  summary: 'Change name, ipAddress, port or metadata (owner only)',
  security: 'access',
  params: deviceIdParams,
  body: updateDeviceBody,
  responses: {
    200: { description: 'The device after the change', schema: updatedDeviceResponse },
    400: { description: 'Validation failure' },
    403: { description: '`Only the device owner can update device settings`' },
    ...accessErrors,
  },
});
documentRoute({
  method: 'delete',
  path: '/devices/:id',
  tag: 'devices',
  summary: 'Delete a device (owner only): it leaves every read model and its device tokens are revoked',
  security: 'access',
  params: deviceIdParams,
  responses: { 200: { description: '`{success: true}`', schema: successResponse }, 403: { description: 'Not the owner' }, ...accessErrors },
});
documentRoute({
  method: 'post',
  path: '/devices/:id/link',
  tag: 'devices',
  summary: 'Share a device with a user by e-mail, or change or reactivate their link (owner only)',
  security: 'access',
  params: deviceIdParams,
  body: linkUserBody,
  responses: {
    200: { description: 'An existing link changed role or was reactivated', schema: linkResponse },
    201: { description: 'A new link', schema: linkResponse },
    400: { description: 'Validation failure' },
    403: { description: 'Not the owner' },
    404: { description: '`Device not found` or `User not found`' },
    409: { description: '`A device must keep at least one owner`' },
    401: accessErrors[401],
  },
});
documentRoute({
  method: 'delete',
  path: '/devices/:id/users/:userId',
  tag: 'devices',
  summary: 'Remove a user\'s link: the owner removes anyone, a linked user removes themself',
  security: 'access',
  params: deviceUserParams,
  responses: {
    200: { description: '`{success: true}`', schema: successResponse },
    403: { description: 'A non-owner removing someone else' },
    409: { description: '`A device must keep at least one owner`' },
    ...accessErrors,
  },
});
documentRoute({
  method: 'post',
  path: '/devices/auth/:uuid',
  tag: 'devices',
  summary: 'Issue a device token (owner only); every earlier token of the device is revoked',
  security: 'access',
  params: deviceUuidParams,
  responses: { 201: { description: 'A device token', schema: deviceTokenResponse }, 403: { description: 'Not the owner' }, ...accessErrors },
});
documentRoute({
  method: 'post',
  path: '/devices/auth/:uuid/renew',
  tag: 'devices',
  summary:
    "A hub renews its own device token before it expires: a new token of the same generation, so a newer issue or a " +
    'deletion still revokes it. Authenticated by the device token itself (a user token is refused); heartbeat rate tier.',
  security: 'device',
  params: deviceUuidParams,
  responses: {
    201: { description: 'A new device token of the same generation', schema: deviceTokenResponse },
    400: { description: 'Validation failure' },
    401: { description: 'Missing, invalid, expired or revoked (`Token has been revoked`) device token, or a user token' },
    403: { description: 'The token belongs to another device' },
  },
});
documentRoute({
  method: 'post',
  path: '/devices/heartbeat/:uuid',
  tag: 'devices',
  summary: 'A heartbeat from the device: online, lastSeenAt, and ipAddress/metadata when sent',
  security: 'device',
  params: deviceUuidParams,
  body: heartbeatBody,
  bodyOptional: true,
  responses: {
    200: { description: 'The device\'s presence after the heartbeat', schema: heartbeatResponse },
    400: { description: 'Validation failure' },
    401: { description: 'Missing, invalid, expired or revoked (`Token has been revoked`) device token' },
    403: { description: 'The token belongs to another device' },
  },
});

// ---------------------------------------------------------------------------------------

export function deviceRoutes(deps: DeviceDeps): Router {
  const router = Router();
  const signedIn = requireAccessToken(deps.tokens);
  const users = deps.readStore.collection<UserDoc>(USERS_COLLECTION);

  /**
   * The uuid behind an internal id or a uuid, for commands. The stream decides the rest: an
   * unknown or deleted device is a 404 there, whatever the read model says.
   */
  const uuidOf = async (idOrUuid: string): Promise<string> => {
    const key = idOrUuid.toLowerCase();
    const doc = await findDevice(deps.readStore, key);
    if (doc !== null) return doc.uuid;
    if (GUID.test(key)) return key;
    throw new NotFoundError(DEVICE_MESSAGES.notFound);
  };

  /** The device token of a hub's own request, for the device named in the path. */
  const hubClaims = (req: Request, res: Response): { claims: DeviceClaims; uuid: string } => {
    // The rate limiter verified the token already (it counts these per device): once is enough.
    const verified = res.locals.deviceClaims as DeviceClaims | undefined;
    const claims = verified ?? deps.tokens.verifyDevice(bearerToken(req.get('Authorization')));
    const uuid = parseInput(deviceUuidParams, req.params).uuid.toLowerCase();
    if (claims.deviceUuid !== uuid) throw new ForbiddenError(HEARTBEAT_UUID_MISMATCH);
    // The same text, as the token's own string: what the heartbeat path keeps of the device (its
    // fold's key) then shares the string the remembered token holds, not one copy per request.
    return { claims, uuid: claims.deviceUuid };
  };

  /**
   * A hub's body is answered after its token: a revoked token is refused as such (401) whatever
   * the body (unparsable, of another type, too large, or not valid): a hub stops on 401 and would
   * only retry a 400. A valid body is checked against the token by the command itself.
   */
  const tokenBeforeBody = async (res: Response, uuid: string, gen: number, valid: boolean): Promise<void> => {
    const refused = deferredBodyError(res);
    if (refused !== undefined || !valid) await deps.devices.assertCurrentToken(uuid, gen);
    if (refused !== undefined) throw refused;
  };

  router.post('/auth/:uuid/renew', async (req, res) => {
    const { claims, uuid } = hubClaims(req, res);
    await tokenBeforeBody(res, uuid, claims.gen, true);
    const device = await deps.devices.renewToken(uuid, claims.gen);
    const token = deps.tokens.signDevice({ sub: device.id, deviceUuid: device.uuid, gen: device.gen });
    res.status(201).json({ token, expiresIn: DEVICE_TOKEN_TTL_SECONDS });
  });

  router.post('/heartbeat/:uuid', async (req, res) => {
    const { claims, uuid } = hubClaims(req, res);
    // Parsed once: a body that does not validate is answered (400) only after the token is.
    const parsed = heartbeatBody.safeParse(req.body ?? {});
    await tokenBeforeBody(res, uuid, claims.gen, parsed.success);
    const body = parsed.success ? parsed.data : parseInput(heartbeatBody, req.body ?? {});
    const device = await deps.devices.heartbeat(uuid, claims.gen, body, requestContext(res, { type: 'device', id: uuid }));
    res.status(200).json({ success: true, device });
  });

  router.post('/register', signedIn, async (req, res) => {
    const body = parseInput(registerDeviceBody, req.body);
    const device = await deps.devices.register(body, requestContext(res, user(res)));
    res.status(201).json(deviceView(device));
  });

  router.post('/auth/:uuid', signedIn, async (req, res) => {
    const uuid = await uuidOf(parseInput(deviceUuidParams, req.params).uuid);
    const device = await deps.devices.issueToken(uuid, requestContext(res, user(res)));
    const token = deps.tokens.signDevice({ sub: device.id, deviceUuid: device.uuid, gen: device.gen });
    res.status(201).json({ token, expiresIn: DEVICE_TOKEN_TTL_SECONDS });
  });

  router.get('/', signedIn, async (req, res) => {
    const q = parseInput(listDevicesQuery, req.query);
    const page = await listDevicesForUser(deps.readStore, {
      userId: caller(res).sub,
      page: q.page,
      limit: q.limit,
      online: q.online,
      sort: q.sort,
      order: q.order,
      roles: q.role,
      createdAfter: q.createdAfter,
      createdBefore: q.createdBefore,
    });
    res.status(200).json({
      data: page.items.map(({ device, role }) => ({
        id: device.internalId,
        uuid: device.uuid,
        deviceId: device.deviceId,
        name: device.name,
        isOnline: device.isOnline,
        lastSeenAt: device.lastSeenAt,
        role,
      })),
      meta: { total: page.total, page: q.page, limit: q.limit, totalPages: Math.ceil(page.total / q.limit) },
    });
  });

  router.get('/:id', signedIn, async (req, res) => {
    const who = caller(res);
    const doc = await findDevice(deps.readStore, parseInput(deviceIdParams, req.params).id.toLowerCase());
    const role = doc === null ? null : roleOf(doc, who.sub);
    if (doc === null || (role === null && !(await deps.isAdmin(res)))) throw new NotFoundError(DEVICE_MESSAGES.notFound);
    const linked = await Promise.all(
      doc.users.map(async (link) => ({ id: link.userId, email: (await users.get(link.userId))?.email ?? null, role: link.role })),
    );
    const { createdAt, updatedAt, ...view } = deviceView(fieldsOf(doc));
    res.status(200).json({ ...view, lastSeenAt: doc.lastSeenAt, createdAt, updatedAt, role, users: linked });
  });

  router.put('/:id', signedIn, async (req, res) => {
    const body = parseInput(updateDeviceBody, req.body ?? {});
    const uuid = await uuidOf(parseInput(deviceIdParams, req.params).id);
    const device = await deps.devices.update(uuid, body, requestContext(res, user(res)));
    const { createdAt: _createdAt, ...view } = deviceView(device);
    res.status(200).json(view);
  });

  router.delete('/:id', signedIn, async (req, res) => {
    const uuid = await uuidOf(parseInput(deviceIdParams, req.params).id);
    await deps.devices.remove(uuid, requestContext(res, user(res)));
    res.status(200).json({ success: true });
  });

  router.post('/:id/link', signedIn, async (req, res) => {
    const body = parseInput(linkUserBody, req.body);
    const uuid = await uuidOf(parseInput(deviceIdParams, req.params).id);
    const { device, link, created } = await deps.devices.link(uuid, body, requestContext(res, user(res)));
    res.status(created ? 201 : 200).json({
      success: true,
      deviceUser: { id: link.linkId, userId: link.userId, deviceId: device.id, role: link.role, isActive: link.isActive, createdAt: link.createdAt },
    });
  });

  router.delete('/:id/users/:userId', signedIn, async (req, res) => {
    const params = parseInput(deviceUserParams, req.params);
    const uuid = await uuidOf(params.id);
    // User ids are UUIDs, written in lower case: one in upper case names the same user.
    await deps.devices.unlink(uuid, params.userId.toLowerCase(), requestContext(res, user(res)));
    res.status(200).json({ success: true });
  });

  return router;
}
