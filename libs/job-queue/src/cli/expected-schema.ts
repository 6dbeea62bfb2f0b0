import { randomBytes } from 'node:crypto';
import type { QueryRunner } from 'typeorm';
import { SCHEMA_OBJECTS, type SchemaObjectRow } from '../sql/schema-objects';
import type { CliConnection } from './connection';
import { knownMigrations } from './migration-plan';

/** A way the schema differs from what this version's migrations make. */
export interface Difference {
  kind: SchemaObjectRow['kind'];
  name: string;
  problem: 'missing' | 'differs' | 'invalid';
  expected: string | null;
  found: string | null;
}

/** The schema compared with what this version's migrations make of an empty one. */
export type SchemaComparison = { compared: true; differences: Difference[] } | { compared: false; reason: string };

/**
 * What this version expects, derived rather than listed: its migrations are replayed into a
 * scratch schema inside a transaction that is rolled back (nothing is left behind, nothing
 * else is locked), the scratch schema's tables, columns, functions, indexes and triggers
 * (sql/schema-objects.ts) are read, and compared with the schema's own. A migration added
 * later is thus checked without this file changing. Objects the schema has beyond those are
 * not differences: a newer version, or the app, may have added them. Needs the privilege to
 * create a schema in the database; without it, nothing is compared (the caller says so).
 */
export async function compareWithMigrations(connection: CliConnection): Promise<SchemaComparison> {
  const [{ may }] = await connection.query<{ may: boolean }>(`select has_database_privilege(current_database(), 'CREATE') as may`);
  if (!may) return { compared: false, reason: `this role may not create a schema in the database, which replaying the migrations needs: compared the ledger only` };
  const scratch = `jq_validate_${randomBytes(6).toString('hex')}`;
  const runner = connection.dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.startTransaction();
    try {
      for (const { Migration } of knownMigrations(scratch)) await new Migration().up(runner);
      const expected = await objects(runner, scratch, connection.schema);
      const found = await objects(runner, connection.schema, connection.schema);
      return { compared: true, differences: differences(expected, found) };
    } finally {
      await runner.rollbackTransaction();
    }
  } finally {
    await runner.release();
  }
}

/** The objects of `schema` by kind and name, the scratch schema's name written as `as` (a function's argument types may name it). */
async function objects(runner: QueryRunner, schema: string, as: string): Promise<Map<string, SchemaObjectRow>> {
  const rows = (await runner.query(SCHEMA_OBJECTS, [schema])) as SchemaObjectRow[];
  const rename = (text: string | null) => (text === null || schema === as ? text : text.split(schema).join(as));
  return new Map(rows.map((row) => [`${row.kind} ${rename(row.name)}`, { ...row, name: rename(row.name)!, detail: rename(row.detail), parent: rename(row.parent) }]));
}

/** What is missing or differs; the columns, indexes and triggers of a missing table are that table's difference, not listed apart. */
function differences(expected: Map<string, SchemaObjectRow>, found: Map<string, SchemaObjectRow>): Difference[] {
  const result: Difference[] = [];
  const missingTables = new Set([...expected.values()].filter((o) => o.kind === 'table' && !found.has(`table ${o.name}`)).map((o) => o.name));
  for (const [key, want] of expected) {
    if (want.parent !== null && missingTables.has(want.parent)) continue;
    const have = found.get(key);
    const base = { kind: want.kind, name: want.name, expected: want.detail };
    if (!have) result.push({ ...base, problem: 'missing', found: null });
    else if (want.kind === 'index' && have.detail === 'invalid') result.push({ ...base, problem: 'invalid', found: have.detail });
    else if (want.detail !== have.detail) result.push({ ...base, problem: 'differs', found: have.detail });
  }
  return result;
}
