/**
 * The test app of worker-processes.ts: a worker in a process of its own, for tests that
 * kill or signal processes. It prints `ready <workerId>` once its worker has started.
 * Tasks: `record` (inserts the job id, the pid and the attempt into the test's `runs`
 * table: job_id, pid, attempt), `sleep` ({ ms }; prints `started sleep <id>` and
 * `finished sleep <id>`; ignores its signal, as a stuck handler does), `nap` ({ ms };
 * like `record` once it has slept, honouring its signal), `await-cancel` (records `started` in
 * the test's `handler_events` table: job_id, pid, event, code; waits for its signal, records
 * `aborted` with the abort reason's code, and throws that reason), `ignore-cancel` (records
 * `started`, and `aborted` with the reason's code if its signal aborts, but carries on: once
 * the test inserts its job id into the test's `handler_go` table (job_id) it records
 * `returned` and returns `{ ignored: true }`), `abort-then-settle` (`{ outcome }`: records
 * `started`; once its signal aborts records `aborted` with the code, reports progress, records
 * `settled` and returns or throws as `outcome` says), `scripted` (`{ result, fail, progress }`:
 * fails its first `fail` attempts, retried 10 ms later; reports `progress` and waits for
 * `handler_go`; returns `result`) and `noop` (does nothing: quick jobs, which teach
 * the worker to prefetch), `tx-write` (transaction: true; inserts into the test's `tx_writes`
 * table: job_id, pid, attempt, through ctx.manager, records `wrote`, then waits for `handler_go`
 * like `ignore-cancel`, records `returned` and returns `{ pid }`), `two-steps` (durable steps:
 * step `first` inserts into the test's `step_effects` table (job_id, step, pid, attempt); then
 * the handler records `between` and waits for `handler_go`; step `second` inserts likewise;
 * returns both steps' results, each `{ pid, attempt }` of the run that did it), `tx-step`
 * (`{ hold: 'inside' | 'after' }`: a transactional step `write` inserts into `step_effects`
 * through its manager and records `wrote`; with `inside` it then waits for `handler_go` before
 * returning, its transaction open; the handler records `stepped`, with `after` waits for
 * `handler_go` then, and returns `{ written }`); with CRON=1 also
 * `tick`, on an every-second `@Cron`, which inserts its tick (`_cron.ts` and `backfilled`),
 * the job id and the pid into the test's `ticks` table; `flow-step` records a flow's step in
 * the test's `flow_runs` table (see the task).
 * LIMITED=1 adds `limited` (see LimitedTasks).
 * Environment: DATABASE_URL, CONCURRENCY (default 4), CRON (`1`: schedule and run `tick`),
 * TRANSACTION_POOLING (`1`: the module's transactionPooling, DATABASE_URL being a pooler's) and
 * LISTEN_URL (its listenUrl, a direct connection string),
 * ADD_AT_START (`{"identifier", "payload"}`: once ready, the process adds that job itself and
 * prints `added <id> <state>`: a job its own worker may start at its add, localStart),
 * PRINT_PAUSES=1 (prints `paused <what>` when what its worker knows of the pauses changes: printPauses),
 * PRINT_LIMITS=<task> (prints `limits <json>` when the limits its worker knows set at run time for that task change: printLimits),
 * and the module's durations when set: HEARTBEAT_INTERVAL, WORKER_TIMEOUT, SHUTDOWN_GRACE
 * (ms). FLAGS_TABLE=1: the forbidden flags are read, at each claim, from the test's
 * `forbidden_flags` table, so a test can steer which process may claim a job (see
 * forbidden-flags.ts: its forbid() waits until the process has read the flag). The pool's
 * connections are named `worker-<pid>` in pg_stat_activity.
 * Warnings and errors are printed, so the worker's `<what> failed, retrying: …` lines are in
 * the output a test reads.
 */
import 'reflect-metadata';
import { Injectable, Module, type Provider } from '@nestjs/common';
import { Cron, CronExpression } from '@nestjs/schedule';
import { DataSource, type EntityManager } from 'typeorm';
import { NestFactory } from '@nestjs/core';
import { processTypeOrm } from './process-typeorm';
import { READ_FORBIDDEN_FLAGS } from './forbidden-flags';
import { JobQueueModule, JobQueueService, JobQueueWorker, Task, type CronPayload, type JobContext, type TransactionalJobContext } from '../../libs/job-queue/src';

@Injectable()
class ProcessTasks {
  constructor(private readonly dataSource: DataSource) {}

  /** Records which process ran which job, in the test's `runs` table. */
  @Task('record')
  async record(_payload: unknown, ctx: JobContext) {
    await this.dataSource.query('insert into runs (job_id, pid, attempt) values ($1, $2, $3)', [ctx.job.id, process.pid, ctx.job.attempts]);
  }

