// The sampling loop of notify-levers.cjs, message-parts.cjs and table-shape.cjs: variants of "add a job, claim it once its
// NOTIFY is heard" taking turns sample by sample (the order rotated each round, 2–10 ms apart), each timed
// from before its add to its claim's end, so that the disk's and the machine's drift falls on all alike.
// A variant: { add(), claim(notification) → rows claimed (must be 1), clean(), before?, after? (statements
// run on `producer` around the sample, untimed) }.
const { randomInt } = require('crypto');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function timeNotifiedTurns({ variants, names, samples, listener, producer }) {
  const times = Object.fromEntries(names.map((name) => [name, []]));
  for (let i = 0; i < samples; i++) {
    for (const name of [...names.slice(i % names.length), ...names.slice(0, i % names.length)]) {
      const v = variants[name];
      if (v.before) await producer.query(v.before);
      await sleep(randomInt(2, 11));
      const heard = new Promise((resolve) => listener.once('notification', resolve));
      const started = performance.now();
      const adding = v.add();
      const got = await v.claim(await heard);
      times[name].push(performance.now() - started);
      if (got !== 1) throw new Error(`${name}: claimed ${got}`);
      await adding;
      await v.clean();
      if (v.after) await producer.query(v.after);
    }
  }
  return times;
}

/** Prints p50 and p90 of each variant, and its p50 over the first's. */
function printTurns(times, names, width = 24) {
  const pct = (a, p) => a[Math.min(a.length - 1, Math.floor((a.length * p) / 100))];
  const sorted = Object.fromEntries(names.map((name) => [name, [...times[name]].sort((x, y) => x - y)]));
  for (const name of names) {
    const a = sorted[name];
    console.log(`${name.padEnd(width)} p50 ${pct(a, 50).toFixed(3)} ms  p90 ${pct(a, 90).toFixed(3)} ms  (${((pct(a, 50) / pct(sorted[names[0]], 50)) * 100).toFixed(0)} % of ${names[0]})`);
  }
}

module.exports = { timeNotifiedTurns, printTurns };
