/**
 * Durable steps (`ctx.step()`, worker/durable-steps.ts): the results a job's handler recorded
 * in `job_steps`, one row per (job, step name), read back by the job's later attempts. Steps
 * are rare: none of this is on the path of a job that has none. Rows go with the job's
 * history: the cleaner and deleteJob delete them (sql/maintenance.ts, sql/operations.ts), and
 * so do the releases of completions that are not kept (sql/release.ts), remove_job() and an
 * add_job() that replaces the job. `s` is the quoted schema.
 */
export function createStepQueries(s: string) {
  return {
    /** $1 job id: the steps its earlier attempts recorded, each result as JSON text (SQL null: the step returned undefined). */
    loadJobSteps: `select name, result::text as result from ${s}.job_steps where job_id = $1::bigint`,

    /**
     * Records step $2 of job $1 with result $3 (JSON text, or null for undefined), only while
     * worker $4 holds the job (a worker that lost it records nothing) and only if no attempt
     * recorded that step first (`recorded` 0 either way: readJobStep tells which). A select
     * around the insert, so that a caller's EntityManager returns its rows as a select's.
     */
    recordJobStep: `
      with recorded as (
        insert into ${s}.job_steps (job_id, name, result)
        select $1::bigint, $2::text, $3::jsonb
        where exists (select 1 from ${s}.jobs j where j.id = $1::bigint and j.locked_by is not distinct from $4::text)
        on conflict (job_id, name) do nothing
        returning 1
      )
      select count(*)::int as recorded from recorded`,

    /** $1 job id, $2 step name: the step's result as JSON text, if it was recorded. */
    readJobStep: `select result::text as result from ${s}.job_steps where job_id = $1::bigint and name = $2::text`,

    /** $1 job id: its steps for the dashboard, in the order they were recorded; results as JSON text (SQL null: undefined). */
    listJobSteps: `select name, created_at, result::text as result from ${s}.job_steps where job_id = $1::bigint order by created_at, name`,
  };
}
