/**
 * The faults of a chaos run, one at a time, chosen by the run's seeded Random: SIGKILL of a
 * worker (a new one started in its slot), SIGSTOP/SIGCONT shorter and longer than
 * workerTimeout, a PostgreSQL restart, every connection of one process terminated, a claim's and
 * a release's reply lost (LossyProxy, in front of slot 1's worker), and once, mid-run, a schema
 * migration (a column added to `jobs`). Each is recorded with its process and its time window,
 * so the checker can attribute a job run twice to the fault that caused it.
 */
import { Client } from 'pg';
import { DataSource, type QueryRunner } from 'typeorm';
import { runJobQueueMigrations } from '../../libs/job-queue/src';
import { applyOnce } from '../../migrations/ledger';
import type { LossyProxy } from '../support/tcp-proxy';
import type { PrivatePostgres } from '../support/private-postgres';
import { HEARTBEAT_MS, WORKER_TIMEOUT_MS } from './ledger';
import type { ChaosProcess } from './processes';
import type { Random } from './random';

export const FAULT_KINDS = ['kill', 'freeze-short', 'freeze-long', 'postgres-restart', 'cut', 'lost-claim-reply', 'lost-release-reply', 'migration'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Fault {
  /** What was done, or `declared-dead`: a worker the cluster declared dead (its jobs rescued), read from the ledger afterwards. */
  kind: FaultKind | 'declared-dead';
  /** The process it hit; none for a PostgreSQL restart or a migration (every process). */
  pid: number | null;
  startedAt: Date;
  endedAt: Date;
  detail?: string;
}

/** The detail of a lost-reply fault whose reply never came (the proxied worker was idle). */
export const NO_REPLY_LOST = 'no such reply within 5 s';

const WEIGHTS: Partial<Record<FaultKind, number>> = { kill: 3, 'freeze-short': 2, 'freeze-long': 2, 'postgres-restart': 1, cut: 2, 'lost-claim-reply': 2, 'lost-release-reply': 2 };

/** The markers of the replies LossyProxy loses: a column only the claim's, or the release's, reply has. */
const CLAIM_REPLY = 'candidate_count';
const RELEASE_REPLY = 'busy\0';

/** The migration added for the run: a nullable column on `jobs`, under running workers. */
class ChaosColumn1799000000000 {
  readonly name = 'ChaosColumn1799000000000';
  async up(q: QueryRunner): Promise<void> {
    await applyOnce(q, 'job_queue', this.name, async () => {
      await q.query('alter table job_queue.jobs add column if not exists chaos_note text');
    });
  }
  async down(): Promise<void> {}
}

export interface FaultTargets {
  postgres: PrivatePostgres;
  proxy: LossyProxy;
  /** The worker slots; slot 0 connects through the proxy. */
  workers: ChaosProcess[];
  producer: ChaosProcess;
  /** Starts a new worker in slot `i` (after a kill) and waits until it is ready. */
  replaceWorker(i: number): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class FaultInjector {
  readonly faults: Fault[] = [];
  private migrated = false;
  /** The faults still to come in this round: each kind as often as its weight, in a random order, so a short run has them all. */
  private bag: FaultKind[] = [];

  constructor(private readonly random: Random, private readonly targets: FaultTargets) {}

  /** Causes one fault, chosen at random (the migration once, after a third of the run), and waits until it has healed. */
  async next(runFraction: number): Promise<void> {
    if (!this.migrated && runFraction > 0.33) {
      this.migrated = true;
      return this.migrate();
    }
    if (this.bag.length === 0) this.bag = this.random.shuffle(Object.entries(WEIGHTS).flatMap(([kind, n]) => Array<FaultKind>(n).fill(kind as FaultKind)));
    const kind = this.bag.pop()!;
    const slot = this.random.int(0, this.targets.workers.length - 1);
    const worker = this.targets.workers[slot];
    const startedAt = new Date();
    const done = (pid: number | null, detail?: string): void => void this.faults.push({ kind, pid, startedAt, endedAt: new Date(), detail });
    switch (kind) {
      case 'kill': {
        const pid = worker.pid;
        await worker.kill();
        done(pid, `slot ${slot + 1}`);
        await this.targets.replaceWorker(slot);
        return;
      }
      case 'freeze-short':
      case 'freeze-long': {
        const ms = kind === 'freeze-short' ? this.random.int(200, WORKER_TIMEOUT_MS / 2) : this.random.int(WORKER_TIMEOUT_MS + 3 * HEARTBEAT_MS, 2 * WORKER_TIMEOUT_MS + 1000);
        worker.freeze();
        await sleep(ms);
        worker.thaw();
        return done(worker.pid, `slot ${slot + 1}, ${ms} ms`);
      }
      case 'postgres-restart':
        await this.targets.postgres.restart();
        return done(null);
      case 'cut': {
        const target = this.random.chance(0.25) ? this.targets.producer : worker;
        const cut = await this.query('select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name = $1', [target.appName]);
        return done(target.pid, `${target.name}, ${cut[0].n} connections`);
      }
      case 'lost-claim-reply':
      case 'lost-release-reply': {
        const proxied = this.targets.workers[0];
        const lost = this.targets.proxy.lost;
        this.targets.proxy.arm(kind === 'lost-claim-reply' ? CLAIM_REPLY : RELEASE_REPLY);
        for (let waited = 0; this.targets.proxy.lost === lost && waited < 5000; waited += 50) await sleep(50);
        const happened = this.targets.proxy.lost > lost;
        this.targets.proxy.disarm();
        return done(proxied.pid, happened ? 'lost' : NO_REPLY_LOST);
      }
    }
  }

  private async migrate(): Promise<void> {
    const startedAt = new Date();
    const dataSource = new DataSource({ type: 'postgres', url: this.targets.postgres.url });
    await dataSource.initialize();
    try {
      await runJobQueueMigrations(dataSource, 'job_queue', [ChaosColumn1799000000000]);
    } finally {
      await dataSource.destroy();
    }
    this.faults.push({ kind: 'migration', pid: null, startedAt, endedAt: new Date(), detail: 'jobs.chaos_note added' });
  }

  private async query(text: string, values: unknown[]): Promise<Array<Record<string, number>>> {
    const client = new Client({ connectionString: this.targets.postgres.url });
    await client.connect();
    try {
      return (await client.query(text, values)).rows;
    } finally {
      await client.end();
    }
  }
}
