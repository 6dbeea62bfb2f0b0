import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ReleaseBatcher, type ReleaseBatch } from '../../libs/job-queue/src/worker/release-batcher';

/**
 * The batcher caps a flush at FLUSH_MAX_CHARS (32 Mi characters) of results, messages and
 * progress: what does not fit waits for the next flush. No database: the writer is a fake
 * that checks, at each flush, what the batcher says is unwritten.
 */
describe('a release batcher splitting large results over flushes', () => {
  const big = JSON.stringify('x'.repeat(20 * 1_048_576)); // two do not fit one flush

  function recorder(batcher: () => ReleaseBatcher, busyOnce: Set<string> = new Set()) {
    const written: string[] = [];
    const batches: ReleaseBatch[] = [];
    const problems: string[] = [];
    const write = async (batch: ReleaseBatch) => {
      await Promise.resolve(); // the batcher sets inFlight once write() returns its promise
      const b = batcher();
      const ids = [...batch.completed.map((c) => c.id), ...batch.failed.map((f) => f.id)];
      const unwritten = b.unwrittenIds();
      if (new Set(unwritten).size !== unwritten.length) problems.push(`duplicate unwritten ids: ${unwritten}`);
      if (b.unwritten !== unwritten.length) problems.push(`unwritten ${b.unwritten} but ${unwritten.length} ids`);
      for (const id of ids) if (!unwritten.includes(id)) problems.push(`${id} in flight but not unwritten`);
      if (b.idle) problems.push('idle while a flush is in flight');
      await new Promise((resolve) => setTimeout(resolve, 5));
      batches.push(batch);
      const busy = ids.filter((id) => busyOnce.delete(id));
      for (const id of ids) if (!busy.includes(id)) written.push(id);
      return { busy, cancelled: [] };
    };
    return { write, written, batches, problems };
  }

  it('writes every finished job once, one large result a flush, progress and start marks in the first', async () => {
    let batcher!: ReleaseBatcher;
    const errors: unknown[] = [];
    const r = recorder(() => batcher);
    batcher = new ReleaseBatcher(r.write, (error) => errors.push(error));
    batcher.markStarted('s1', 'c');
    batcher.reportProgress('p1', '{"n":1}', 'c');
    batcher.reportProgress('j1', '{"n":1}', 'c'); // j1 finishes later: its progress rides on its release
    for (const id of ['j1', 'j2', 'j3']) batcher.complete({ id, claim: 'c', result: big });
    batcher.fail({ id: 'f1', claim: 'c', error: 'boom', code: null, delayMs: 0 });
    await batcher.flush();
    assert.equal(r.batches.length, 1, 'flush() wrote one flush');
    assert.deepEqual(r.batches[0].completed.map((c) => c.id), ['j1']);
    assert.deepEqual(r.batches[0].failed.map((f) => f.id), ['f1'], 'a small failure fits beside it');
    assert.equal(r.batches[0].completed[0].progress, '{"n":1}');
    assert.deepEqual(r.batches[0].started, ['s1']);
    assert.deepEqual([...r.batches[0].progress.keys()], ['p1']);
    assert.ok(!batcher.idle, 'not idle with j2 and j3 unwritten');
    assert.deepEqual(batcher.unwrittenIds().sort(), ['j2', 'j3']);
    while (!batcher.idle) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(r.written, ['j1', 'f1', 'j2', 'j3']);
    assert.deepEqual(r.problems, []);
    assert.deepEqual(errors, []);
    await batcher.stop();
  });

  it('holds up a busy job of a partial flush and writes it once, stop() included', async () => {
    let batcher!: ReleaseBatcher;
    const r = recorder(() => batcher, new Set(['j1', 'j2']));
    batcher = new ReleaseBatcher(r.write, () => {});
    for (const id of ['j1', 'j2', 'j3', 'j4']) batcher.complete({ id, claim: 'c', result: big });
    await batcher.stop();
    assert.deepEqual([...r.written].sort(), ['j1', 'j2', 'j3', 'j4']);
    assert.equal(new Set(r.written).size, r.written.length, `written once each: ${r.written}`);
    assert.ok(r.batches.every((b) => b.completed.length <= 1), 'one large result a flush');
    assert.deepEqual(r.problems, []);
    assert.ok(batcher.idle);
    assert.equal(batcher.unwritten, 0);
  });
});
