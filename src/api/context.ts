import type { Response } from 'express';
import type { Actor } from '../domain/messages';
import { newCommandContext, type CommandContext } from '../commands/handler';

/** The command context of a request: its actor and the X-Request-Id every event will carry. */
export function requestContext(res: Response, actor: Actor): CommandContext {
  return newCommandContext(actor, String(res.locals.requestId));
}
