// Drives the approval page in Debian's headless Chromium (playwright-core, never a browser
// download) for tests/integration/approval_web.rs: signs in at the OpenID provider with the
// login given, then looks at or decides an approval. One JSON line on stdout:
//   {"url", "tenant", "rows": [ids], "state", "plan", "sql", "decision", "api", "error", "forms", "session"}
// Arguments: one JSON object {"base", "login", "action": "list"|"show"|"approve"|"deny", "id", "reason"}.
import { chromium } from 'playwright-core';

const job = JSON.parse(process.argv[2]);
const browser = await chromium.launch({
  executablePath: process.env.QUERYGATE_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const out = {};
let page;
try {
  const context = await browser.newContext();
  // Only 127.0.0.1 (the provider's page imports a web font).
  await context.route('**/*', (route) =>
    new URL(route.request().url()).hostname === '127.0.0.1' ? route.continue() : route.abort());
  page = await context.newPage();
  const target = job.action === 'list' ? `${job.base}/approve` : `${job.base}/approve/${job.id}`;
  await page.goto(target, { waitUntil: 'domcontentloaded' });
  // The provider's login form, then its consent form.
  await page.fill('input[name=login]', job.login);
  await page.fill('input[name=password]', 'any');
  await page.click('button[type=submit]');
  await page.waitForLoadState('domcontentloaded');
  if (!page.url().startsWith(job.base)) {
    await page.click('button[type=submit]');
  }
  await page.waitForURL((url) => url.toString().startsWith(job.base), { waitUntil: 'domcontentloaded' });
  const text = async (selector) => (await page.locator(selector).count()) ? (await page.locator(selector).first().textContent()) : null;
  if (job.action === 'approve' || job.action === 'deny') {
    if (await page.locator(`form#${job.action}`).count()) {
      await page.fill(`form#${job.action} input[name=reason]`, job.reason || '');
      await Promise.all([
        page.waitForNavigation({ waitUntil: 'domcontentloaded' }),
        page.click(`form#${job.action} button[type=submit]`),
      ]);
    } else {
      out.no_form = true;
    }
  }
  out.url = page.url();
  out.tenant = await text('#tenant');
  out.rows = await page.locator('tr.approval').evaluateAll((rows) => rows.map((r) => r.dataset.id));
  out.state = await text('#state');
  out.plan = await text('#plan');
  out.sql = await text('#sql');
  out.decision = await text('#decision');
  out.api = await text('#api');
  out.error = await page.locator('#error').count() ? await page.locator('#error').getAttribute('data-code') : null;
  out.error_text = await text('#error');
  out.forms = await page.locator('form#approve, form#deny').count();
  out.csrf = await page.locator('input[name=csrf]').count() ? await page.locator('input[name=csrf]').first().getAttribute('value') : null;
  const cookies = await context.cookies(`${job.base}/approve`);
  out.session = cookies.find((c) => c.name === 'qg_approve_session') || null;
} catch (err) {
  out.failure = String(err && err.stack || err);
  if (page) {
    out.at = page.url();
    out.page = (await page.content().catch(() => '')).slice(0, 3000);
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
