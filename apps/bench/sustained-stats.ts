import { readdirSync, readFileSync } from 'node:fs';
import type { Queryable } from './jobs-table';
import { percentile } from './suite';

/** One table's size and dead rows, as PostgreSQL reports them (bytes; dead rows from its statistics, a little behind). */
export interface TableSize {
  heapBytes: number;
  indexBytes: number;
  deadRows: number;
}

/** Percentiles of the waits from add to handler start (ms); absent when no job started. */
export interface Waits {
  count: number;
  p50: number;
  p99: number;
  p999: number;
}

/** `values`' percentiles, or undefined for none. */
export function waitsOf(values: number[]): Waits | undefined {
  if (values.length === 0) return undefined;
  const sorted = Array.from(Float64Array.from(values).sort());
  return { count: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), p999: percentile(sorted, 99.9) };
}

/** Each of `tables` (label → qualified name) as it is now. */
export async function readTableSizes(db: Queryable, tables: Record<string, string>): Promise<Record<string, TableSize>> {
  const sizes: Record<string, TableSize> = {};
  for (const [label, name] of Object.entries(tables)) {
    const [row] = (await db.query(
      `select pg_table_size($1::regclass)::float8 as heap, pg_indexes_size($1::regclass)::float8 as indexes,
         coalesce((select n_dead_tup from pg_stat_user_tables where relid = $1::regclass), 0)::float8 as dead`,
      [name],
    )) as Array<{ heap: number; indexes: number; dead: number }>;
    sizes[label] = { heapBytes: row.heap, indexBytes: row.indexes, deadRows: row.dead };
  }
  return sizes;
}

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/**
 * CPU time used so far by the processes named postgres on this machine (ms): the server's share
 * of the load, the machine being the bench's own. The live ones' own time, and the postmaster's
 * count of its ended children (a backend whose connection closed is counted there once the
 * postmaster has reaped it). 0 where /proc is not there.
 */
export function postgresCpuMs(): number {
  let total = 0;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((entry) => /^\d+$/.test(entry));
  } catch {
    return 0;
  }
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (!stat.includes('(postgres)')) continue;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime + stime, and cutime + cstime: the reaped children's
      total += ((Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * 1000) / TICKS_PER_SECOND;
    } catch {
      // the process ended while being read
    }
  }
  return total;
}