  @Task('nap')
  async nap(payload: { ms: number }, ctx: JobContext) {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, payload.ms);
      ctx.signal.addEventListener('abort', () => (clearTimeout(timer), reject(ctx.signal.reason)));
    });
    await this.record(payload, ctx);
  }

  /** Waits for its signal, as a well-behaved long job does, and throws the abort reason. */
  @Task('await-cancel')
  async awaitCancel(_payload: unknown, ctx: JobContext) {
    await this.event(ctx, 'started');
    const reason = await new Promise<unknown>((resolve) => {
      if (ctx.signal.aborted) resolve(ctx.signal.reason);
      else ctx.signal.addEventListener('abort', () => resolve(ctx.signal.reason), { once: true });
    });
    await this.event(ctx, 'aborted', (reason as { code?: string })?.code ?? null);
    throw reason;
  }

  /** Notes the abort but carries on until the test's go-ahead, then returns a value. */
  @Task('ignore-cancel')
  async ignoreCancel(_payload: unknown, ctx: JobContext) {
    await this.event(ctx, 'started');
    ctx.signal.addEventListener('abort', () => void this.event(ctx, 'aborted', (ctx.signal.reason as { code?: string })?.code ?? null), { once: true });
    while ((await this.dataSource.query('select 1 from handler_go where job_id = $1', [ctx.job.id])).length === 0) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await this.event(ctx, 'returned');
    return { ignored: true };
  }

  @Task('noop')
  async noop() {}

  /**
   * Fails its first `fail` attempts (retried after 10 ms), reports `progress` if given (and
   * then waits for the test's `handler_go` row), then returns `result`.
   */
  @Task('scripted', { retryDelay: () => 10 })
  async scripted(payload: { result?: unknown; fail?: number; progress?: number }, ctx: JobContext) {
    if (ctx.job.attempts <= (payload.fail ?? 0)) throw new Error(`attempt ${ctx.job.attempts} failed`);
    if (payload.progress !== undefined) {
      ctx.progress(payload.progress);
      while ((await this.dataSource.query('select 1 from handler_go where job_id = $1', [ctx.job.id])).length === 0) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
    return payload.result;
  }

  /**
   * Honours its signal, then tries to write what a run that ignores being fenced would:
   * records `started`; once aborted, records `aborted` with the reason's code, reports
   * progress, records `settled` and then returns (payload `{ outcome: 'complete' }`) or
   * throws (`'fail'`).
   */
  @Task('abort-then-settle')
  async abortThenSettle(payload: { outcome: 'complete' | 'fail' }, ctx: JobContext) {
    await this.event(ctx, 'started');
    const reason = await new Promise<unknown>((resolve) => ctx.signal.addEventListener('abort', () => resolve(ctx.signal.reason), { once: true }));
    await this.event(ctx, 'aborted', (reason as { code?: string })?.code ?? null);
    ctx.progress({ after: 'abort' });
    await this.event(ctx, 'settled');
    if (payload.outcome === 'fail') throw new Error('the stale attempt failed');
    return { stale: true };
  }

  /**
   * A transactional task: inserts into the test's `tx_writes` (job_id, pid, attempt) through
   * ctx.manager, records `wrote` (outside the transaction), waits for the test's go-ahead in
   * `handler_go`, records `returned` and returns; the job's completion commits with its write.
   */
  @Task('tx-write', { transaction: true })
  async txWrite(_payload: unknown, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into tx_writes (job_id, pid, attempt) values ($1, $2, $3)', [ctx.job.id, process.pid, ctx.job.attempts]);
    await this.event(ctx, 'wrote');
    while ((await this.dataSource.query('select 1 from handler_go where job_id = $1', [ctx.job.id])).length === 0) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await this.event(ctx, 'returned');
    return { pid: process.pid };
  }

  /** Two durable steps with a pause between them, each recording its effect in the test's `step_effects`. */
  @Task('two-steps')
  async twoSteps(_payload: unknown, ctx: JobContext) {
    const first = await ctx.step('first', () => this.effect(ctx, 'first', this.dataSource.manager));
    await this.event(ctx, 'between');
    await this.handlerGo(ctx);
    const second = await ctx.step('second', () => this.effect(ctx, 'second', this.dataSource.manager));
    return { first, second };
  }

  /** A transactional step whose write and record commit together; held inside it (open) or after it (committed). */
  @Task('tx-step')
  async txStep(payload: { hold: 'inside' | 'after' }, ctx: JobContext) {
    const written = await ctx.step(
      'write',
      async (manager) => {
        const done = await this.effect(ctx, 'write', manager);
        await this.event(ctx, 'wrote');
        if (payload.hold === 'inside') await this.handlerGo(ctx);
        return done;
      },
      { transaction: true },
    );
    await this.event(ctx, 'stepped');
    if (payload.hold === 'after') await this.handlerGo(ctx);
    return { written };
  }

  private async effect(ctx: JobContext, step: string, manager: EntityManager) {
    await manager.query('insert into step_effects (job_id, step, pid, attempt) values ($1, $2, $3, $4)', [ctx.job.id, step, process.pid, ctx.job.attempts]);
    return { pid: process.pid, attempt: ctx.job.attempts };
  }

  private async handlerGo(ctx: JobContext) {
    while ((await this.dataSource.query('select 1 from handler_go where job_id = $1', [ctx.job.id])).length === 0) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  private async event(ctx: JobContext, event: string, code: string | null = null) {
    await this.dataSource.query('insert into handler_events (job_id, pid, event, code) values ($1, $2, $3, $4)', [ctx.job.id, process.pid, event, code]);
  }

  /**
   * A flow's step: records its start (clock_timestamp, the dependencies it reads) in the test's
   * `flow_runs` table (job_id, flow_id, ref, pid, attempt, dependencies jsonb, started_at,
   * ended_at), naps `ms`, records its end, and returns `{ ref, pid }`.
   */
  @Task('flow-step', { retryDelay: () => 10 })
  async flowStep(payload: { ms?: number }, ctx: JobContext) {
    const dependencies = await ctx.dependencyResults();
    await this.dataSource.query(
      'insert into flow_runs (job_id, flow_id, ref, pid, attempt, dependencies, started_at) values ($1, $2, $3, $4, $5, $6, clock_timestamp())',
      [ctx.job.id, ctx.job.flowId, ctx.job.flowRef, process.pid, ctx.job.attempts, JSON.stringify(dependencies)],
    );
    await new Promise((resolve) => setTimeout(resolve, payload.ms ?? 0));
    await this.dataSource.query('update flow_runs set ended_at = clock_timestamp() where job_id = $1 and attempt = $2', [ctx.job.id, ctx.job.attempts]);
    return { ref: ctx.job.flowRef, pid: process.pid };
  }

  @Task('sleep')
  async sleep(payload: { ms: number }, ctx: JobContext) {
    console.log(`started sleep ${ctx.job.id}`);
    await new Promise((resolve) => setTimeout(resolve, payload.ms));
    console.log(`finished sleep ${ctx.job.id}`);
  }
}

/** CRON=1: every process schedules `tick`; each tick becomes one job, run by one of them. */
@Injectable()
class CronTasks {
  constructor(private readonly dataSource: DataSource) {}

  /** Records the tick in the test's `ticks` table (its job is deleted once it succeeds). */
  @Task('tick')
  @Cron(CronExpression.EVERY_SECOND)
  async tick(payload: CronPayload, ctx: JobContext) {
    await this.dataSource.query('insert into ticks (ts, backfilled, job_id, pid) values ($1, $2, $3, $4)', [
      payload._cron.ts,
      payload._cron.backfilled,
      ctx.job.id,
      process.pid,
    ]);
  }
}

/**
 * LIMITED=1: `limited` ({ ms }), with globalConcurrency GLOBAL_CONCURRENCY (default 2; `none`: unlimited, for a
 * drain to compare with) and, with RATE_LIMIT=`<max>/<per ms>`, that rateLimit (GROUP_CONCURRENCY=n and
 * GROUP_RATE_LIMIT=`<max>/<per ms>`: those limits per group): records its start in the test's
 * `limited_runs` table (job_id, pid, attempt, started_at, ended_at, by the server's
 * clock_timestamp(), and the job's group), sleeps `ms`, then records its end. And `partner`
 * ({ retryAfter? }): records each run in the test's `partner_runs` table (job_id, pid,
 * attempt, started_at); on its job's first run, with `retryAfter`, calls ctx.rateLimited(retryAfter).
 */
@Injectable()
class LimitedTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('limited', limitedOptions())
  async limited(payload: { ms: number }, ctx: JobContext) {
    await this.dataSource.query('insert into limited_runs (job_id, pid, attempt, started_at, group_key) values ($1, $2, $3, clock_timestamp(), $4)', [
      ctx.job.id,
      process.pid,
      ctx.job.attempts,
      ctx.job.group,
    ]);
    await new Promise((resolve) => setTimeout(resolve, payload.ms));
    await this.dataSource.query('update limited_runs set ended_at = clock_timestamp() where job_id = $1 and attempt = $2', [ctx.job.id, ctx.job.attempts]);
  }

  @Task('partner')
  async partner(payload: { retryAfter?: number }, ctx: JobContext) {
    const [{ runs }] = await this.dataSource.query(
      'with run as (insert into partner_runs (job_id, pid, attempt, started_at) values ($1, $2, $3, clock_timestamp()) returning 1) select (select count(*) from partner_runs where job_id = $1)::int + 1 as runs',
      [ctx.job.id, process.pid, ctx.job.attempts],
    );
    if (payload.retryAfter !== undefined && runs === 1) ctx.rateLimited(payload.retryAfter);
  }
}

