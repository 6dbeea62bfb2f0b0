import type { FlowResult } from './flows';
import { cell, medianOf, printGrid, values } from './report-format';

/** The flow lines, with their gates (issue 26): the fan-out/fan-in flow within 1.3× the drain of as many jobs, addFlow at least half addMany's rate. */
export function printFlows(rounds: FlowResult[]): void {
  const ratio = (a: number[], b: number[]) => medianOf(a) / medianOf(b);
  const fan = ratio(values(rounds, (r) => r.fanFlowMs), values(rounds, (r) => r.fanDrainMs));
  const adds = ratio(values(rounds, (r) => r.addFlowRate), values(rounds, (r) => r.addManyRate));
  printGrid(
    ['flows (nestjs-job-queue)', 'flow', 'plain jobs', 'ratio', 'gate'],
    [
      [
        'fan-out/fan-in 1 → 1,000 → 1, from the add to the last job done (ms)',
        cell(values(rounds, (r) => r.fanFlowMs), 'latency'),
        cell(values(rounds, (r) => r.fanDrainMs), 'latency'),
        `${fan.toFixed(2)}×`,
        fan <= 1.3 ? 'pass (≤ 1.3×)' : 'FAIL (≤ 1.3×)',
      ],
      [
        'addFlow of 1,000 steps against addMany of 1,000 jobs (rows/s)',
        cell(values(rounds, (r) => r.addFlowRate), 'throughput'),
        cell(values(rounds, (r) => r.addManyRate), 'throughput'),
        `${(adds * 100).toFixed(0)} %`,
        adds >= 0.5 ? 'pass (≥ 50 %)' : 'FAIL (≥ 50 %)',
      ],
    ],
  );
  console.log(
    'fan-out/fan-in: a root, 1,000 steps that depend on it and a join that depends on all 1,000, added with the worker running, against addMany of 1,002 ' +
      'independent jobs, each timed to the last job done (median of 3 per round). addFlow: 10 roots and 990 steps that depend on 1 to 3 earlier ones, ' +
      'in turns with addMany (median of 7 per round).',
  );
}
