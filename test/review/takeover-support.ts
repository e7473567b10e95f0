import type { AppendResult, EventStore, ExpectedRevision, NewEvent, ReadStreamOptions, RecordedEvent } from '../../src/infra/eventstore/port';
import { randomUUID } from 'node:crypto';
import { api, CRM_KEY, GENEROUS_RATE_LIMITS, startTestService, type Mode, type TestService } from '../support/harness';

/**
 * Seams in a test service's own event store (the object its commands use): a read or an append
 * held until the test opens it, or an append that fails as a process killed at that instant
 * would leave it. Each seam acts once.
 */

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

export interface Gate {
  /** Resolves once the held call has been reached. */
  readonly reached: Promise<void>;
  readonly open: () => void;
}

interface HeldGate extends Gate {
  readonly wait: () => Promise<void>;
}

function gate(): HeldGate {
  let hit: () => void = () => undefined;
  let release: () => void = () => undefined;
  const reached = new Promise<void>((resolve) => (hit = resolve));
  const opened = new Promise<void>((resolve) => (release = resolve));
  return {
    reached,
    open: () => release(),
    wait: async () => {
      hit();
      await opened;
    },
  };
}

export interface Seams {
  /** Holds the next forward read of `stream`. */
  holdRead(stream: string): Gate;
  /** Holds the next append to a stream named `stream` (or starting with it) that carries an event of `type`. */
  holdAppend(stream: string, type: string): Gate;
  /** Fails the next append to a stream starting with `prefix` that carries an event of `type`. */
  failAppend(prefix: string, type: string): void;
  restore(): void;
}

export function seams(service: TestService): Seams {
  const store = service.eventStore as Mutable<EventStore>;
  const readStream = store.readStream.bind(store);
  const append = store.append.bind(store);
  let read: { stream: string; gate: HeldGate } | null = null;
  let write: { stream: string; type: string; gate: HeldGate } | null = null;
  let failing: { prefix: string; type: string } | null = null;
  store.readStream = (name: string, options?: ReadStreamOptions): AsyncIterable<RecordedEvent> => {
    const held = read;
    if (held === null || held.stream !== name || options?.direction === 'backwards') return readStream(name, options);
    read = null;
    return (async function* heldRead(): AsyncGenerator<RecordedEvent> {
      await held.gate.wait();
      yield* readStream(name, options);
    })();
  };
  store.append = async (name: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> => {
    const fail = failing;
    if (fail !== null && name.startsWith(fail.prefix) && events.some((e) => e.type === fail.type)) {
      failing = null;
      throw new Error('the process died here');
    }
    const held = write;
    if (held !== null && name.startsWith(held.stream) && events.some((e) => e.type === held.type)) {
      write = null;
      await held.gate.wait();
    }
    return append(name, events, expected);
  };
  return {
    holdRead: (stream) => {
      const g = gate();
      read = { stream, gate: g };
      return g;
    },
    holdAppend: (stream, type) => {
      const g = gate();
      write = { stream, type, gate: g };
      return g;
    },
    failAppend: (prefix, type) => {
      failing = { prefix, type };
    },
    restore: () => {
      store.readStream = readStream;
      store.append = append;
    },
  };
}

export async function streamTypes(service: TestService, stream: string): Promise<string[]> {
  const types: string[] = [];
  for await (const recorded of service.eventStore.readStream(stream)) types.push(recorded.type);
  return types;
}

type Answer = Awaited<ReturnType<typeof api>>;

export interface Person {
  readonly syncId: number;
  readonly email: string;
  readonly firstName: string;
  readonly userId: string;
  /** An access token of theirs, signed with the service's key. */
  readonly token: string;
}

export interface Customers {
  nextId(): number;
  sync(id: number, email: string, firstName: string, active?: boolean): Promise<Answer>;
  erase(id: number): Promise<Answer>;
  /** A customer synced now (201). */
  person(prefix: string): Promise<Person>;
  /** A customer erased by an erasure that stopped between `UserErased` and the release of their e-mail. */
  erasedHolder(): Promise<Person>;
}

export const userIdOf = (res: { body: unknown }): string => (res.body as { user?: { id: string } }).user?.id ?? '';

export function customers(service: TestService, firstId: number): Customers {
  let next = firstId;
  const headers = { 'X-Internal-Api-Key': CRM_KEY };
  const sync = (id: number, email: string, firstName: string, active = true): Promise<Answer> =>
    api(service, 'POST', '/auth/sync-customer', { headers, body: { id, first_name: firstName, last_name: 'Reviewed', email, active } });
  const erase = (id: number): Promise<Answer> => api(service, 'POST', '/auth/erase-customer', { headers, body: { id } });
  const person = async (prefix: string): Promise<Person> => {
    const syncId = next++;
    const tag = randomUUID().slice(0, 8);
    const email = `${prefix.toLowerCase()}.${tag}@example.org`;
    const firstName = `${prefix}${tag}`;
    const res = await sync(syncId, email, firstName);
    if (res.status !== 201) throw new Error(`sync-customer answered ${res.status}`);
    const userId = userIdOf(res);
    return { syncId, email, firstName, userId, token: service.tokens.signAccess({ sub: userId, email, role: 'user' }) };
  };
  return {
    nextId: () => next++,
    sync,
    erase,
    person,
    erasedHolder: async () => {
      const p = await person('Holder');
      const seam = seams(service);
      try {
        seam.failAppend('reservation-email-', 'ReservationReleased');
        const erased = await erase(p.syncId);
        if (erased.status !== 500) throw new Error(`the erasure answered ${erased.status}`);
      } finally {
        seam.restore();
      }
      if ((await streamTypes(service, `user-${p.userId}`)).at(-1) !== 'UserErased') throw new Error('the erasure stopped before UserErased');
      return p;
    },
  };
}

/** A test service of `mode` for the enclosing describe block, started before its tests and stopped after them. */
export function serviceForBlock(mode: Mode, firstId: number): { service: () => TestService; crm: () => Customers } {
  let service: TestService | null = null;
  let crm: Customers | null = null;
  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: GENEROUS_RATE_LIMITS });
    crm = customers(service, firstId);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });
  const started = <T>(value: T | null): T => {
    if (value === null) throw new Error('the service did not start');
    return value;
  };
  return { service: () => started(service), crm: () => started(crm) };
}