function limitedOptions() {
  const concurrency = process.env.GLOBAL_CONCURRENCY === 'none' ? {} : { globalConcurrency: Number(process.env.GLOBAL_CONCURRENCY ?? 2) };
  const rate = (variable: string) => {
    const [max, per] = (process.env[variable] ?? '').split('/').map(Number);
    return process.env[variable] ? { max, per } : undefined;
  };
  return {
    ...concurrency,
    ...(process.env.RATE_LIMIT ? { rateLimit: rate('RATE_LIMIT') } : {}),
    ...(process.env.GROUP_CONCURRENCY ? { groupConcurrency: Number(process.env.GROUP_CONCURRENCY) } : {}),
    ...(process.env.GROUP_RATE_LIMIT ? { groupRateLimit: rate('GROUP_RATE_LIMIT') } : {}),
  };
}

const providers: Provider[] = [ProcessTasks, ...(process.env.CRON === '1' ? [CronTasks] : []), ...(process.env.LIMITED === '1' ? [LimitedTasks] : [])];

@Module({
  imports: [
    processTypeOrm(`worker-${process.pid}`),
    JobQueueModule.forRootAsync({
      inject: [DataSource],
      useFactory: (dataSource: DataSource) => ({
        concurrency: Number(process.env.CONCURRENCY ?? 4),
        pollInterval: 200,
        ...(process.env.TRANSACTION_POOLING === '1' ? { transactionPooling: true } : {}),
        ...(process.env.LISTEN_URL ? { listenUrl: process.env.LISTEN_URL } : {}),
        ...(process.env.HEARTBEAT_INTERVAL ? { heartbeatInterval: Number(process.env.HEARTBEAT_INTERVAL) } : {}),
        ...(process.env.WORKER_TIMEOUT ? { workerTimeout: Number(process.env.WORKER_TIMEOUT) } : {}),
        ...(process.env.SHUTDOWN_GRACE ? { shutdownGracePeriod: Number(process.env.SHUTDOWN_GRACE) } : {}),
        ...(process.env.FLAGS_TABLE === '1'
          ? {
              forbiddenFlags: async () => (await dataSource.query(READ_FORBIDDEN_FLAGS, [process.pid, '{}']))[0].flags as string[],
            }
          : {}),
      }),
    }),
  ],
  providers,
})
class WorkerProcessModule {}

