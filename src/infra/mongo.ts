import type { Db, MongoClient, MongoClientOptions } from 'mongodb';
import { guardClosedConnections } from './mongo-driver-guard';

/**
 * A connected client and its database (`dbName`, or the one the URI names). A client that
 * fails to connect is closed before the error is passed on, so no pool is left behind.
 * The driver is loaded on the first connection (embedded mode never loads it), with the
 * guard of src/infra/mongo-driver-guard.ts against commands that never settle.
 */
export async function connectMongo(uri: string, dbName?: string, clientOptions?: MongoClientOptions): Promise<{ client: MongoClient; db: Db }> {
  const { MongoClient } = await import('mongodb');
  guardClosedConnections();
  const client = new MongoClient(uri, clientOptions);
  try {
    await client.connect();
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }
  return { client, db: dbName === undefined ? client.db() : client.db(dbName) };
}
