import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { startEmbeddedPostgres } from '../embedded-postgres';

/** The one PostgreSQL server every system runs on; each gets a database of its own. */
export interface PostgresServer {
  url: string;
  description: string;
  stop(): Promise<void>;
}

/** What the report says about the server, read from the server itself. */
export interface ServerSettings {
  version: string;
  fsync: string;
  synchronousCommit: string;
}

/**
 * DATABASE_URL when set, else an embedded server started durable (fsync and synchronous_commit
 * on, as in production), in a temporary directory removed at stop.
 */
export async function openPostgresServer(): Promise<PostgresServer> {
  const url = process.env.DATABASE_URL;
  if (url) return { url, description: `DATABASE_URL (${hidePassword(url)})`, stop: async () => undefined };

  const dataDir = mkdtempSync(join(tmpdir(), 'nestjs-job-queue-bench-'));
  const removeDataDir = () => rmSync(dataDir, { recursive: true, force: true });
  try {
    const server = await startEmbeddedPostgres({ dataDir, persistent: false, durable: true });
    return {
      url: server.url,
      description: `embedded PostgreSQL started with fsync on (data in ${dataDir})`,
      stop: async () => {
        await server.stop();
        removeDataDir();
      },
    };
  } catch (error) {
    removeDataDir();
    throw error;
  }
}

/** Drops `name` if it is there (from an earlier, interrupted run) and creates it empty. */
export async function recreateDatabase(serverUrl: string, name: string): Promise<string> {
  await withClient(serverUrl, async (client) => {
    await client.query(`drop database if exists "${name}" with (force)`);
    await client.query(`create database "${name}"`);
  });
  return databaseUrl(serverUrl, name);
}

export async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  await withClient(serverUrl, (client) => client.query(`drop database if exists "${name}" with (force)`));
}

export async function readServerSettings(url: string): Promise<ServerSettings> {
  return withClient(url, async (client) => {
    const value = async (sql: string) => String(Object.values((await client.query(sql)).rows[0])[0]);
    return { version: await value('select version()'), fsync: await value('show fsync'), synchronousCommit: await value('show synchronous_commit') };
  });
}

async function withClient<T>(url: string, use: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

function databaseUrl(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

function hidePassword(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}