async function main() {
  const app = await NestFactory.createApplicationContext(WorkerProcessModule, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  console.log(`ready ${app.get(JobQueueWorker).workerId}`);
  if (process.env.PRINT_PAUSES === '1') printPauses(app.get(JobQueueWorker));
  if (process.env.PRINT_LIMITS) printLimits(app.get(JobQueueWorker), process.env.PRINT_LIMITS);
  if (process.env.ADD_AT_START) {
    const { identifier, payload } = JSON.parse(process.env.ADD_AT_START) as { identifier: string; payload?: unknown };
    await app.get(JobQueueWorker).runUntilIdle(); // the start's catch-up claim is done: the free slots are for adds
    const job = await app.get(JobQueueService).add(identifier as never, payload as never);
    console.log(`added ${job.id} ${job.state}`);
  }
}
/**
 * PRINT_PAUSES=1: prints `paused <what>` (`-` for nothing, else `task:<name>` and `queue:<name>`
 * sorted, comma-separated) at start and whenever what the worker knows of the pauses changes,
 * so that a test can wait until every process knows of a pause before adding jobs it must hold.
 */
function printPauses(worker: JobQueueWorker): void {
  printWhenChanged('paused', () => worker.status().paused.map((entry) => `${entry.kind}:${entry.name}`).sort().join(',') || '-');
}

/**
 * PRINT_LIMITS=<task>: prints `limits <json>` (`null` for nothing set) at start and whenever the
 * limits the worker has heard setTaskLimits store for `task` change, so that a test can wait
 * until every process knows of them: a task that had no limit becomes limited on a worker only
 * once it has heard (docs/guides/limits.md). Read from the worker's controls, which it does not
 * expose.
 */
function printLimits(worker: JobQueueWorker, task: string): void {
  const { controls } = worker as unknown as { controls: { overrideOf(task: string): unknown } };
  printWhenChanged('limits', () => JSON.stringify(controls.overrideOf(task) ?? null));
}

/** Prints `<label> <what read()>` now and each time it reads something else (checked every 10 ms). */
function printWhenChanged(label: string, read: () => string): void {
  let last: string | undefined;
  const print = () => {
    const known = read();
    if (known !== last) console.log(`${label} ${(last = known)}`);
  };
  print();
  setInterval(print, 10).unref();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
