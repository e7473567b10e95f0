import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import { startEsdbStandin, type EsdbStandin } from '../support/esdb-standin';
import { eventStoreContract } from './eventstore.contract';

/**
 * EventStoreDB adapter: against a real server when EVENTSTORE_URL is set, else against the
 * wire-level stand-in (test/support/esdb-standin), one per file. Either way the store is
 * shared by the tests (the contract uses stream names unique to each test), so it is never
 * empty: the empty-store case is covered by test/infra/esdb-standin.test.ts.
 */
const external = process.env.EVENTSTORE_URL;
let standin: EsdbStandin | undefined;

beforeAll(async () => {
  if (external === undefined) standin = await startEsdbStandin();
});

afterAll(async () => {
  await standin?.stop();
});

eventStoreContract(
  external === undefined ? 'EventStoreDB (wire-level stand-in)' : 'EventStoreDB (EVENTSTORE_URL)',
  async () => {
    const url = external ?? standin?.url;
    if (url === undefined) throw new Error('EventStoreDB stand-in not started');
    const store = createEsdbEventStore(url);
    return { store, cleanup: () => store.close() };
  },
  { opensEmptyStore: false },
);
