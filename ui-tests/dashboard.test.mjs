// Browser tests of the dashboard (SPEC U2): a real `muster serve`, Debian's chromium driven by
// playwright-core, every change made through the HTTP API and watched on the page without a
// reload. Run with `node --test` in ui-tests/ (or `.ci/ui.sh`).
//
// Env: MUSTER_BIN (default target/release/muster, else target/debug/muster), CHROMIUM
// (default /usr/bin/chromium), SCREENSHOTS (default ui-tests/screenshots).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const bin = process.env.MUSTER_BIN ||
  ['target/release/muster', 'target/debug/muster'].map((p) => path.join(root, p)).find(existsSync);
const screenshots = process.env.SCREENSHOTS || path.join(here, 'screenshots');
// The dashboard must show an API change within 2 s without a reload (SPEC U2).
const LIVE_MS = 2000;
// A lab run of a small scenario in a debug build takes seconds; this only bounds a hang.
const LAB_MS = 120000;

const servers = [];

// Starts `muster serve` on free ports in a temporary data dir; resolves with its base URL once
// it printed its ready line.
async function serve(extra = []) {
  assert.ok(bin && existsSync(bin), `no muster binary (set MUSTER_BIN); looked for ${bin}`);
  const dir = mkdtempSync(path.join(tmpdir(), 'muster-ui-'));
  const args = ['serve', '--json', '--data-dir', path.join(dir, 'data'), '--http', '127.0.0.1:0',
    '--dns', '127.0.0.1:0', '--consul', 'off', ...extra];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stderr.on('data', (chunk) => { log += chunk; });
  const ready = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('muster serve did not start: ' + log)), 30000);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const newline = out.indexOf('\n');
      if (newline >= 0) { clearTimeout(timer); resolve(JSON.parse(out.slice(0, newline))); }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`muster serve exited ${code}: ${log}`)); });
  });
  const server = { base: 'http://' + ready.http, child, dir, log: () => log };
  servers.push(server);
  return server;
}

