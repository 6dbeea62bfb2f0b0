import type { BenchConfig } from './config';
import { SCHEMA, TASK } from './jobs-table';
import { medianOf } from './report-format';
import type { Progress } from './suite';
import { openApp } from './system-nestjs-job-queue';

/** Flows against plain jobs, nestjs-job-queue only (graphile-worker has no flows). */
export interface FlowResult {
  /** A flow of 1 → FAN → 1 from addFlow to its join's completion, with the worker running: ms. */
  fanFlowMs: number;
  /** addMany of FAN + 2 independent jobs to their drain's end, the same way: ms. */
  fanDrainMs: number;
  /** addFlow of STEPS steps of a realistic graph (10 roots, each other step depending on 1 to 3 earlier ones): steps/s. */
  addFlowRate: number;
  /** addMany of STEPS jobs, taking turns with addFlow: jobs/s. */
  addManyRate: number;
}

const FAN = 1_000;
const STEPS = 1_000;
const FAN_TURNS = 3;
const ADD_TURNS = 7;
const POLL_MS = 2;

/**
 * The flow lines of one round, on a fresh database: the fan-out/fan-in flow against the drain of
 * as many independent jobs (the flow's cost is the blocked jobs' inserts, the trigger that
 * settles 1,000 dependencies in the releases, and the join's move to `jobs`), each timed from
 * the add to the end with the worker already running, FAN_TURNS times each; then addFlow
 * against addMany of as many rows, ADD_TURNS times each. Each pair takes turns (the flow first,
 * then the plain jobs first, …), after one uncounted pair: the fresh app's connections plan the
 * flow functions (add_flow, the trigger's) on their first calls, which the drain's prepared
 * statements do not need, and a long-running app pays once.
 */
export async function runFlowLines(url: string, config: BenchConfig, step: Progress): Promise<FlowResult> {
  const queue = await openApp(url, config);
  const { jobs, dataSource } = queue;
  const until = async (sql: string, values: unknown[]) => {
    while (!(await dataSource.query<Array<{ done: boolean }>>(sql, values))[0].done) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  };
  const fan = fanSteps();
  const fanFlow = async () => {
    const started = performance.now();
    const { flowId } = await jobs.addFlow(fan);
    await until(`select state = 'completed' as done from ${SCHEMA}.flows where id = $1`, [flowId]);
    return performance.now() - started;
  };
  const fanDrain = async () => {
    const started = performance.now();
    await queue.addMany(0, 1_000);
    await queue.addMany(1_000, FAN + 2 - 1_000);
    await until(`select not exists (select 1 from ${SCHEMA}.jobs) as done`, []);
    return performance.now() - started;
  };
  try {
    const worker = await queue.startWorker('default');
    const flowMs: number[] = [];
    const drainMs: number[] = [];
    try {
      for (let turn = 0; turn <= FAN_TURNS; turn++) {
        step(turn === 0 ? 'flows: fan-out/fan-in, warm-up' : `flows: fan-out/fan-in ${turn}/${FAN_TURNS}`);
        const [flow, drain] = await inTurns(turn, fanFlow, fanDrain);
        if (turn === 0) continue;
        flowMs.push(flow);
        drainMs.push(drain);
      }
    } finally {
      await worker.stop();
    }
    step('flows: addFlow against addMany');
    const flowRates: number[] = [];
    const manyRates: number[] = [];
    const rate = async (add: () => Promise<unknown>) => {
      const started = performance.now();
      await add();
      return STEPS / ((performance.now() - started) / 1000);
    };
    for (let turn = 0; turn <= ADD_TURNS; turn++) {
      const steps = graphSteps(turn);
      const [flow, many] = await inTurns(
        turn,
        () => rate(() => jobs.addFlow(steps)),
        () => rate(() => queue.addMany(turn * STEPS, STEPS)),
      );
      if (turn === 0) continue;
      flowRates.push(flow);
      manyRates.push(many);
    }
    return { fanFlowMs: medianOf(flowMs), fanDrainMs: medianOf(drainMs), addFlowRate: medianOf(flowRates), addManyRate: medianOf(manyRates) };
  } finally {
    await queue.close();
  }
}

/** Both measurements, the flow's first in even turns and the plain jobs' first in odd ones: [flow, plain]. */
async function inTurns(turn: number, flow: () => Promise<number>, plain: () => Promise<number>): Promise<[number, number]> {
  if (turn % 2 === 0) {
    const first = await flow();
    return [first, await plain()];
  }
  const first = await plain();
  return [await flow(), first];
}

/** A root, FAN steps that depend on it, and a join that depends on all FAN. */
function fanSteps(): Array<{ ref: string; identifier: string; payload?: { index: number }; dependsOn?: string[] }> {
  return [
    { ref: 'root', identifier: TASK },
    ...Array.from({ length: FAN }, (_, i) => ({ ref: `m${i}`, identifier: TASK, payload: { index: i }, dependsOn: ['root'] })),
    { ref: 'join', identifier: TASK, dependsOn: Array.from({ length: FAN }, (_, i) => `m${i}`) },
  ];
}

/** STEPS steps: 10 roots, then each step depending on 1 to 3 earlier ones (a fixed pseudo-random graph per turn). */
function graphSteps(turn: number): Array<{ ref: string; identifier: string; payload: { index: number }; dependsOn: string[] }> {
  let seed = 7 + turn;
  const next = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
  return Array.from({ length: STEPS }, (_, i) => ({
    ref: `s${i}`,
    identifier: TASK,
    payload: { index: i },
    dependsOn: i < 10 ? [] : [...new Set(Array.from({ length: 1 + next(3) }, () => `s${next(i)}`))],
  }));
}
