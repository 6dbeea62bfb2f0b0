/**
 * The chaos checker: reads the ledger (ledger.ts) and the queue's tables once the run has
 * drained and every fault has healed, and judges each promise the README makes. Each check
 * returns one line with its counts, and the violations it found (a few shown).
 */
import type { Client } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { KINDS, LIMIT } from './ledger';
import { FAULT_KINDS, NO_REPLY_LOST, type Fault } from './faults';
import type { Crash } from './processes';

export interface Check {
  name: string;
  counts: string;
  violations: string[];
}

/** Faults after which a job may run twice: its first run's process was gone, frozen past workerTimeout, or cut off. */
/**
 * Faults after which a job may run twice: its first run's process was gone, frozen past
 * workerTimeout, or cut off; or the cluster declared that process dead without any of these
 * (a heartbeat late under load: a stall, as the guarantees name it), which the leader's
 * rescues show. Injected faults are looked up first, so a second run is put down to them.
 */
const EXPLAINS_A_SECOND_RUN: Array<Fault['kind']> = ['kill', 'freeze-long', 'cut', 'postgres-restart', 'declared-dead'];

interface Attempt {
  id: string;
  key: string;
  kind: string;
  job_id: string;
  attempt: number;
  queue_name: string | null;
  pid: number;
  started_at: Date;
  ended_at: Date | null;
  outcome: string | null;
  planned_ms: number;
  effect_at: Date | null;
}

const ms = (d: Date) => d.getTime();

/** The kinds whose handlers run with `transaction: true` (chaos-worker.ts): their effect is their write through ctx.manager. */
const TRANSACTIONAL = ['queued', 'cancellable'];

export class Checker {
  private attempts: Attempt[] = [];
  /** Jobs meant to succeed that failed because faults took their attempts, or a dependency's (endedAsIntended). */
  private readonly failedByFaults = new Set<string>();

  constructor(
    private readonly sql: Client,
    private faults: Fault[],
    private readonly crashes: Crash[],
    /** What the producer printed at its end: its failed transactions by error code. */
    private readonly producerErrors: Record<string, number> | undefined,
    /** The run was long enough for every kind of fault (faults.ts draws them all within about 80 s). */
    private readonly everyFault = true,
  ) {}

  async run(): Promise<Check[]> {
    // the workers the leader declared dead, by their ids' pids (vm-<pid>-<random>), when it rescued their first job
    const deaths = await this.sql.query<{ dead_worker: string; at: Date }>(
      `select dead_worker, min(at) as at from chaos.worker_events where type = 'job:rescued' and dead_worker is not null group by 1`,
    );
    this.faults = [
      ...this.faults,
      ...deaths.rows.map((d): Fault => ({ kind: 'declared-dead', pid: Number(/-(\d+)-[^-]+$/.exec(d.dead_worker)?.[1] ?? 0), startedAt: d.at, endedAt: d.at, detail: d.dead_worker })),
    ];
    this.attempts = (
      await this.sql.query<Attempt>(
        `select a.id::text, a.key, a.kind, a.job_id::text, a.attempt, a.queue_name, a.pid, a.started_at, a.ended_at, a.outcome, a.planned_ms, e.at as effect_at
         from chaos.attempts a left join chaos.effects e on e.attempt_id = a.id order by a.started_at, a.id`,
      )
    ).rows;
    return [
      await this.workloadRan(),
      await this.endedAsIntended(),
      await this.rolledBackNeverRan(),
      this.noSecondRuns(),
      await this.transactionalOnce(),
      await this.finishedByItsClaim(),
      await this.keyedVersions(),
      this.queuesSerial(),
      this.cronTicks(),
      await this.flowsInOrder(),
      this.limitHeld(),
      await this.healed(),
      this.noCrash(),
    ];
  }

