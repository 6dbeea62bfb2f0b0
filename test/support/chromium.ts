/**
 * Where Debian's Chromium is, for the browser tests (browser.ts) and for the launcher's closing
 * note (run-tests.ts), which must load without playwright-core. CHROMIUM_PATH overrides.
 */
import { existsSync } from 'node:fs';

const CANDIDATES = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter((path): path is string => !!path);

export const NO_BROWSER_MESSAGE =
  'Chromium is not installed, so the browser tests did not run. Install it (apt-get install chromium, as .ci/run does, or set CHROMIUM_PATH) and run `npm test -- dashboard`.';

export function chromiumPath(): string | undefined {
  return CANDIDATES.find((path) => existsSync(path));
}
