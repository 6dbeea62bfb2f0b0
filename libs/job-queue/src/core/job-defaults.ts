/**
 * The defaults of a job whose spec (and task) leaves them out, in one place: the statements
 * written here (sql/add.ts) and the jobs built without reading their row back
 * (service/added-jobs.ts, testing/) take them from here. The table's column defaults and
 * add_job() in migrations/ carry the same values as literals (applied SQL, never edited).
 */

/** Attempts before a job fails for good. */
export const DEFAULT_MAX_ATTEMPTS = 25;

/** A job's priority: smaller runs first. */
export const DEFAULT_PRIORITY = 0;
