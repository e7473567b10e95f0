import type { Operation } from './history';
import { ok } from './history';
import { send, violation, type Actor } from './world';

/**
 * People logging in and refreshing (decisions §3): rotation keeps one current token per
 * family; of two concurrent refreshes with one token exactly one wins; presenting a rotated
 * token more than 5 s after its rotation revokes the family. Checked as the answers come, whenever they are definite.
 */

const INVARIANT = 'refresh-token families';

function refreshRequest(actor: Actor, token: string, kind: string): Promise<Operation> {
  return send(actor, { kind, entity: actor.family.entity, method: 'POST', path: '/auth/refresh', body: { refreshToken: token } });
}

const newToken = (op: Operation): string => (op.body as { refreshToken: string }).refreshToken;

async function login(actor: Actor): Promise<void> {
  const user = actor.users[0];
  const email = user?.email.certain();
  if (user?.password == null || email === undefined) return;
  const op = await send(actor, { kind: 'login', entity: actor.family.entity, method: 'POST', path: '/auth/login', body: { email, password: user.password } });
  if (ok(op)) {
    actor.family.refreshToken = newToken(op);
    actor.family.known = true;
    actor.family.rotated.length = 0;
  } else if (op.status !== null && op.status !== 503 && op.status !== 429) {
    violation(actor.world, INVARIANT, `login with the password set at start answered ${op.status}`, actor.family.entity);
  }
}

/** The family's current token, logging in when there is none known. */
async function current(actor: Actor): Promise<string | null> {
  if (actor.family.refreshToken === null || !actor.family.known) await login(actor);
  return actor.family.known ? actor.family.refreshToken : null;
}

function rotate(actor: Actor, from: string, op: Operation): void {
  actor.family.rotated.push(from);
  actor.family.refreshToken = newToken(op);
  actor.family.known = true;
}

function forget(actor: Actor): void {
  actor.family.refreshToken = null;
  actor.family.known = false;
}

export async function refresh(actor: Actor): Promise<void> {
  const token = await current(actor);
  if (token === null) return;
  const op = await refreshRequest(actor, token, 'refresh');
  if (ok(op)) return rotate(actor, token, op);
  if (op.status === 401) violation(actor.world, INVARIANT, 'the current refresh token of a family was refused', actor.family.entity);
  forget(actor);
}

export async function doubleRefresh(actor: Actor): Promise<void> {
  const token = await current(actor);
  if (token === null) return;
  const ops = await Promise.all([refreshRequest(actor, token, 'double-refresh'), refreshRequest(actor, token, 'double-refresh')]);
  const winners = ops.filter(ok);
  if (winners.length > 1) violation(actor.world, INVARIANT, 'two concurrent refreshes with one token both succeeded', actor.family.entity);
  const answered = ops.every((op) => op.status !== null && op.status !== 503);
  if (answered && winners.length === 0) violation(actor.world, INVARIANT, 'neither of two concurrent refreshes with the current token succeeded', actor.family.entity);
  // The loser, if the service saw it after the rotation, presented a rotated token: that is
  // reuse and may have revoked the family (decisions §3). Either way, log in afresh.
  forget(actor);
}

/** When a refresh token was issued (its `iat`, ms): for the newest token, when the one before it was rotated. */
function issuedAtMs(token: string): number {
  const payload = token.split('.')[1] ?? '';
  const iat = (JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { iat?: unknown }).iat;
  return typeof iat === 'number' ? iat * 1000 : 0;
}

/**
 * A rotated token presented again: refused. More than 5 s after its rotation it is reuse and
 * the family's current token is refused with it; sooner, it is a lost race and the family
 * lives on (decisions §3), so the current token is only checked once the window is surely past.
 */
export async function reuse(actor: Actor): Promise<void> {
  const old = actor.family.rotated.at(-1);
  const token = actor.family.known ? actor.family.refreshToken : null;
  if (old === undefined || token === null) return;
  const reused = await refreshRequest(actor, old, 'reuse');
  if (ok(reused)) violation(actor.world, INVARIANT, 'a rotated refresh token was accepted', actor.family.entity);
  // `iat` is in whole seconds: a second more than the window, so a race is never taken for reuse.
  if (reused.status === 401 && Date.now() - issuedAtMs(token) > 6_000) {
    const after = await refreshRequest(actor, token, 'after-reuse');
    if (ok(after)) violation(actor.world, INVARIANT, 'reuse of a rotated token did not revoke the family', actor.family.entity);
  }
  forget(actor);
}
