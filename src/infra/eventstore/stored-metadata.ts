import type { Actor, EventMetadata } from '../../domain/messages';

/**
 * Event metadata as the stores keep it: what an auditor reads (occurredAt, actor,
 * requestId) always; causationId and correlationId only when they differ from requestId,
 * which is what nearly every event (every one a request causes directly) has. Reading
 * restores them, so callers see the same EventMetadata they appended.
 */
export interface StoredMetadata {
  readonly occurredAt: string;
  readonly actor: Actor;
  readonly requestId: string;
  readonly causationId?: string;
  readonly correlationId?: string;
}

export function trimMetadata(metadata: EventMetadata): StoredMetadata {
  const { occurredAt, actor, requestId, causationId, correlationId } = metadata;
  return {
    occurredAt,
    actor,
    requestId,
    ...(causationId !== requestId ? { causationId } : {}),
    ...(correlationId !== requestId ? { correlationId } : {}),
  };
}

export function restoreMetadata(stored: StoredMetadata): EventMetadata {
  return {
    occurredAt: stored.occurredAt,
    actor: stored.actor,
    requestId: stored.requestId,
    causationId: stored.causationId ?? stored.requestId,
    correlationId: stored.correlationId ?? stored.requestId,
  };
}

function isActor(value: unknown): value is Actor {
  if (typeof value !== 'object' || value === null) return false;
  const actor: { type?: unknown; id?: unknown } = value;
  return typeof actor.type === 'string' && typeof actor.id === 'string';
}

function isOptionalString(value: unknown): boolean {
  return value === undefined || typeof value === 'string';
}

/** Whether a value read back from a store is stored metadata (full EventMetadata is too). */
export function isStoredMetadata(value: unknown): value is StoredMetadata {
  if (typeof value !== 'object' || value === null) return false;
  const m: Record<string, unknown> = value as Record<string, unknown>;
  return (
    typeof m.occurredAt === 'string' &&
    isActor(m.actor) &&
    typeof m.requestId === 'string' &&
    isOptionalString(m.causationId) &&
    isOptionalString(m.correlationId)
  );
}
