import { trusted, type Html } from '../html';
import type { MinuteCounts } from '../dashboard-reader';

const WIDTH = 900;
const HEIGHT = 190;
const LEFT = 40;
const BOTTOM = 22;

/** Completed (stacked under failed) jobs per minute, as an SVG bar chart drawn on the server. Numbers only: nothing from a job. */
export function minuteChart(minutes: MinuteCounts[]): Html {
  const max = Math.max(1, ...minutes.map((m) => m.completed + m.failed));
  const top = niceCeiling(max);
  const plotHeight = HEIGHT - BOTTOM - 8;
  const step = (WIDTH - LEFT) / minutes.length;
  const y = (n: number) => 8 + plotHeight - (n / top) * plotHeight;
  const parts: string[] = [];
  for (const tick of [0, top / 2, top]) {
    parts.push(`<line x1="${LEFT}" x2="${WIDTH}" y1="${y(tick)}" y2="${y(tick)}" stroke="#eef0f4"/>`);
    parts.push(`<text x="${LEFT - 6}" y="${y(tick) + 4}" text-anchor="end" font-size="11" fill="#98a2b3">${formatTick(tick)}</text>`);
  }
  minutes.forEach((m, n) => {
    const x = LEFT + n * step + 1;
    const w = Math.max(1, step - 2);
    const title = `<title>${new Date(m.at).toISOString().slice(11, 16)} UTC: ${m.completed} completed, ${m.failed} failed</title>`;
    if (m.completed > 0) parts.push(`<rect x="${x}" y="${y(m.completed)}" width="${w}" height="${y(0) - y(m.completed)}" fill="#16a34a">${title}</rect>`);
    if (m.failed > 0) parts.push(`<rect x="${x}" y="${y(m.completed + m.failed)}" width="${w}" height="${y(m.completed) - y(m.completed + m.failed)}" fill="#dc2626">${title}</rect>`);
    if (n % 10 === 0 || n === minutes.length - 1) {
      const label = n === minutes.length - 1 ? 'now' : `-${minutes.length - 1 - n} min`;
      const anchor = n === minutes.length - 1 ? 'end' : n === 0 ? 'start' : 'middle';
      parts.push(`<text x="${anchor === 'end' ? x + w : anchor === 'start' ? x : x + w / 2}" y="${HEIGHT - 6}" text-anchor="${anchor}" font-size="11" fill="#98a2b3">${label}</text>`);
    }
  });
  return trusted(`<svg viewBox="0 0 ${WIDTH} ${HEIGHT}" preserveAspectRatio="none" role="img" aria-label="Completed and failed jobs per minute, last hour">${parts.join('')}</svg>`);
}

/** 1, 2, 5 × 10^n at or above n. */
function niceCeiling(n: number): number {
  const power = 10 ** Math.floor(Math.log10(n));
  for (const m of [1, 2, 5, 10]) if (m * power >= n) return m * power;
  return 10 * power;
}

function formatTick(n: number): string {
  return n >= 1000 ? `${n / 1000}k` : String(n);
}
