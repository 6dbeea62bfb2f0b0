/**
 * Headless Chromium for the dashboard's tests: Debian's `chromium` package (apt-get install
 * chromium; .ci/run installs it), driven by playwright-core, which downloads no browser of
 * its own. CHROMIUM_PATH overrides where it is looked for. With CI set, a missing Chromium
 * fails the run; elsewhere the tests are skipped with a message saying how to run them.
 * Screenshots go to test-output/screenshots/ in the repository (kept out of git).
 */
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { TestContext } from 'node:test';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { chromiumPath, NO_BROWSER_MESSAGE } from './chromium';

export const SCREENSHOTS = resolve(__dirname, '..', '..', '..', 'test-output', 'screenshots');

/**
 * Launches Chromium, or returns undefined after marking the test skipped (outside CI). The flags:
 * tests run as root (--no-sandbox), and this machine's closed network refuses Chromium's
 * background connections, many at a time, unless they are off.
 */
export async function launchBrowser(t: TestContext): Promise<Browser | undefined> {
  const executablePath = chromiumPath();
  if (!executablePath) {
    if (process.env.CI) throw new Error(`CI is set and ${NO_BROWSER_MESSAGE}`);
    t.skip(NO_BROWSER_MESSAGE);
    return undefined;
  }
  mkdirSync(SCREENSHOTS, { recursive: true });
  return chromium.launch({
    executablePath,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** Where a page's screenshot goes: `<platform>-<name>.png`, so that each HTTP platform's run keeps its own. */
export function screenshotPath(platform: string, name: string): string {
  return join(SCREENSHOTS, `${platform}-${name}.png`);
}

/**
 * A fresh browser context for the dashboard's operator (the tests' OperatorGuard cookie set for
 * `appUrl`, a wide viewport) and a page in it, its confirm dialogs accepted, the pages' own
 * auto-refresh off (so that nothing moves under the test).
 */
export async function operatorPage(browser: Browser, appUrl: string): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  await context.addCookies([{ name: 'operator', value: 'yes', url: appUrl }]);
  const page = await context.newPage();
  page.on('dialog', (dialog) => void dialog.accept());
  await page.addInitScript("localStorage.setItem('jq-autorefresh', 'off')");
  return { context, page };
}
