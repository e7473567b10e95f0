import type { Response } from 'express';
import { roleForEmail } from '../domain/user';
import type { ReadStore } from '../infra/readstore/port';
import { USERS_COLLECTION, type UserDoc } from '../projections/users';
import { caller } from './auth-middleware';

/** Whether the signed-in caller of this request is an admin now. */
export type AdminCheck = (res: Response) => Promise<boolean>;

/**
 * Admin rights follow the account's current e-mail, not the token's `role` claim alone: a CRM
 * that moves an admin's e-mail off ADMIN_EMAILS (or deactivates the account) ends the rights
 * at the next request, not when the access token expires. The read model answers only for
 * tokens that claim admin, so other callers pay nothing.
 */
export function createAdminCheck(readStore: ReadStore, adminEmails: readonly string[]): AdminCheck {
  const users = readStore.collection<UserDoc>(USERS_COLLECTION);
  return async (res) => {
    if (caller(res).role !== 'admin') return false;
    const user = await users.get(caller(res).sub);
    return user !== null && user.isActive && roleForEmail(user.email, adminEmails) === 'admin';
  };
}
