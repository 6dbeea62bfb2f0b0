/**
 * A node:test reporter that writes one JSON line per failed test (file, name, error; todo
 * tests left out), for the stress script to count failures per file. run-tests.ts adds it
 * beside the spec reporter when TEST_FAILURES_FILE is set.
 */
interface TestEvent {
  type: string;
  data: { name: string; nesting: number; file?: string; todo?: string | boolean; details?: { type?: string; error?: unknown } };
}

async function* failuresReporter(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  for await (const event of source) {
    if (event.type !== 'test:fail' || event.data.details?.type === 'suite') continue;
    // a todo test's failure is expected (a known gap), and fails no run
    if (event.data.todo !== undefined && event.data.todo !== false) continue;
    const { name, file, details } = event.data;
    const error = details?.error as { cause?: unknown; message?: string } | undefined;
    const cause = error?.cause instanceof Error ? error.cause.message : error?.message;
    yield `${JSON.stringify({ file, name, error: String(cause ?? error).split('\n').slice(0, 3).join(' ') })}\n`;
  }
}

// node:test loads a reporter's module.exports itself (this file compiles to CommonJS).
export = failuresReporter;
