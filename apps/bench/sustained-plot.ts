import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { SustainedResult } from './sustained';

/** Where the bench writes the plot (docs/benchmark.md shows it), from the repository's root as npm runs the bench. */
export const SUSTAINED_PLOT = 'docs/images/sustained-latency.svg';

const WIDTH = 900;
const HEIGHT = 420;
const MARGIN = { left: 64, right: 200, top: 36, bottom: 48 };
const COLORS: Record<string, string> = { 'nestjs-job-queue': '#1f77b4', 'graphile-worker': '#d62728', 'graphile-worker batched': '#ff7f0e' };
/** The wait axis, log scale (ms). */
const Y_MIN = 0.1;
const Y_MAX = 10_000;

/**
 * One round of the sustained lines as an SVG: each system's p99 (solid) and p50 (dashed)
 * wait per 10-second slice, over the steps' time, on a log scale; the steps' offered rates
 * along the top.
 */
export function writeSustainedPlot(round: SustainedResult, seconds: number, file: string): void {
  const percents = [...new Set(round.systems.flatMap((s) => s.steps.map((step) => step.percent)))].sort((a, b) => a - b);
  const totalS = percents.length * seconds;
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const x = (s: number) => MARGIN.left + (s / totalS) * plotW;
  const y = (ms: number) => MARGIN.top + plotH * (1 - (Math.log10(Math.min(Y_MAX, Math.max(Y_MIN, ms))) - Math.log10(Y_MIN)) / (Math.log10(Y_MAX) - Math.log10(Y_MIN)));
  const parts: string[] = [];
  for (let exponent = Math.log10(Y_MIN); exponent <= Math.log10(Y_MAX); exponent++) {
    const ms = 10 ** exponent;
    parts.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${y(ms)}" y2="${y(ms)}" stroke="#ddd"/>`);
    parts.push(`<text x="${MARGIN.left - 6}" y="${y(ms) + 4}" text-anchor="end">${ms >= 1 ? ms.toLocaleString('en-US') : ms}</text>`);
  }
  percents.forEach((percent, i) => {
    const offered = round.systems.flatMap((s) => s.steps).find((step) => step.percent === percent)?.offeredPerSecond ?? 0;
    parts.push(`<line x1="${x(i * seconds)}" x2="${x(i * seconds)}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="#bbb" stroke-dasharray="4 3"/>`);
    parts.push(`<text x="${x((i + 0.5) * seconds)}" y="${MARGIN.top - 10}" text-anchor="middle">${percent} % (${Math.round(offered).toLocaleString('en-US')} jobs/s)</text>`);
  });
  round.systems.forEach(({ system, steps }, index) => {
    const color = COLORS[system] ?? '#333';
    const points = (pick: 'p50' | 'p99') =>
      steps
        .flatMap((step) => {
          const offset = percents.indexOf(step.percent) * seconds;
          return step.slices.filter((slice) => slice.waits).map((slice) => `${x(offset + (slice.startS + slice.endS) / 2).toFixed(1)},${y(slice.waits![pick]).toFixed(1)}`);
        })
        .join(' ');
    parts.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${points('p99')}"/>`);
    parts.push(`<polyline fill="none" stroke="${color}" stroke-width="1.5" stroke-dasharray="5 4" points="${points('p50')}"/>`);
    const legendY = MARGIN.top + 16 + index * 22;
    parts.push(`<line x1="${WIDTH - MARGIN.right + 16}" x2="${WIDTH - MARGIN.right + 40}" y1="${legendY - 4}" y2="${legendY - 4}" stroke="${color}" stroke-width="2"/>`);
    parts.push(`<text x="${WIDTH - MARGIN.right + 46}" y="${legendY}">${system}</text>`);
  });
  const legendY = MARGIN.top + 16 + round.systems.length * 22 + 8;
  parts.push(`<text x="${WIDTH - MARGIN.right + 16}" y="${legendY}">solid: p99, dashed: p50</text>`);
  parts.push(`<text x="${MARGIN.left + plotW / 2}" y="${HEIGHT - 10}" text-anchor="middle">seconds, each step ${seconds} s, the offered rate rising</text>`);
  parts.push(`<text transform="translate(16 ${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle">add → handler start (ms, log scale)</text>`);
  for (let s = 0; s <= totalS; s += Math.max(10, seconds)) parts.push(`<text x="${x(s)}" y="${MARGIN.top + plotH + 18}" text-anchor="middle">${s}</text>`);
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="white"/>`,
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#999"/>`,
    ...parts,
    '</svg>',
  ].join('\n');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${svg}\n`);
}
