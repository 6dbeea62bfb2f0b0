/**
 * The names the migrations write into the schema, as they were when each migration was
 * written: the migrations import nothing from the library, so that a later change there
 * never changes what an applied migration did (libs/job-queue/src/sql/identifier.ts holds
 * the library's own copy; the tests check that the two agree).
 */

/** Double-quotes a validated identifier, so case is kept and reserved words are safe. */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** The channel add_job notifies and workers LISTEN on. */
export const jobsChannel = (schema: string) => `${schema}:jobs`;

/** The channel a job's end is told on (waitForJob listens). */
export const finishedChannel = (schema: string) => `${schema}:finished`;

/** The channel a cancel of a job some worker holds is told on. */
export const cancelChannel = (schema: string) => `${schema}:cancel`;

/** The channel cluster-wide job events are published on (flows' events since Flows1764300000000). */
export const eventsChannel = (schema: string) => `${schema}:events`;
