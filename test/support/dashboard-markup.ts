/**
 * Markup in job data, and the checks that a page shows it as text: for the tests that read the
 * dashboard's pages over plain HTTP (a page with markup is compared tag by tag with the same
 * page of a twin with plain text).
 */
import assert from 'node:assert/strict';

/** Markup an attacker puts into job data: closing the element or the attribute it lands in. */
export const XSS = {
  html: `</pre><script>alert('payload')</script><img src=x onerror=alert('payload')>`,
  attribute: `"><svg onload=alert('attribute')>`,
  error: `"><img src=x onerror=alert('error')></td><script>alert('error')</script>`,
  code: `'><svg/onload=alert('code')>`,
  key: `"><svg onload=alert('key')></textarea><script>alert('key')</script>`,
};
/** The twin job's data: the same fields, plain text. */
export const PLAIN = { html: 'an invoice', attribute: 'plain text', error: 'template missing', code: 'E_TEMPLATE', key: 'invoice:7' };

/**
 * The start tags of a page as an HTML parser tokenizes them: each as its name and its
 * attributes' names (`svg onload`), whatever quotes or slashes separate them. End tags,
 * comments and text are skipped.
 */
export function startTags(page: string): string[] {
  const tags: string[] = [];
  const open = /<([a-zA-Z][^\s/>]*)/g;
  const attribute = /[\s/]*(?:(>)|([^\s/>][^\s/>=]*)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]*))?)/y;
  for (let match = open.exec(page); match; match = open.exec(page)) {
    const names = [match[1].toLowerCase()];
    attribute.lastIndex = open.lastIndex;
    for (let part = attribute.exec(page); part && !part[1]; part = attribute.exec(page)) names.push(part[2].toLowerCase());
    open.lastIndex = Math.max(open.lastIndex, attribute.lastIndex);
    tags.push(names.join(' '));
  }
  return tags;
}

/** Tags of `page` that `baseline` does not have, counted (a multiset difference). */
export function extraTags(page: string[], baseline: string[]): string[] {
  const left = [...baseline];
  return page.filter((tag) => {
    const at = left.indexOf(tag);
    if (at === -1) return true;
    left.splice(at, 1);
    return false;
  });
}

/** What no page may hold: an event handler attribute, or a job's markup as markup rather than text. */
export function assertInert(page: string, what: string): void {
  const handlers = startTags(page).filter((tag) => tag.split(' ').slice(1).some((name) => name.startsWith('on')));
  assert.deepEqual(handlers, [], `${what}: no element has an on* attribute`);
  for (const [field, text] of Object.entries(XSS)) assert.ok(!page.includes(text), `${what}: the ${field} markup is not in the page unescaped`);
  assert.doesNotMatch(page, /<(script|img|svg)[\s/]+(on|src=x)/i, `${what}: no tag from the job's data`);
}
