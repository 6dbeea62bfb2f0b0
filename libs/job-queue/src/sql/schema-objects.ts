/**
 * What a schema holds, as the CLI's `validate` compares it (beside the data path): one row
 * per table, column, function, index and trigger of schema $1, each with a `kind`, a `name`,
 * the `detail` that must match, and the table it belongs to (`parent`; null for tables and functions). Not per schema like the other statements: the schema is a
 * parameter, so that one statement reads both the schema in use and the scratch schema the
 * migrations are replayed into (cli/expected-schema.ts).
 */
export const SCHEMA_OBJECTS = `
  select 'table' as kind, c.relname::text as name, null::text as detail, null::text as parent
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = $1 and c.relkind in ('r', 'p')
  union all
  select 'column', c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod) || case when a.attnotnull then ' not null' else '' end, c.relname
  from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = $1 and c.relkind in ('r', 'p') and a.attnum > 0 and not a.attisdropped
  union all
  select 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', null, null
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace
  where n.nspname = $1
  union all
  select 'index', c.relname, case when i.indisvalid then 'valid' else 'invalid' end, t.relname
  from pg_index i join pg_class c on c.oid = i.indexrelid join pg_class t on t.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = $1
  union all
  select 'trigger', c.relname || '.' || t.tgname, null, c.relname
  from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = $1 and not t.tgisinternal
  order by 1, 2`;

/** One row of SCHEMA_OBJECTS. */
export interface SchemaObjectRow {
  kind: 'table' | 'column' | 'function' | 'index' | 'trigger';
  name: string;
  detail: string | null;
  parent: string | null;
}