  /** Every kind of job was added and ran, every kind of fault happened, and the producer's adds failed only by losing their connection. */
  private async workloadRan(): Promise<Check> {
    const produced = (await this.sql.query<{ kind: string; n: number }>('select kind, count(*)::int as n from chaos.produced group by kind')).rows;
    const violations = KINDS.filter((kind) => kind !== 'tick' && !produced.some((p) => p.kind === kind)).map((kind) => `no ${kind} job committed`);
    violations.push(...KINDS.filter((kind) => !this.attempts.some((a) => a.kind === kind && a.outcome !== null)).map((kind) => `no ${kind} attempt ran`));
    if (this.everyFault) violations.push(...FAULT_KINDS.filter((kind) => !this.faults.some((f) => f.kind === kind && f.detail !== NO_REPLY_LOST)).map((kind) => `no ${kind} fault happened`));
    if (!this.producerErrors) violations.push('the producer did not report its errors');
    // a pg error (class 08: connection; 57P01: terminated) or a dropped socket is a fault's doing; a JQ_* code is the library refusing an add
    const refused = Object.entries(this.producerErrors ?? {}).filter(([code]) => code.startsWith('JQ_'));
    violations.push(...refused.map(([code, n]) => `${n} adds failed with ${code}`));
    return {
      name: 'the workload ran, and only faults failed its adds',
      counts: `committed ${format(Object.fromEntries(produced.map((p) => [p.kind, p.n])))}; failed adds ${format(this.producerErrors ?? {}) || 'none'}`,
      violations,
    };
  }

  /**
   * The fault that explains a second run of a job first run by `first`, before `second` started:
   * on the first run's process (its job rescued and run again), or on the second's (a job it
   * had claimed before a stall and started when it resumed, before it learnt it was declared dead).
   */
  private explanation(first: Attempt, second: Attempt): Fault | undefined {
    return this.faults.find(
      (f) =>
        EXPLAINS_A_SECOND_RUN.includes(f.kind) &&
        (f.pid === null || f.pid === first.pid || f.pid === second.pid) &&
        ms(f.endedAt) >= ms(first.started_at) - 1000 &&
        ms(f.startedAt) <= ms(second.started_at),
    );
  }

