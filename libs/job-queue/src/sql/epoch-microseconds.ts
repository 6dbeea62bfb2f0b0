/**
 * Times the hot path reads back (a claim's rows, an add's new rows) travel as whole epoch
 * microseconds: an int8 is read at a fraction of the cost of a timestamptz's text (pg parses
 * that with a regular expression: a sixth of addMany()'s JavaScript), and a float8 would
 * depend on the session's extra_float_digits.
 */

/**
 * SQL: `time` as whole epoch microseconds, clamped to the range of a JS Date (±8.64e15 ms), so
 * that '-infinity' (add_job takes it) is the earliest date rather than an int8 overflow.
 */
export const epochMicroseconds = (time: string) => `greatest(least(date_part('epoch', ${time}) * 1000000, 8.64e18), -8.64e18)::int8`;

/**
 * A time sent by epochMicroseconds (an int8: a string, or a number where the app parses int8
 * itself) as the Date its timestamptz text gives: the millisecond it falls in. (date_part's
 * float8 seconds are within a quarter of a microsecond, so the int8 is exact.)
 */
export const dateOfEpochMicroseconds = (us: string | number) => new Date(Math.floor(Number(us) / 1000));
