import { quoteLiteral, timestampLiteral } from '../sql/identifier';

/** A value a statement of sql/queries.ts takes as a parameter, that inlineParameters can write as a literal. */
export type InlineValue = string | number | boolean | Date | null | readonly string[];

/**
 * A statement with its `$n` parameters written as literals, for a message of several statements
 * sent at once (the simple query protocol takes no parameters: worker/claim-connection.ts
 * oneMessage). Only the statements of sql/queries.ts go through it: their text has no `$`
 * but their parameters' (the schema is a plain identifier), and every parameter is cast where
 * it is used, so a literal reads as the value would have.
 */
export function inlineParameters(statement: string, values: readonly InlineValue[]): string {
  return statement.replace(/\$(\d+)/g, (_, n: string) => {
    const index = Number(n) - 1;
    if (index >= values.length) throw new Error(`inlineParameters: $${n} has no value`);
    return sqlLiteral(values[index]);
  });
}

/** A parameter's value as an SQL literal (an array as an array literal). */
export function sqlLiteral(value: InlineValue): string {
  if (value === null) return 'null';
  if (typeof value === 'boolean') return String(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`inlineParameters: ${value} is no number to write`);
    return value < 0 ? `(${value})` : String(value); // never `- -3`, nor `--3` (a comment)
  }
  if (typeof value === 'string') return quoteLiteral(value);
  if (value instanceof Date) return timestampLiteral(value);
  // An array literal, each element double-quoted (quotes and backslashes escaped): '{"a","b"}'.
  return quoteLiteral(`{${value.map((element) => `"${element.replace(/[\\"]/g, '\\$&')}"`).join(',')}}`);
}
