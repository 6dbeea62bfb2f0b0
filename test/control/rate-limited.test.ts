import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { waitFor } from '../support/wait';
import { processSuite } from '../support/process-suite';

/**
 * `ctx.rateLimited(retryAfter)` (issue 27.3; test/support/worker-process.ts `partner`): a
 * handler told 429 ends its attempt without counting it, and the task starts nothing on any
 * worker until `retryAfter` is over, while other tasks run; then its jobs run, the limited
 * one among them.
 */
describe('ctx.rateLimited across worker processes', () => {
  const s = processSuite('rate_limited', { externalTasks: ['partner', 'record'], tables: ['create table partner_runs (job_id bigint not null, pid int not null, attempt int not null, started_at timestamptz not null)', 'create table runs (job_id bigint not null, pid int not null, attempt int not null)'] });

  const partnerRuns = async (ids: string[]) =>
    (await s.sql.query<{ job_id: string; pid: number; started_at: Date }>('select job_id::text, pid, started_at from partner_runs where job_id = any($1::bigint[]) order by started_at', [ids])).rows;

  it('holds the task on every worker until retryAfter, without spending the attempt; other tasks run meanwhile', async () => {
    const workers = await s.start(2, { concurrency: 4, env: { LIMITED: '1', PRINT_PAUSES: '1' } });
    const limited = await s.t.jobs.add('partner' as never, { retryAfter: 5000 } as never);
    await waitFor('the first run to be told 429', async () => (await partnerRuns([limited.id])).length === 1);
    let until: Date | undefined;
    await waitFor('the hold to be listed', async () => {
      until = (await s.t.jobs.listPaused()).find((p) => p.kind === 'task' && p.name === 'partner')?.until;
      return until !== undefined;
    });
    // A pause holds the claims that begin after a worker has read it (control/controls.ts): a
    // claim begun before the hold's notification could take jobs added after the hold's commit
    // (3 starts during the hold, once, on an overloaded machine). So the jobs are added once
    // every process has read the hold, as pause.test.ts does.
    await Promise.all(workers.map((w) => w.waitForOutput('the hold read', /^paused task:partner$/m)));
    const held = (await s.t.jobs.addMany(Array.from({ length: 6 }, (_, n) => ({ identifier: 'partner' as never, payload: { n } as never })))).map((job) => job.id);
    const others = (await s.t.jobs.addMany(Array.from({ length: 6 }, (_, n) => ({ identifier: 'record' as never, payload: { n } as never })))).map((job) => job.id);
    await waitFor('the other task to run during the hold', async () => (await s.sql.query('select 1 from runs where job_id = any($1::bigint[])', [others])).rowCount === others.length);
    const { rows: during } = await s.sql.query<{ ran: number; before: boolean }>('select count(*)::int as ran, now() < $2 as before from partner_runs where job_id = any($1::bigint[])', [held, until]);
    assert.equal(during[0].before, true, 'the other task ran before the hold ended (a slower machine would not show the hold)');
    assert.equal(during[0].ran, 0, 'no job of the held task started during the hold');

    await waitFor('the held jobs and the limited one to run after the hold', async () => (await partnerRuns([...held, limited.id])).length === held.length + 2, 30_000);
    const runs = await partnerRuns([...held, limited.id]);
    const early = runs.slice(1).filter((run) => run.started_at < until!);
    assert.deepEqual(early, [], `nothing started before the hold's end ${until!.toISOString()}`);
    const ended = async () => (await s.sql.query<{ state: string; attempts: number }>('select state, attempts from job_queue.finished_jobs where id = $1', [limited.id])).rows;
    await waitFor('the limited job to be finished', async () => (await ended()).length === 1);
    assert.deepEqual(await ended(), [{ state: 'completed', attempts: 1 }], 'the rate-limited attempt was not counted');
    await waitFor('the hold that is over to be deleted', async () => (await s.sql.query('select 1 from job_queue.pauses')).rowCount === 0);
  });

  it('a pause during a hold stays a pause after the hold would have ended, and a resume lifts both', async () => {
    await s.start(1, { concurrency: 2, env: { LIMITED: '1' } });
    const limited = await s.t.jobs.add('partner' as never, { retryAfter: 3000 } as never);
    let until: Date | undefined;
    await waitFor('the hold to be listed', async () => {
      until = (await s.t.jobs.listPaused()).find((p) => p.name === 'partner')?.until;
      return until !== undefined;
    });
    await s.t.jobs.pauseTask('partner');
    const paused = await s.t.jobs.listPaused();
    assert.deepEqual(paused.map((p) => [p.kind, p.name, p.until]), [['task', 'partner', undefined]], 'the hold became a pause with no end');
    await waitFor("the hold's end to pass, by the server's clock", async () => (await s.sql.query<{ over: boolean }>("select now() > $1::timestamptz + interval '500 milliseconds' as over", [until])).rows[0].over);
    const [marker] = await s.t.jobs.addMany([{ identifier: 'record' as never, payload: {} as never }]);
    await waitFor('a job of another task to run after that', async () => (await s.sql.query('select 1 from runs where job_id = $1', [marker.id])).rowCount === 1);
    assert.equal((await partnerRuns([limited.id])).length, 1, 'the paused task did not run again');
    await s.t.jobs.resumeTask('partner');
    await waitFor('the job to run after the resume', async () => (await partnerRuns([limited.id])).length === 2);
  });

  it("a bad retryAfter fails the attempt with JQ_INVALID_LIMIT and holds nothing", async () => {
    await s.start(1, { concurrency: 2, env: { LIMITED: '1' } });
    const job = await s.t.jobs.add('partner' as never, { retryAfter: -5 } as never, { maxAttempts: 1 });
    await waitFor('the attempt to fail', async () => (await s.sql.query("select 1 from job_queue.finished_jobs where id = $1 and state = 'failed'", [job.id])).rowCount === 1);
    const { rows } = await s.sql.query<{ last_error: string }>('select last_error from job_queue.finished_jobs where id = $1', [job.id]);
    assert.match(rows[0].last_error, /JQ_INVALID_LIMIT/);
    assert.deepEqual(await s.t.jobs.listPaused(), []);
  });
});
