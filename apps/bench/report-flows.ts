import type { FlowResult } from './flows';
import { cell, medianOf, perRound, printGrid, values } from './report-format';

/**
 * The flow lines, with their gates (issue 26): the fan-out/fan-in flow within 1.3× the drain of
 * as many jobs, addFlow at least half addMany's rate. As the other gated lines, a ratio is taken
 * per round, of that round's two numbers, and given as the median (min–max) of the rounds; the
 * gate is judged on that median.
 */
export function printFlows(rounds: FlowResult[]): void {
  const fan = perRound(rounds, (r) => r.fanFlowMs, (r) => r.fanDrainMs).map((p) => p / 100);
  const adds = perRound(rounds, (r) => r.addFlowRate, (r) => r.addManyRate);
  const times = (x: number) => `${x.toFixed(2)}×`;
  const spread = (samples: number[], format: (x: number) => string) =>
    samples.length > 1 ? `${format(medianOf(samples))} (${format(Math.min(...samples))}–${format(Math.max(...samples))})` : format(samples[0]);
  const judged = (samples: number[], pass: (median: number) => boolean, gate: string) => (samples.length === 0 ? '-' : `${pass(medianOf(samples)) ? 'pass' : 'FAIL'} (${gate})`);
  printGrid(
    ['flows (nestjs-job-queue)', 'flow', 'plain jobs', 'ratio', 'gate'],
    [
      [
        'fan-out/fan-in 1 → 1,000 → 1, from the add to the last job done (ms)',
        cell(values(rounds, (r) => r.fanFlowMs), 'latency'),
        cell(values(rounds, (r) => r.fanDrainMs), 'latency'),
        spread(fan, times),
        judged(fan, (median) => median <= 1.3, '≤ 1.3×'),
      ],
      [
        'addFlow of 1,000 steps against addMany of 1,000 jobs (rows/s)',
        cell(values(rounds, (r) => r.addFlowRate), 'throughput'),
        cell(values(rounds, (r) => r.addManyRate), 'throughput'),
        cell(adds, 'percent'),
        judged(adds, (median) => median >= 50, '≥ 50 %'),
      ],
    ],
  );
  console.log('');
  console.log(
    'flows: one app on a fresh database, its worker running for the fan-out/fan-in line and stopped for the adds. fan-out/fan-in: a root, 1,000 steps that ' +
      'depend on it and a join that depends on all 1,000, from addFlow() until its flows row is completed, against addMany() of 1,002 independent jobs ' +
      'until the jobs table is empty (both polled every 2 ms), median of 3 per round. addFlow: 10 roots and 990 steps that each depend on 1 to 3 earlier ' +
      'ones (about 1,960 edges), against addMany() of 1,000 jobs, median of 7 per round. The two sides of a line take turns (which goes first alternates), ' +
      'after one uncounted pair. Ratios: per round, of that round\'s medians; ' +
      `${rounds.length > 1 ? 'median (min–max) of the rounds' : 'one round'}; the gate is judged on the median.`,
  );
}
