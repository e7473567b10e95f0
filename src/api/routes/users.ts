import { Router } from 'express';
import { TOKEN_MESSAGES, type Tokens } from '../../auth/tokens';
import { NotFoundError, UnauthorizedError } from '../../domain/errors';
import { USER_MESSAGES, roleForEmail } from '../../domain/user';
import type { ReadStore } from '../../infra/readstore/port';
import { deviceSummariesForUser } from '../../projections/devices';
import { USERS_COLLECTION, type UserDoc } from '../../projections/users';
import { caller, requireAccessToken } from '../auth-middleware';
import { documentRoute } from '../openapi-registry';
import { userResponse } from '../schemas';

export interface UserRouteDeps {
  readonly tokens: Tokens;
  readonly readStore: ReadStore;
  readonly adminEmails: readonly string[];
}

documentRoute({
  method: 'get',
  path: '/users/me',
  tag: 'users',
  summary: "The caller's user resource, with the devices it is actively linked to",
  security: 'access',
  responses: {
    200: { description: 'The User resource', schema: userResponse },
    401: { description: '`Unauthorized`, `Invalid token`, `Token has expired`, or `Token has been revoked` (the account was deactivated after the token was issued)' },
    404: { description: '`User not found`' },
  },
});

/** GET /users/me, served from the read models (decisions §1). */
export function userRoutes(deps: UserRouteDeps): Router {
  const router = Router();
  router.get('/me', requireAccessToken(deps.tokens), async (_req, res) => {
    const userId = caller(res).sub;
    const [user, devices] = await Promise.all([
      deps.readStore.collection<UserDoc>(USERS_COLLECTION).get(userId),
      deviceSummariesForUser(deps.readStore, userId),
    ]);
    if (user === null) throw new NotFoundError(USER_MESSAGES.notFound);
    // An inactive account holds no usable token (decisions §3): the read model already says so
    // here, even before this process's own feed of deactivations has heard of it.
    if (!user.isActive) throw new UnauthorizedError(TOKEN_MESSAGES.revoked);
    res.status(200).json({
      id: user.id,
      email: user.email,
      firstName: user.firstName,
      lastName: user.lastName,
      role: roleForEmail(user.email, deps.adminEmails),
      isActive: user.isActive,
      isEmailVerified: user.isEmailVerified,
      profile: { avatar: user.profile.avatar, timezone: user.profile.timezone, language: user.profile.language },
      devices: devices.map((d) => ({ id: d.id, name: d.name, role: d.role, isOnline: d.isOnline })),
      createdAt: user.createdAt,
      updatedAt: user.updatedAt,
    });
  });
  return router;
}
