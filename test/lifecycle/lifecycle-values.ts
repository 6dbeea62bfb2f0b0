/**
 * The values test/lifecycle/states-and-results.test.ts has its tasks return and report: results
 * of every kind (kept, or refused), and progress values good, bad and odd.
 */

/** The app's maxJsonBytes: small, so that limits are cheap to reach. */
export const MAX_JSON_BYTES = 1_000;

/** An error with a `code` property, as drivers and apps throw them. */
export const coded = (message: string, code: unknown) => Object.assign(new Error(message), { code });

/** What the `returns` task returns, by payload.kind. */
export const RESULTS: Record<string, () => unknown> = {
  object: () => ({ invoice: 'INV-7', lines: [{ sku: 'a', qty: 2 }], total: 12.5, paid: true, note: null, text: 'héllo ✓' }),
  undefined: () => undefined,
  zero: () => 0,
  false: () => false,
  emptyString: () => '',
  nearLimit: () => 'x'.repeat(MAX_JSON_BYTES - 10), // 992 bytes of JSON
  emoji: () => ({ mood: '😀', text: 'a\\u0000 is only text here' }), // a whole surrogate pair; a backslash, not U+0000
  bigint: () => 10n,
  cycle: () => {
    const node: Record<string, unknown> = { name: 'loop' };
    node.self = node;
    return node;
  },
  nul: () => 'before\u0000after',
  loneSurrogate: () => ({ cut: 'half an emoji: \ud83d' }),
  function: () => () => 1,
  tooLarge: () => 'é'.repeat(500), // 502 characters but 1002 bytes of JSON
};

/** What each bad ctx.progress() value threw (the code), or 'accepted': read after the job has run. */
export const progressOutcomes = new Map<string, string>();
export const NEAR_LIMIT_PROGRESS = { note: 'x'.repeat(4_000) }; // 4,011 bytes of JSON: under 4 kB
export const BAD_PROGRESS: Array<[string, unknown]> = [
  ['-1', -1],
  ['101', 101],
  ['NaN', Number.NaN],
  ['Infinity', Number.POSITIVE_INFINITY],
  ['an array', [10]],
  ['a string', '50'],
  ['null', null],
  ['undefined', undefined],
  ['a boolean', true],
  ['an object over 4 kB', { note: 'x'.repeat(4_100) }],
  ['an object holding a BigInt', { n: 1n }],
  ['an object holding U+0000', { step: 'a\u0000' }],
  ['an object holding a lone surrogate', { step: '\udc00' }],
];
/** Objects that are not plain, whose JSON is not an object: what JSON.stringify makes of them would be stored. */
export const ODD_PROGRESS: Array<[string, unknown]> = [
  ['a Date', new Date(0)],
  ['an object whose toJSON gives 500', { toJSON: () => 500 }],
  ['an object whose toJSON gives an array', { toJSON: () => [1, 2] }],
];
