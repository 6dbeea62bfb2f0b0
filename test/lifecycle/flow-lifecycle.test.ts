import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { PermanentJobError, Task, type JobContext, type QueueEvent } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { NotificationRecorder } from '../support/notifications';
import { waitFor, waitForValue } from '../support/wait';

/** Jobs whose handler waits until the test lets it go (by its ref). */
const gates = new Map<string, () => void>();

@Injectable()
class Steps {
  @Task('flow_step')
  async step(payload: { fail?: boolean }, ctx: JobContext) {
    if (ctx.job.flowRef?.startsWith('gate')) await new Promise<void>((resolve) => gates.set(ctx.job.flowRef!, resolve));
    if (payload.fail) throw new PermanentJobError('told to fail');
    return { ref: ctx.job.flowRef };
  }
}

describe('flows: events, retention and SQL', () => {
  let c: TestAppContext;
  const heard: QueueEvent[] = [];

  before(async () => {
    c = await openTestApp('flow_lifecycle', {
      providers: [Steps],
      jobQueue: { pollInterval: 100, heartbeatInterval: 200, workerTimeout: 2_000, retention: { completed: 0, failed: '7d', cancelled: '7d' } },
    });
    c.t.jobs.queueEvents$.subscribe((event) => heard.push(event));
  });
  after(() => closeTestApp(c));

  it('flow:completed and flow:failed are heard by every listener, once, with the failed refs', async () => {
    await waitForValue(c.sql, 'the listener row', 'select count(*)::int from job_queue.event_listeners', 1);
    const good = await c.t.jobs.addFlow([{ ref: 'a', identifier: 'flow_step' }, { ref: 'b', identifier: 'flow_step', dependsOn: ['a'] }]);
    const bad = await c.t.jobs.addFlow([{ ref: 'x', identifier: 'flow_step', payload: { fail: true } }, { ref: 'y', identifier: 'flow_step', dependsOn: ['x'] }]);
    await waitFor('both flows to be heard', () => heard.filter((e) => e.type.startsWith('flow:')).length >= 2);
    const flows = heard.filter((e) => e.type.startsWith('flow:'));
    assert.deepEqual(
      flows.map((e) => ({ type: e.type, flowId: (e as { flowId: string }).flowId, refs: (e as { refs?: string[] }).refs, task: e.taskIdentifier })).sort((p, q) => p.type.localeCompare(q.type)),
      [
        { type: 'flow:completed', flowId: good.flowId, refs: undefined, task: 'flow_step' },
        { type: 'flow:failed', flowId: bad.flowId, refs: ['x', 'y'], task: 'flow_step' },
      ],
    );
  });

  it("retention keeps a flow's finished jobs while any of them is unfinished (retention.completed 0)", async () => {
    const flow = await c.t.jobs.addFlow([{ ref: 'first', identifier: 'flow_step' }, { ref: 'gate', identifier: 'flow_step', dependsOn: ['first'] }]);
    await waitFor('the gate step to start', () => gates.has('gate'));
    // a positive sign that the cleaner ran after `first` finished: a job added alone, completed since, is deleted
    const alone = await c.t.jobs.add('flow_step', {});
    await waitForValue(c.sql, 'the cleaner to delete a completed job added alone', 'select count(*)::int from job_queue.finished_jobs where id = $1', 0, [alone.id]);
    assert.equal((await c.t.jobs.getJob(flow.jobs.first.id))?.state, 'completed', "the flow's completed job is kept");
    gates.get('gate')!();
    await waitForValue(c.sql, 'the flow to end', 'select state from job_queue.flows where id = $1', 'completed', [flow.flowId]);
    await waitForValue(c.sql, "the flow's jobs to go once it ended", 'select count(*)::int from job_queue.finished_jobs where flow_id = $1', 0, [flow.flowId]);
  });

  it("deleteJob of a blocked job: the flow sweep settles its dependents as if it had been cancelled", async () => {
    const later = new Date(Date.now() + 3_600_000);
    const flow = await c.t.jobs.addFlow([
      { ref: 'a', identifier: 'flow_step', runAt: later },
      { ref: 'b', identifier: 'flow_step', dependsOn: ['a'] },
      { ref: 'c', identifier: 'flow_step', dependsOn: ['b'] },
    ]);
    await c.t.jobs.deleteJob(flow.jobs.b.id);
    assert.equal(await c.t.jobs.getJob(flow.jobs.b.id), null);
    await waitForValue(c.sql, "c to fail, b's deletion settled by the sweep", 'select last_error from job_queue.finished_jobs where id = $1', 'JQ_DEPENDENCY_FAILED: b was cancelled', [flow.jobs.c.id]);
    await c.t.jobs.cancelFlow(flow.flowId);
  });

  it('addFlow wakes the workers (a NOTIFY on the jobs channel for its roots), and completeJobs tells waitForJob at once', async () => {
    const jobsChannel = await NotificationRecorder.listen(c.db.url, 'job_queue:jobs');
    try {
      await jobsChannel.barrier();
      const later = new Date(Date.now() + 3_600_000);
      // b holds the flow open (a gate) while a is read: retention.completed 0 deletes a flow's jobs once it ended
      const flow = await c.t.jobs.addFlow([{ ref: 'a', identifier: 'flow_step', runAt: later }, { ref: 'gate_b', identifier: 'flow_step', dependsOn: ['a'] }]);
      assert.deepEqual(await jobsChannel.barrier(), [], 'a root not due yet wakes nobody');
      await c.t.jobs.addFlow([{ ref: 'now', identifier: 'flow_step' }]);
      assert.deepEqual(await jobsChannel.barrier(), [''], 'a due root wakes the workers');
      // waitForJob reads a job again only when the finished channel names it: completeJobs must
      const waited = c.t.jobs.waitForJob(flow.jobs.a.id, { timeout: 20_000 });
      await c.t.jobs.completeJobs([flow.jobs.a.id], { result: { ok: 1 } });
      assert.deepEqual((await waited).result, { ok: 1 });
      await waitFor('b to start once a completed', () => gates.has('gate_b'));
      gates.get('gate_b')!();
      await waitForValue(c.sql, 'the flow to end', 'select state from job_queue.flows where id = $1', 'completed', [flow.flowId]);
      await waitForValue(c.sql, "the flow's jobs to go once it ended", 'select count(*)::int from job_queue.finished_jobs where flow_id = $1', 0, [flow.flowId]);
      await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 20_000 }), (error: Error & { code?: string }) => {
        assert.equal(error.code, 'JQ_FLOW_NOT_FOUND', 'a completed flow whose jobs are gone has no results to give, as a job that is gone');
        return true;
      });
    } finally {
      await jobsChannel.end();
    }
  });

  it('add_flow(jsonb) starts a flow from SQL (a trigger), and refuses a bad one with JQ_INVALID_FLOW', async () => {
    await c.sql.query(`create table orders (id int primary key)`);
    await c.sql.query(`
      create function order_flow() returns trigger language plpgsql as $$
      begin
        perform job_queue.add_flow(jsonb_build_array(
          jsonb_build_object('ref', 'charge', 'identifier', 'flow_step', 'payload', jsonb_build_object('order', new.id)),
          jsonb_build_object('ref', 'ship', 'identifier', 'flow_step', 'dependsOn', jsonb_build_array('charge'))));
        return new;
      end $$`);
    await c.sql.query(`create trigger orders_flow after insert on orders for each row execute function order_flow()`);
    await c.sql.query(`insert into orders values (1)`);
    const { rows } = await c.sql.query(`select f.id::text from job_queue.flows f join job_queue.blocked_jobs b on b.flow_id = f.id where b.flow_ref = 'ship'`);
    assert.equal(rows.length, 1);
    await c.t.jobs.waitForFlow(rows[0].id, { timeout: 30_000 });

    for (const [steps, message] of [
      [`[]`, /JQ_INVALID_FLOW: a flow needs at least one step/],
      [`[{"ref":"a","identifier":"flow_step"},{"ref":"a","identifier":"flow_step"}]`, /JQ_INVALID_FLOW: the ref a is used twice/],
      [`[{"ref":"b","identifier":"flow_step","dependsOn":["a"]},{"ref":"a","identifier":"flow_step"}]`, /JQ_INVALID_FLOW: step b depends on a, which is no step before it/],
    ] as const) {
      await assert.rejects(c.sql.query(`select job_queue.add_flow($1::jsonb)`, [steps]), message);
    }
  });
});
