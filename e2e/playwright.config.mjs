// Playwright configuration of the real-browser tests (run by tests/browser/, which starts
// JupyterLab on 127.0.0.1 and passes its address in LAB_URL).  Debian's chromium is used:
// Playwright's own browser download is not reachable from CI machines.
import { defineConfig } from '@playwright/test';

export default defineConfig({
  testDir: './tests',
  outputDir: process.env.KQLAB_E2E_ARTIFACTS || '../out/browser',
  timeout: 300_000,
  workers: 1,
  retries: 0,
  reporter: [['list']],
  use: {
    baseURL: process.env.LAB_URL,
    viewport: { width: 1400, height: 1100 },
    screenshot: 'only-on-failure',
    trace: 'retain-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    },
  },
});