  private async endedAsIntended(): Promise<Check> {
    const rows = (
      await this.sql.query<{ key: string; kind: string; expect: string; after: string[]; state: string | null; cancelled: boolean; lost_to: string[] }>(
        `select p.key, p.kind, p.expect, p.after, f.state,
                -- the failures that were not the handler's own (a worker lost, a connection cut): a fault's
                array(select coalesce(e ->> 'code', e ->> 'message') from jsonb_array_elements(coalesce(f.errors, '[]')) e
                      where e ->> 'message' not like '%fails on purpose' and coalesce(e ->> 'code', '') <> 'JQ_JOB_TIMEOUT') as lost_to,
                exists (select 1 from chaos.cancels c where c.job_id = p.job_id and c.accepted) as cancelled
         from chaos.produced p left join job_queue.finished_jobs f on f.id = p.job_id
         where p.kind <> 'keyed'`,
      )
    ).rows;
    const violations: string[] = [];
    const states: Record<string, number> = {};
    const lostTo: Record<string, number> = {};
    // rows come in the order they were added: a flow step after its dependencies
    for (const r of rows.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))) {
      states[r.state ?? 'unfinished'] = (states[r.state ?? 'unfinished'] ?? 0) + 1;
      // a flow step whose dependency failed through faults fails too (onDependencyFailure 'fail', JQ_DEPENDENCY_FAILED)
      if (r.state === 'failed' && r.after.some((dep) => this.failedByFaults.has(dep))) {
        this.failedByFaults.add(r.key);
        lostTo['a dependency'] = (lostTo['a dependency'] ?? 0) + 1;
        continue;
      }
      const ok =
        r.expect === 'completed-or-cancelled' ? (r.cancelled ? r.state === 'cancelled' : r.state === 'completed' || r.state === 'cancelled') : r.state === r.expect;
      // a job meant to succeed may run out of attempts when faults took some of them (an attempt lost with its worker counts)
      if (!ok && r.state === 'failed' && r.expect.startsWith('completed') && !r.cancelled && r.lost_to.length > 0) {
        this.failedByFaults.add(r.key);
        for (const code of r.lost_to) lostTo[code] = (lostTo[code] ?? 0) + 1;
        continue;
      }
      if (!ok) violations.push(`${r.key} (${r.kind}) ended ${r.state ?? 'never'}, expected ${r.expect}${r.cancelled ? ' (cancel accepted)' : ''}`);
    }
    const lost = Object.keys(lostTo).length ? `; failed with attempts lost to faults: ${format(lostTo)}` : '';
    return { name: 'every committed job ended as its handler intended', counts: `${rows.length} jobs: ${format(states)}${lost}`, violations };
  }

  private async rolledBackNeverRan(): Promise<Check> {
    const produced = new Set((await this.sql.query<{ key: string }>('select key from chaos.produced')).rows.map((r) => r.key));
    const [{ n }] = (await this.sql.query<{ n: number }>('select count(*)::int as n from chaos.rolled_back')).rows;
    const strays = this.attempts.filter((a) => a.kind !== 'tick' && !produced.has(a.key));
    return {
      name: 'nothing rolled back (or never committed) ran',
      counts: `${n} adds rolled back, ${strays.length} attempts of uncommitted jobs`,
      violations: strays.map((a) => `${a.key} (${a.kind}, job ${a.job_id}) ran, pid ${a.pid}`),
    };
  }

  /** Non-transactional handlers: two `ok` runs of one job are allowed only after a fault that explains them. */
  private noSecondRuns(): Check {
    // a transactional handler's run counts only if its writes committed (a completion that timed out on a lock, or was fenced, rolled them back)
    const ran = (a: Attempt) => a.outcome === 'ok' && (!TRANSACTIONAL.includes(a.kind) || a.effect_at !== null);
    const byKey = groupBy(this.attempts.filter(ran), (a) => a.key);
    const causes: Record<string, number> = {};
    const violations: string[] = [];
    for (const [key, runs] of byKey) {
      for (const second of runs.slice(1)) {
        const fault = this.explanation(runs[0], second);
        if (fault) causes[fault.kind] = (causes[fault.kind] ?? 0) + 1;
        else violations.push(`${key} ran twice (pids ${runs[0].pid} at ${runs[0].started_at.toISOString()} and ${second.pid} at ${second.started_at.toISOString()}) with no fault to explain it`);
      }
    }
    const explained = Object.values(causes).reduce((a, b) => a + b, 0);
    return { name: 'no job ran twice, except after a fault that explains it', counts: `${byKey.size} jobs ran, ${explained} second runs explained${explained ? ` (${format(causes)})` : ''}`, violations };
  }

  /** transaction: true handlers: a write commits with the completion, so at most once, whatever happened. */
  private async transactionalOnce(): Promise<Check> {
    const rows = (
      await this.sql.query<{ key: string; n: number; state: string | null }>(
        `select p.key, (select count(*)::int from chaos.effects e where e.key = p.key) as n, f.state
         from chaos.produced p left join job_queue.finished_jobs f on f.id = p.job_id where p.kind in ('queued', 'cancellable')`,
      )
    ).rows;
    const violations = rows
      .filter((r) => (r.state === 'completed' ? r.n !== 1 : r.n !== 0))
      .map((r) => `${r.key} ended ${r.state} with ${r.n} committed writes`);
    const fenced = this.attempts.filter((a) => (a.kind === 'queued' || a.kind === 'cancellable') && a.outcome === 'ok' && !a.effect_at).length;
    return { name: 'a transactional job\'s writes committed once, with its completion', counts: `${rows.length} jobs, ${fenced} runs whose writes were refused (fenced or cancelled)`, violations };
  }

  /**
   * The fence: a completed job was completed by the worker that ran its last claim (its final
   * attempt number), never by a stale run of a worker declared dead meanwhile. Keyed jobs are
   * left out: add_job raises a held keyed job's attempts when it replaces it.
   */
  private async finishedByItsClaim(): Promise<Check> {
    const rows = (
      await this.sql.query<{ key: string; worker_id: string; attempts: number }>(
        `select p.key, f.worker_id, f.attempts from chaos.produced p join job_queue.finished_jobs f on f.id = p.job_id
         where f.state = 'completed' and p.kind <> 'keyed'`,
      )
    ).rows;
    const ok = groupBy(this.attempts.filter((a) => a.outcome === 'ok'), (a) => a.key);
    const violations = rows
      .filter((r) => !(ok.get(r.key) ?? []).some((a) => a.attempt === r.attempts && a.pid === Number(/-(\d+)-[^-]+$/.exec(r.worker_id)?.[1])))
      .map((r) => `${r.key} was completed by ${r.worker_id}, which did not run its attempt ${r.attempts}`);
    return { name: 'each completed job was completed by the worker that ran its last claim', counts: `${rows.length} completed jobs`, violations };
  }

  /** Keyed adds in mode replace: the last committed version of each key ran; none ran that was not committed. */
  private async keyedVersions(): Promise<Check> {
    const rows = (await this.sql.query<{ job_key: string; key: string; version: number }>(`select job_key, key, version from chaos.produced where kind = 'keyed' order by version`)).rows;
    const ran = new Set(this.attempts.filter((a) => a.kind === 'keyed' && a.outcome === 'ok').map((a) => a.key));
    const last = new Map<string, string>();
    for (const r of rows) last.set(r.job_key, r.key);
    const violations = [...last].filter(([, key]) => !ran.has(key)).map(([jobKey, key]) => `${jobKey}: its last version ${key} never ran`);
    const replaced = rows.filter((r) => !ran.has(r.key)).length;
    return { name: 'keyed jobs: the last version of each key ran', counts: `${rows.length} keyed adds, ${replaced} replaced before they ran`, violations };
  }

  /** A named queue never runs two attempts at once, unless one of them was cut off by a fault (and then its write was refused). */
  private queuesSerial(): Check {
    const ended = this.attempts.filter((a) => a.kind === 'queued' && (a.effect_at || a.ended_at));
    const end = (a: Attempt) => ms(a.effect_at ?? a.ended_at!);
    const violations: string[] = [];
    let fenced = 0;
    for (const [queue, runs] of groupBy(ended, (a) => a.queue_name ?? '')) {
      for (let i = 0; i < runs.length; i++) {
        for (let j = i + 1; j < runs.length && ms(runs[j].started_at) < end(runs[i]); j++) {
          const [a, b] = [runs[i], runs[j]];
          const cutOff = [a, b].find((x) => !x.effect_at && (this.faultOn(x, ms(x.started_at), end(x)) || this.startedStale(x)));
          if (a.effect_at && b.effect_at) violations.push(`${queue}: ${a.key} and ${b.key} both committed, overlapping`);
          else if (cutOff) fenced += 1;
          else violations.push(`${queue}: ${a.key} (pid ${a.pid}) and ${b.key} (pid ${b.pid}) overlapped`);
        }
      }
    }
    return { name: 'named queues ran one attempt at a time', counts: `${ended.length} attempts in ${groupBy(ended, (a) => a.queue_name ?? '').size} queues, ${fenced} overlaps across a fault`, violations };
  }

  /** An attempt its process started after the cluster had declared it dead (a job claimed before a stall, started on waking; its write is refused). */
  private startedStale(a: Attempt): boolean {
    return this.faults.some((f) => f.kind === 'declared-dead' && f.pid === a.pid && ms(f.startedAt) <= ms(a.started_at) && ms(a.started_at) - ms(f.startedAt) < 30_000);
  }

  private faultOn(a: Attempt, from: number, to: number): Fault | undefined {
    return this.faults.find((f) => EXPLAINS_A_SECOND_RUN.includes(f.kind) && (f.pid === null || f.pid === a.pid) && ms(f.endedAt) >= from && ms(f.startedAt) <= to);
  }

  /** One job per second of the every-second @Cron, none missed between the first and the last (backfillPeriod covers the outages). */
  private cronTicks(): Check {
    const ticks = groupBy(this.attempts.filter((a) => a.kind === 'tick'), (a) => a.key);
    const violations: string[] = [];
    for (const [key, runs] of ticks) {
      const jobs = new Set(runs.map((a) => a.job_id));
      if (jobs.size > 1) violations.push(`${key} became ${jobs.size} jobs`);
    }
    const seconds = [...ticks.keys()].map((k) => Date.parse(k.slice('tick:'.length))).sort((a, b) => a - b);
    for (let i = 1; i < seconds.length; i++) {
      for (let t = seconds[i - 1] + 1000; t < seconds[i]; t += 1000) violations.push(`tick ${new Date(t).toISOString()} never ran`);
    }
    const unfinished = [...ticks].filter(([, runs]) => !runs.some((a) => a.outcome === 'ok')).map(([key]) => key);
    violations.push(...unfinished.filter((key) => Date.parse(key.slice(5)) < seconds[seconds.length - 1] - 10_000).map((key) => `${key} never completed`));
    return { name: 'cron: one job per tick, none missed', counts: `${ticks.size} ticks from ${seconds.length ? new Date(seconds[0]).toISOString() : '-'}`, violations };
  }

  private async flowsInOrder(): Promise<Check> {
    const steps = (await this.sql.query<{ key: string; after: string[] }>(`select key, after from chaos.produced where kind = 'step'`)).rows;
    const ok = groupBy(this.attempts.filter((a) => a.kind === 'step' && a.outcome === 'ok'), (a) => a.key);
    const violations: string[] = [];
    for (const step of steps) {
      for (const run of ok.get(step.key) ?? []) {
        for (const dep of step.after) {
          if (!(ok.get(dep) ?? []).some((d) => d.ended_at && ms(d.ended_at) <= ms(run.started_at))) violations.push(`${step.key} started before its dependency ${dep} had completed`);
        }
      }
    }
    const flows = (
      await this.sql.query<{ key: string; state: string }>(
        `select split_part(p.key, ':', 1) as key, coalesce(f.state, 'missing') as state from chaos.produced p left join job_queue.flows f on f.id = p.job_id
         where p.kind = 'step' and p.after = '{}'`,
      )
    ).rows;
    const states: Record<string, number> = {};
    for (const f of flows) {
      states[f.state] = (states[f.state] ?? 0) + 1;
      // a flow fails when one of its steps failed through faults
      const excused = f.state === 'failed' && steps.some((step) => step.key.startsWith(`${f.key}:`) && this.failedByFaults.has(step.key));
      if (f.state !== 'completed' && !excused) violations.push(`flow ${f.key} ended ${f.state}`);
    }
    return { name: 'flows: no step before its dependencies, every flow completed', counts: `${steps.length} steps, flows ${format(states)}`, violations };
  }

  /** globalConcurrency: at most LIMIT attempts at once, counting an attempt only while its process was alive and not cut off. */
  private limitHeld(): Check {
    const points: Array<[number, number]> = [];
    for (const a of this.attempts.filter((x) => x.kind === 'limited')) {
      const from = ms(a.started_at);
      let to = a.ended_at ? ms(a.ended_at) : from + a.planned_ms;
      const fault = this.faultOn(a, from, to);
      if (fault) to = Math.min(to, ms(fault.startedAt));
      if (to > from) points.push([from, 1], [to, -1]);
    }
    points.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let running = 0;
    let most = 0;
    const violations: string[] = [];
    for (const [at, delta] of points) {
      running += delta;
      if (running > most) most = running;
      if (running > LIMIT) violations.push(`${running} attempts at once at ${new Date(at).toISOString()}`);
    }
    return { name: `globalConcurrency ${LIMIT} never exceeded`, counts: `${points.length / 2} attempts, at most ${most} at once`, violations };
  }

  /** Once every fault has healed: no lock left by a dead worker, no queue locked without its job, every worker row live, nothing startable left. */
  private async healed(): Promise<Check> {
    const [row] = (
      await this.sql.query(
        `select (select count(*)::int from job_queue.jobs j where j.locked_by is not null and not exists (select 1 from job_queue.workers w where w.id = j.locked_by)) as orphan_locks,
                (select count(*)::int from job_queue.job_queues q where q.locked_by is not null
                   and not exists (select 1 from job_queue.jobs j where j.queue_name = q.queue_name and j.locked_by = q.locked_by)) as idle_queue_locks,
                (select count(*)::int from job_queue.workers where heartbeat_at < now() - interval '3 seconds') as stale_workers,
                (select count(*)::int from job_queue.workers) as workers,
                (select count(*)::int from job_queue.jobs where task_identifier <> 'chaos.tick') as left_jobs,
                (select count(*)::int from job_queue.blocked_jobs) as blocked_jobs`,
      )
    ).rows;
    // what the health indicator counts: jobs that could start now and nobody has
    row.startable_jobs = (await this.sql.query<{ count: number }>(createQueries('job_queue').startableJobs)).rows[0].count;
    const violations = Object.entries(row)
      .filter(([name, n]) => name !== 'workers' && n !== 0)
      .map(([name, n]) => `${name}: ${n}`);
    if (row.workers !== 3) violations.push(`${row.workers} worker rows for 3 live workers`);
    return { name: 'after the run: no stale lock, worker row or job left', counts: format(row), violations };
  }

  private noCrash(): Check {
    return {
      name: 'no process exited by itself',
      counts: `${this.crashes.length} crashes`,
      violations: this.crashes.map((c) => `${c.name} (pid ${c.pid}) exited (code ${c.code}, signal ${c.signal}):\n${c.output.slice(-3000)}`),
    };
  }
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}

function format(counts: Record<string, number>): string {
  return Object.entries(counts)
    .map(([name, n]) => `${name} ${n.toLocaleString('en-US')}`)
    .join(', ');
}
