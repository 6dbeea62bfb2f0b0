import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect } from '../support/database';
import { waitFor } from '../support/wait';

const CLAIM = createQueries('job_queue').claimJobs;
const PAUSE_KEY = 4242;
/** Where the pause goes: the queued walk, which every claim runs after its snapshot and before it locks a queue head. */
const PAUSE_ANCHOR = 'j.queue_name is not null and j.run_at <= now()';

/**
 * The claim, made to wait (on an advisory lock the test holds) after it took its snapshot and
 * before it locks the heads it chose, so that the test can change a head in between, as a
 * concurrent add_job or release does when it commits during a claim.
 */
function pausedClaim(): string {
  assert.ok(CLAIM.includes(PAUSE_ANCHOR), 'the claim still walks queued jobs where the pause goes');
  return CLAIM.replace(PAUSE_ANCHOR, `(select true from pg_advisory_xact_lock_shared(${PAUSE_KEY})) and ${PAUSE_ANCHOR}`);
}

/**
 * Claims that overlap: another worker's claim in flight, or a head changed while a claim runs.
 * What the claim before migration 5 did, one ordered walk locking as it went and rechecking
 * each row it locked, is what these expect.
 */
describe('claims beside other claims and changes', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  let a: Client;
  let b: Client;
  let c: Client;

  before(async () => {
    ({ db, sql, t } = await openTestApp('claim_collisions', { jobQueue: { worker: false, externalTasks: '*' } }));
    a = await connect(db.url);
    b = await connect(db.url);
    c = await connect(db.url);
  });
  after(async () => {
    await a?.end();
    await b?.end();
    await c?.end();
    await closeTestApp({ db, sql, t });
  });
  beforeEach(async () => {
    await sql.query('truncate job_queue.jobs, job_queue.finished_jobs, job_queue.job_queues, job_queue.workers cascade');
    await sql.query(`insert into job_queue.workers (id) values ('w-a'), ('w-b')`);
  });
  afterEach(async () => {
    await a.query('rollback');
    await b.query('rollback');
    await sql.query('select pg_advisory_unlock_all()');
  });

  /** Jobs of task 'work', due `minutesAgo` minutes ago plus n ms, in queue `queue(n)` (null: none); their ids in order. */
  const add = async (count: number, minutesAgo: number, queue: (n: number) => string | null) =>
    (
      await sql.query<{ id: string }>(
        `select j.id::text from generate_series(1, $1::int) g
           cross join lateral job_queue.add_job('work', queue_name => ($3::text[])[g], run_at => now() - $2::int * interval '1 minute' + g * interval '1 millisecond') j
         order by j.id`,
        [count, minutesAgo, Array.from({ length: count }, (_, n) => queue(n + 1))],
      )
    ).rows.map((r) => r.id);
  const claimedIds = (rows: Array<{ id: string | number }>) => rows.map((r) => String(r.id)).sort((x, y) => Number(x) - Number(y));

  it('a claim running beside one that is taking the first heads takes the next heads', async () => {
    const heads = await add(6, 10, (n) => `q${n}`);
    await a.query('begin');
    const first = await a.query(CLAIM, [['work'], [], 3, 'w-a', 3, []]);
    assert.deepEqual(claimedIds(first.rows), heads.slice(0, 3), "w-a's claim (not committed yet) takes the first three heads");

    const second = await b.query(CLAIM, [['work'], [], 3, 'w-b', 3, []]);
    assert.deepEqual(claimedIds(second.rows), heads.slice(3), 'w-b walks past the heads w-a is taking to the next three, as the walk before migration 5 did');
    assert.equal(second.rows[0]?.candidate_count, 3, 'and does not report that nothing else waits');
  });

  it('a claim that takes unqueued jobs does not keep the queue heads it passed over from a claim beside it', async () => {
    const unqueued = await add(10, 20, () => null);
    const heads = await add(10, 10, (n) => `q${n}`);
    await a.query('begin');
    const first = await a.query(CLAIM, [['work'], [], 10, 'w-a', 10, []]);
    assert.deepEqual(claimedIds(first.rows), unqueued, "w-a's claim (not committed yet) takes the ten unqueued jobs, due first");

    const second = claimedIds((await b.query(CLAIM, [['work'], [], 10, 'w-b', 10, []])).rows);
    // The walk before migration 5 locked only what it took: w-b got all ten heads. One row
    // looked at next (and locked) by w-a's claim is allowed for.
    assert.ok(second.length >= 9 && second.every((id) => heads.includes(id)), `w-b takes the heads w-a's claim passed over: ${JSON.stringify(second)} of ${JSON.stringify(heads)}`);
  });

  /** Claims of `size` by w-a and w-b, each left open, then by w-c beside them: the rows each got. */
  async function threeClaimsAtOnce(size: number) {
    await sql.query(`insert into job_queue.workers (id) values ('w-c')`);
    await a.query('begin');
    const first = (await a.query(CLAIM, [['work'], [], size, 'w-a', size, []])).rows;
    await b.query('begin');
    const second = (await b.query(CLAIM, [['work'], [], size, 'w-b', size, []])).rows;
    const third = await c.query(CLAIM, [['work'], [], size, 'w-c', size, []]);
    return { first, second, third };
  }

  // Known gaps of the claim since migration 5 (docs/maintainers.md, "Claim locking"): the claim
  // beside comes up short until a NOTIFY or its worker's next poll. Kept as todo so that they
  // run, and say so, until the claim merges its two locking walks lazily.
  const KNOWN_GAP = 'known gap: a claim beside one taking heads can come up short (docs/maintainers.md, "Claim locking")';

  it('a claim that takes queue heads does not keep the unqueued jobs it passed over from a claim beside it', { todo: KNOWN_GAP }, async () => {
    const heads = await add(10, 20, (n) => `q${n}`);
    const unqueued = await add(10, 10, () => null);
    await a.query('begin');
    const first = await a.query(CLAIM, [['work'], [], 10, 'w-a', 10, []]);
    assert.deepEqual(claimedIds(first.rows), heads, "w-a's claim (not committed yet) takes the ten heads, due first");

    const second = await b.query(CLAIM, [['work'], [], 10, 'w-b', 10, []]);
    const ids = claimedIds(second.rows);
    // The walk before migration 5 locked only what it took: w-b got all ten unqueued jobs. One
    // row looked at next (and locked) by w-a's claim is allowed for, as for the heads above.
    assert.ok(ids.length >= 9 && ids.every((id) => unqueued.includes(id)), `w-b takes the unqueued jobs w-a's claim passed over: ${JSON.stringify(ids)} of ${JSON.stringify(unqueued)}`);
  });

  it('claims beside two others that are taking the first heads take the next ones', { todo: KNOWN_GAP }, async () => {
    const heads = await add(9, 10, (n) => `q${n}`);
    const { first, second, third } = await threeClaimsAtOnce(3);
    assert.deepEqual(claimedIds(first), heads.slice(0, 3));
    assert.deepEqual(claimedIds(second), heads.slice(3, 6));
    assert.deepEqual(claimedIds(third.rows), heads.slice(6), 'w-c walks past the six heads the two claims beside it are taking, as the walk before migration 5 did');
    assert.equal(third.rows[0]?.candidate_count, 3, 'and does not report that nothing else waits');
  });

  it('claims beside two others that are taking the first unqueued jobs take the next ones, however many are taken ahead', async () => {
    const jobs = await add(30, 10, () => null);
    const { first, second, third } = await threeClaimsAtOnce(10);
    assert.deepEqual(claimedIds(first), jobs.slice(0, 10));
    assert.deepEqual(claimedIds(second), jobs.slice(10, 20));
    assert.deepEqual(claimedIds(third.rows), jobs.slice(20), 'w-c walks past the twenty jobs the two claims beside it are taking');
    assert.equal(third.rows[0]?.candidate_count, 10, 'and does not report that nothing else waits');
  });

  /** Runs `change` (committed) while w-b's claim waits between its snapshot and its locks; w-b's claimed ids. */
  async function claimAcross(change: () => Promise<unknown>, forbidden: string[] = []): Promise<string[]> {
    await sql.query('select pg_advisory_lock($1)', [PAUSE_KEY]);
    const claim = b.query(pausedClaim(), [['work'], forbidden, 10, 'w-b', 10, []]);
    claim.catch(() => undefined); // awaited below
    await waitFor('the claim to wait at its pause', async () => (await sql.query(`select 1 from pg_locks where locktype = 'advisory' and objid = $1 and objsubid = 1 and not granted`, [PAUSE_KEY])).rowCount === 1);
    await change();
    await sql.query('select pg_advisory_unlock($1)', [PAUSE_KEY]);
    return claimedIds((await claim).rows);
  }

  /** add_job calls that replace the keyed job 'k' (the default key mode), each in a way that makes it no longer claimable by w-b. */
  const replacements = [
    { label: 'rescheduled for an hour later', call: `add_job('work', queue_name => 'q1', job_key => 'k', run_at => now() + interval '1 hour')`, forbidden: [] },
    { label: "given a task this worker does not run ('elsewhere')", call: `add_job('elsewhere', queue_name => 'q1', job_key => 'k', run_at => now() - interval '1 minute')`, forbidden: [] },
    { label: 'given a flag this worker must not run', call: `add_job('work', queue_name => 'q1', job_key => 'k', run_at => now() - interval '1 minute', flags => '{paused}')`, forbidden: ['paused'] },
  ];
  for (const { label, call, forbidden } of replacements) {
    it(`a keyed head replaced by add_job while a claim runs, ${label}, is not claimed`, async () => {
      await sql.query(`select job_queue.add_job('work', queue_name => 'q1', job_key => 'k', run_at => now() - interval '5 minutes')`);
      const claimed = await claimAcross(() => sql.query(`select job_queue.${call}`), forbidden);
      const [job] = (await sql.query(`select task_identifier, flags, run_at > now() as later, locked_by from job_queue.jobs where key = 'k'`)).rows;
      assert.deepEqual(claimed, [], `nothing claimed; the job: ${JSON.stringify(job)}`);
      assert.equal(job.locked_by, null);
    });
  }

  it('a keyed head moved by add_job into a queue whose head waits, while a claim runs, is not claimed beside that head', async () => {
    const [waitingHead] = await add(1, 10, () => 'q2');
    const [moved] = (await sql.query(`select id::text from job_queue.add_job('work', queue_name => 'q1', job_key => 'k', run_at => now() - interval '5 minutes')`)).rows.map((r) => r.id);
    const claimed = await claimAcross(() =>
      sql.query(`select job_queue.add_job('work', queue_name => 'q2', job_key => 'k', run_at => now() - interval '1 minute')`),
    );
    const running = (await sql.query(`select id::text, queue_name from job_queue.jobs where locked_by = 'w-b' order by id`)).rows;
    assert.deepEqual(claimed, [waitingHead], `only q2's head is claimed, not also the job moved in behind it (${moved}): ${JSON.stringify(running)}`);
  });
});
