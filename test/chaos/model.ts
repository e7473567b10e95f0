import type { Operation } from './history';
import { ok } from './history';

/**
 * What the clients may expect the service to hold, from the answers they got. A value a
 * definite success set is the only one allowed; a write without an answer adds its value
 * to the allowed ones (it may or may not have happened); a refusal leaves them as they were.
 * Every entity is written by one worker only, one request at a time, so "the last write"
 * is well defined, with one exception: a request the client gave up waiting for (its
 * timeout) may still be at work in the service, and take effect after later writes were
 * answered, so its value stays allowed after them too. (A request that never reached the
 * service, or whose process died, cannot land later.)
 */
export class Possible<T> {
  private values: T[];
  /** Values of requests the client stopped waiting for: they may still land at any time. */
  private readonly lingering: T[] = [];
  constructor(initial: T) {
    this.values = [initial];
  }
  after(op: Operation, value: T): void {
    if (ok(op)) {
      this.values = [value, ...this.lingering.filter((v) => v !== value)];
    } else if (op.status === null) {
      if (!this.values.includes(value)) this.values.push(value);
      if (op.error === CLIENT_TIMEOUT && !this.lingering.includes(value)) this.lingering.push(value);
    }
  }
  allows(value: T): boolean {
    return this.values.includes(value);
  }
  certain(): T | undefined {
    return this.values.length === 1 ? this.values[0] : undefined;
  }
  list(): readonly T[] {
    return this.values;
  }
}

/** How the client records a request it stopped waiting for (AbortSignal.timeout's error name). */
export const CLIENT_TIMEOUT = 'TimeoutError';

export interface UserModel {
  readonly worker: number;
  readonly customerId: number;
  readonly entity: string;
  userId: string;
  /** Signed with the service's key, as login would: the workload acts for the user. */
  accessToken: string;
  readonly email: Possible<string>;
  readonly firstName: Possible<string>;
  /** The last e-mail this user was synced with (sent again by every sync). */
  lastEmail: string;
  emailCounter: number;
  password: string | null;
}

export type Role = 'owner' | 'editor' | 'viewer';

export interface DeviceModel {
  readonly uuid: string;
  readonly entity: string;
  readonly owner: UserModel;
  readonly exists: Possible<boolean>;
  readonly name: Possible<string>;
  /** Per linked user id: the role, or null when not linked. */
  readonly links: Map<string, Possible<Role | null>>;
  deviceToken: string | null;
  /**
   * A device-auth went unanswered before `deviceToken` was issued: it may still be carried
   * out later (a request outlives its client's timeout), issue a newer generation and so
   * revoke `deviceToken` (decisions §4). A 401 then is the service being right.
   */
  tokenMayBeSuperseded: boolean;
  /** lastSeenAt of the last heartbeat answered, and whether a later one went unanswered. */
  lastSeenAt: string | null;
  heartbeatUncertain: boolean;
  /** Carries a tunnel socket: never deleted. */
  tunnel: boolean;
}

export interface FamilyModel {
  readonly entity: string;
  refreshToken: string | null;
  /** The token is known to be the family's current one (no unanswered refresh since). */
  known: boolean;
  /** Tokens known to have been rotated away. */
  readonly rotated: string[];
}

export interface Violation {
  readonly invariant: string;
  readonly message: string;
  /** The entity whose history shows it. */
  readonly entity: string | null;
}