async function api(server, method, route, body, secret) {
  const headers = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (secret) headers.authorization = 'Bearer ' + secret;
  const response = await fetch(server.base + route, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  assert.ok(response.ok, `${method} ${route}: ${response.status} ${text}`);
  return json;
}

function register(server, key, instance, ip, extra = {}, secret) {
  return api(server, 'PUT', `/v1/registry/${key}/${instance}`, {
    incarnation: 1,
    endpoint: {
      addresses: [{ ip }],
      ports: [{ name: 'http', port: 8080, protocol: 'http' }],
      locality: { region: 'eu-west', zone: 'eu-west-1a' },
      weight: 100,
    },
    ...extra,
  }, secret);
}

let browser;
let server;
let page;
const consoleErrors = [];

function watchConsole(target, into) {
  target.on('console', (message) => {
    if (message.type() === 'error') into.push(message.text());
  });
  target.on('pageerror', (error) => into.push('pageerror: ' + error.message));
}

async function shot(target, name) {
  mkdirSync(screenshots, { recursive: true });
  await target.screenshot({ path: path.join(screenshots, name + '.png'), fullPage: true });
}

before(async () => {
  server = await serve();
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watchConsole(page, consoleErrors);
});

after(async () => {
  if (browser) await browser.close();
  for (const s of servers) {
    s.child.kill('SIGTERM');
    await new Promise((resolve) => { if (s.child.exitCode !== null) resolve(); else s.child.on('exit', resolve); });
    rmSync(s.dir, { recursive: true, force: true });
  }
});

const KEY = 'acme/prod/api';
const row = (instance) => `[data-test="endpoint-row"][data-instance="${instance}"]`;

test('two endpoints registered through the API both appear on the service view', async () => {
  await register(server, KEY, 'api-0', '10.0.0.1', { lease: { ttl_ms: 60000 } });
  await register(server, KEY, 'api-1', '10.0.0.2', { lease: { ttl_ms: 60000 } });
  await page.goto(`${server.base}/ui/#/${KEY}`);
  await page.locator('[data-test="endpoint-row"]').nth(1).waitFor();
  const instances = await page.locator('[data-test="endpoint-row"]').evaluateAll(
    (rows) => rows.map((r) => r.dataset.instance));
  assert.deepEqual(instances, ['api-0', 'api-1']);
  assert.equal(await page.locator(`${row('api-0')} [data-test="endpoint-state"]`).textContent(), 'ready');
  assert.equal(await page.locator(`${row('api-0')} [data-test="endpoint-addresses"]`).textContent(), '10.0.0.1');
  assert.match(await page.locator(`${row('api-0')} [data-test="endpoint-locality"]`).textContent(), /eu-west-1a/);
  await page.locator('[data-test="convergence-panel"]').waitFor();
});

test('a drain through the API shows on the page within 2 s, without a reload', async () => {
  // A reload would lose this mark.
  await page.evaluate(() => { window.notReloaded = true; });
  await api(server, 'POST', `/v1/registry/${KEY}/api-1/drain`, { incarnation: 1, reason: 'deploy' });
  await page.waitForFunction((selector) => {
    const state = document.querySelector(selector + ' [data-test="endpoint-state"]');
    return state && state.textContent === 'draining';
  }, row('api-1'), { timeout: LIVE_MS });
  assert.equal(await page.evaluate(() => window.notReloaded), true, 'the page was not reloaded');
  assert.match(await page.locator(`${row('api-1')} [data-test="endpoint-observation"]`).textContent(), /owner .*deploy/);
  assert.equal(await page.locator(`${row('api-0')} [data-test="endpoint-state"]`).textContent(), 'ready');
});

test('the lease countdown counts down', async () => {
  const cell = `${row('api-0')} [data-test="lease-countdown"]`;
  await page.waitForFunction((s) => document.querySelector(s)?.dataset.remainingMs > 0, cell, { timeout: LIVE_MS });
  const first = Number(await page.locator(cell).getAttribute('data-remaining-ms'));
  assert.ok(first > 50000 && first <= 60000, `a 60 s lease shows ${first} ms left`);
  await page.waitForFunction(([s, from]) => Number(document.querySelector(s).dataset.remainingMs) <= from - 500,
    [cell, first], { timeout: LIVE_MS });
  assert.match(await page.locator(cell).textContent(), /^\d+\.\d s$/);
});

test('the convergence panel shows the subscribers that reported the service', async () => {
  const before = await api(server, 'GET', '/v1/status');
  const applied = (revision, at) => [{ service: { tenant: 'acme', namespace: 'prod', service: 'api' }, revision, received_unix_ms: at }];
  const report = (i, revision, at) => api(server, 'POST', '/v1/convergence/report',
    { client_id: `ui-test:${i}`, cohort: i % 2 ? 'zone=b' : 'zone=a', applied: applied(revision, at) });
  for (let i = 0; i < 12; i++) await report(i, before.revision, Date.now());
  // A change of the service: ten subscribers report it, a few ms apart; two stay behind.
  const change = await register(server, KEY, 'api-2', '10.0.0.3');
  await page.locator(row('api-2')).waitFor({ timeout: LIVE_MS });
  const at = Date.now();
  for (let i = 0; i < 10; i++) await report(i, change.revision, at + 3 * i);
  await page.waitForFunction(() => {
    const text = document.querySelector('[data-test="convergence-applied"]')?.textContent || '';
    return text === '10 / 12';
  }, null, { timeout: LIVE_MS });
  assert.equal(await page.locator('[data-test="convergence-panel"]').getAttribute('data-state'), 'live');
  const counted = await page.locator('[data-test="latency-bar"]').evaluateAll(
    (bars) => bars.reduce((sum, bar) => sum + Number(bar.dataset.count), 0));
  assert.equal(counted, 10, 'the histogram holds the ten measured applications');
  assert.equal(await page.locator('[data-test="straggler-row"]').count(), 2);
  await shot(page, 'service');
});

test('the overview lists the service with its counts per state, live', async () => {
  await page.goto(`${server.base}/ui/#/`);
  const service = `[data-test="service-row"][data-service="${KEY}"]`;
  await page.locator(service).waitFor();
  const count = (state) => page.locator(`${service} [data-test="state-count"][data-state="${state}"]`).textContent();
  assert.equal(await count('ready'), '2');
  assert.equal(await count('draining'), '1');
  // A new service appears without a reload.
  await register(server, 'acme/prod/web', 'web-0', '10.0.1.1');
  await page.locator('[data-test="service-row"][data-service="acme/prod/web"]').waitFor({ timeout: LIVE_MS });
  await shot(page, 'overview');
  // The link opens the service view.
  await page.locator(`${service} [data-test="service-link"]`).click();
  await page.locator(row('api-0')).waitFor();
  assert.equal(new URL(page.url()).hash, `#/${KEY}`);
});

test('the cluster view shows the one member as leader', async () => {
  await page.goto(`${server.base}/ui/#/cluster`);
  await page.locator('[data-test="cluster-member"]').first().waitFor();
  assert.equal(await page.locator('[data-test="cluster-member"]').count(), 1);
  await page.locator('[data-test="member-leader"]').waitFor();
  assert.match(await page.locator('[data-test="cluster-applied-index"]').textContent(), /^\d+$/);
  await shot(page, 'cluster');
});

test('the lab form runs a simulation and draws its plots', async () => {
  await page.goto(`${server.base}/ui/#/lab`);
  const form = page.locator('[data-test="lab-form"]');
  await form.waitFor();
  await page.fill('[data-test="lab-scenario"]', 'hard-coded,ttl-2s');
  await page.fill('[data-test="lab-instances"]', '60');
  await page.fill('[data-test="lab-duration-ms"]', '10000');
  await page.fill('[data-test="lab-crash-at-ms"]', '3000');
  await page.fill('[data-test="lab-callers"]', '4');
  await page.fill('[data-test="lab-rate"]', '20');
  await page.click('[data-test="lab-run"]');
  await page.locator('[data-test="lab-plot"]').nth(1).waitFor({ timeout: LAB_MS });
  // Both images decoded (a broken SVG has no natural size).
  await page.waitForFunction(() => [...document.querySelectorAll('[data-test="lab-plot"]')]
    .every((img) => img.complete && img.naturalWidth > 0), null, { timeout: LIVE_MS });
  const setups = await page.locator('[data-test="lab-result-row"]').evaluateAll((rows) => rows.map((r) => r.dataset.setup));
  assert.deepEqual(setups, ['hard-coded', 'ttl-2s']);
  assert.match(new URL(page.url()).hash, /^#\/lab\?.*instances=60/);
  await shot(page, 'lab');
});

test('with auth on, the page asks for a token and shows only what it may read', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'muster-ui-auth-'));
  const config = path.join(dir, 'auth.toml');
  writeFileSync(config, '[auth]\nenabled = true\n');
  const secured = await serve(['--config', config]);
  const operator = (await api(secured, 'POST', '/v1/acl/bootstrap')).secret;
  await register(secured, 'acme/prod/api', 'api-0', '10.0.0.1', {}, operator);
  await register(secured, 'acme/prod/payroll', 'pay-0', '10.0.0.2', {}, operator);
  await register(secured, 'other/prod/api', 'api-0', '10.0.0.3', {}, operator);
  const reader = (await api(secured, 'POST', '/v1/acl/tokens',
    { tenant: 'acme', allow: ['prod/*=read,watch'], deny: ['prod/payroll=read'] }, operator)).secret;

  const authErrors = [];
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const secure = await context.newPage();
  watchConsole(secure, authErrors);
  await secure.goto(`${secured.base}/ui/#/`);
  await secure.locator('[data-test="token-form"]').waitFor();
  await secure.fill('[data-test="token-input"]', reader);
  await secure.click('[data-test="token-submit"]');
  await secure.locator('[data-test="service-row"]').first().waitFor();
  const rows = await secure.locator('[data-test="service-row"]').evaluateAll((r) => r.map((x) => x.dataset.service));
  assert.deepEqual(rows, ['acme/prod/api'], 'no payroll, no other tenant');
  assert.equal(await secure.evaluate(() => sessionStorage.getItem('muster.token')) !== null, true);
  // The cluster needs an operator token: the refusal is shown, not thrown.
  await secure.goto(`${secured.base}/ui/#/cluster`);
  await secure.locator('[data-test="message"]:not([hidden])').waitFor();
  assert.match(await secure.locator('[data-test="message"]').textContent(), /permission_denied/);
  // Reloadable: the token survives a reload of the tab.
  await secure.goto(`${secured.base}/ui/#/acme/prod/api`);
  await secure.reload();
  await secure.locator(row('api-0')).waitFor();
  await context.close();
  rmSync(dir, { recursive: true, force: true });
  // The only console errors: the browser's own note of the 403 it was shown.
  assert.deepEqual(authErrors.filter((e) => !/status of 403/.test(e)), []);
});

test('no console errors in normal use', () => {
  assert.deepEqual(consoleErrors, []);
});
