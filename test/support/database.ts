import { randomBytes } from 'node:crypto';
import { Client } from 'pg';

/** The server the run uses: set by support/run-tests.ts (embedded) or by the caller. */
export function serverUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run the tests with `npm test`');
  return url;
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** A fresh, empty database for one test file (or one test), dropped by `drop()`. */
export async function createTestDatabase(label: string): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const name = `jq_${label.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  const admin = new Client({ connectionString: serverUrl() });
  await admin.connect();
  try {
    await admin.query(`create database "${name}"`);
  } finally {
    await admin.end();
  }
  return {
    name,
    url: withDatabase(serverUrl(), name),
    async drop() {
      const client = new Client({ connectionString: serverUrl() });
      await client.connect();
      try {
        await client.query(`drop database if exists "${name}" with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}

/** A plain pg client on a test database, for looking at rows directly. */
export async function connect(url: string): Promise<Client> {
  const client = new Client({ connectionString: url });
  // A server restart or a terminated backend must not crash the test run: the next query fails instead.
  client.on('error', () => undefined);
  await client.connect();
  return client;
}
