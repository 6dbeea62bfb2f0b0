/** Double-quotes a validated identifier, so case is kept and reserved words are safe. */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/**
 * A string as an SQL literal, for a statement sent without parameters (worker/claim-connection.ts
 * opening): quotes doubled, and backslashes too in an E'' literal, whatever
 * standard_conforming_strings says.
 */
export function quoteLiteral(value: string): string {
  const quoted = value.replace(/'/g, "''");
  return value.includes('\\') ? ` E'${quoted.replace(/\\/g, '\\\\')}'` : `'${quoted}'`;
}

/**
 * `date` as a timestamptz literal PostgreSQL reads, any year: toISOString writes years past 9999
 * as +010000 and years before 1 as -000001 (year 0 being 1 BC), which it does not read.
 */
export function timestampLiteral(date: Date): string {
  const year = date.getUTCFullYear();
  const rest = date.toISOString().slice(-20); // -MM-DDTHH:mm:ss.sssZ
  return year >= 1 ? quoteLiteral(`${String(year).padStart(4, '0')}${rest}`) : quoteLiteral(`${String(1 - year).padStart(4, '0')}${rest} BC`);
}

/** The channel add_job notifies and workers LISTEN on. */
export function jobsChannel(schema: string): string {
  return `${schema}:jobs`;
}

/** The channel a job's end is told on (payload: the ids, comma-separated; '*' when too many to list): waitForJob() listens. */
export function finishedChannel(schema: string): string {
  return `${schema}:finished`;
}

/** The channel a cancel of a job some worker holds is told on (payload: the id): workers listen. */
export function cancelChannel(schema: string): string {
  return `${schema}:cancel`;
}

/** The channel cluster-wide job events are published on (payload: a JSON array of events, sql/queue-events.ts): subscribed processes listen. */
export function eventsChannel(schema: string): string {
  return `${schema}:events`;
}

/**
 * The first key of a two-int advisory lock taken for `purpose` in the schema quoted `s` (the
 * second is the hash of what is locked): each purpose a key space of its own, apart from the
 * library's other advisory locks.
 */
export function advisoryLockClass(s: string, purpose: string): string {
  return `hashtext(${quoteLiteral(`${s}:${purpose}`)})`;
}
