import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { type BrowserContext, chromium } from "playwright-core";

/** Debian's Chromium, which the dashboard's browser tests drive through playwright-core. */
export const CHROMIUM = "/usr/bin/chromium";

/** Headless Chromium with a fresh profile; `close()` closes it and removes the profile. */
export async function launchChromium(): Promise<{ browser: BrowserContext; close(): Promise<void> }> {
  if (!existsSync(CHROMIUM))
    assert.fail(
      `${CHROMIUM} is missing: install Debian's Chromium with \`apt-get update && apt-get install -y chromium\``,
    );
  const profile = await mkdtemp(path.join(tmpdir(), "ef-chromium-"));
  // A fresh profile per run; Playwright takes it as the persistent context's directory (--user-data-dir).
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1360, height: 1000 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  return {
    browser,
    async close() {
      await browser.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}
