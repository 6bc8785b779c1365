// The npm `consul` package drives Muster's Consul-compatible API unchanged (SPEC E1).
//
// Run by .ci/consul.sh (`node --test`), which starts the servers and sets the same MUSTER_*
// variables as for test_py_consul.py, plus MUSTER_NPM_CONSUL: where `npm install consul`
// put the package. Every wait is a bounded poll; a failure says what the server last answered.

import { test } from "node:test";
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
// The package exports the class itself (`module.exports = Consul`).
const Consul = require(process.env.MUSTER_NPM_CONSUL ?? "consul");

const env = process.env;
const HOST = env.MUSTER_CONSUL_HOST ?? "127.0.0.1";
const PORT = Number(env.MUSTER_CONSUL_PORT ?? 8500);
const HTTP = env.MUSTER_HTTP ?? "http://127.0.0.1:7070";
const TENANT = env.MUSTER_CONSUL_TENANT ?? "default";
const NAMESPACE = env.MUSTER_CONSUL_NAMESPACE ?? "default";
// Bounds of the polls: TTLs here are 1 s and the deregistration delay 2 s.
const STATE_TIMEOUT_MS = 15_000;
const POLL_MS = 100;

const clients = [];
function client(port = PORT, token) {
  const c = new Consul({ host: HOST, port, defaults: token ? { token } : undefined });
  clients.push(c);
  return c;
}
test.after(() => clients.forEach((c) => c.destroy()));

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function poll(probe, what, timeoutMs = STATE_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    const [done, value] = await probe();
    last = value;
    if (done) return value;
    await sleep(POLL_MS);
  }
  assert.fail(`${what}: not within ${timeoutMs} ms; the server last answered ${JSON.stringify(last)}`);
}

const entry = (nodes, id) => nodes.find((n) => n.Service.ID === id);
const checkStatus = (node, checkId) => node.Checks.find((c) => c.CheckID === checkId)?.Status;

// health.service with the response, to read X-Consul-Index.
async function healthWithIndex(c, opts) {
  const ctx = new EventEmitter();
  ctx.includeResponse = true;
  const [res, nodes] = await c.health.service({ ...opts, ctx });
  return { index: BigInt(res.headers["x-consul-index"]), nodes };
}

const listed = (c, service, id, passing = false) => async () => {
  const nodes = await c.health.service({ service, passing });
  return [entry(nodes, id) !== undefined, nodes];
};

test("a TTL check passed is listed as passing", async () => {
  const c = client();
  await c.agent.service.register({
    name: "node-web", id: "node-web-1", address: "127.0.0.1", port: 8080, tags: ["v1"],
    meta: { team: "edge" }, check: { ttl: "30s" },
  });
  assert.ok("node-web-1" in (await c.agent.service.list()));
  const before = await c.health.service({ service: "node-web", passing: true });
  assert.equal(entry(before, "node-web-1"), undefined, "listed as passing before any pass");
  await c.agent.check.pass({ id: "service:node-web-1", note: "warmed up" });
  const nodes = await poll(listed(c, "node-web", "node-web-1", true), "node-web-1 in health.service(passing)");
  const node = entry(nodes, "node-web-1");
  assert.equal(node.Service.Service, "node-web");
  assert.equal(node.Service.Port, 8080);
  assert.equal(node.Service.Address, "127.0.0.1");
  assert.deepEqual(node.Service.Tags, ["v1"]);
  assert.equal(node.Service.Meta.team, "edge");
  assert.equal(checkStatus(node, "service:node-web-1"), "passing", JSON.stringify(node.Checks));
  assert.equal(checkStatus(node, "serfHealth"), "passing", JSON.stringify(node.Checks));
  // The pass's note is the check's Output, in health and in the agent's own view.
  const output = node.Checks.find((ch) => ch.CheckID === "service:node-web-1")?.Output;
  assert.equal(output, "warmed up", JSON.stringify(node.Checks));
  assert.equal((await c.agent.check.list())["service:node-web-1"].Output, "warmed up");
  await c.agent.service.deregister("node-web-1");
  await poll(async () => [!(await listed(c, "node-web", "node-web-1")())[0], null], "node-web-1 deregistered");
});

test("a blocking query waits out its wait when nothing changes and wakes on a register", async () => {
  const c = client();
  await c.agent.service.register({ name: "node-block", id: "node-block-1", port: 9000 });
  await poll(listed(c, "node-block", "node-block-1"), "node-block-1 listed");
  const { index } = await healthWithIndex(c, { service: "node-block" });
  assert.ok(index >= 1n, `X-Consul-Index ${index}`);

  // Nothing changes in this service, though another one is written meanwhile.
  const other = sleep(300).then(() => client().agent.service.register({ name: "node-elsewhere", id: "node-elsewhere-1" }));
  const started = Date.now();
  const same = await healthWithIndex(c, { service: "node-block", index: index.toString(), wait: "2s" });
  const waited = Date.now() - started;
  await other;
  assert.equal(same.index, index, `the index moved with nothing changed in node-block: ${JSON.stringify(same.nodes)}`);
  assert.ok(waited >= 1000, `the blocking query did not block (${waited} ms)`);

  // Another client registers an instance: the query (waiting up to 60 s) returns early.
  const blocked = healthWithIndex(client(), { service: "node-block", index: index.toString(), wait: "60s" });
  await sleep(300);
  await client().agent.service.register({ name: "node-block", id: "node-block-2", port: 9001 });
  // The register has returned (committed): the query is answered within 1 s of it.
  const woke = await Promise.race([blocked, sleep(1_000).then(() => null)]);
  assert.ok(woke, "the blocking query did not wake within 1 s of a register (wait 60 s)");
  assert.ok(woke.index > index, `index ${woke.index} after ${index}`);
  assert.ok(entry(woke.nodes, "node-block-2"), JSON.stringify(woke.nodes));
});

test("TTL silence turns critical and DeregisterCriticalServiceAfter removes it", async () => {
  const c = client();
  await c.agent.service.register({
    name: "node-ttl", id: "node-ttl-1", port: 9100,
    check: { ttl: "1s", deregistercriticalserviceafter: "2s" },
  });
  await c.agent.check.pass("service:node-ttl-1");
  await poll(listed(c, "node-ttl", "node-ttl-1", true), "node-ttl-1 passing");
  const nodes = await poll(async () => {
    const nodes = await c.health.service("node-ttl");
    const node = entry(nodes, "node-ttl-1");
    // Gone already counts too: the deregistration can come before this poll sees critical.
    return [node === undefined || checkStatus(node, "service:node-ttl-1") === "critical", nodes];
  }, "node-ttl-1 critical after TTL silence");
  if (entry(nodes, "node-ttl-1")) {
    const passing = await c.health.service({ service: "node-ttl", passing: true });
    assert.equal(entry(passing, "node-ttl-1"), undefined, "a critical instance is listed as passing");
  }
  await poll(async () => {
    const [present, nodes] = await listed(c, "node-ttl", "node-ttl-1")();
    return [!present, nodes];
  }, "node-ttl-1 removed by DeregisterCriticalServiceAfter");
  assert.ok(!("node-ttl-1" in (await c.agent.service.list())));
});

test("a Muster drain shows as maintenance", async () => {
  const c = client();
  await c.agent.service.register({ name: "node-drain", id: "node-drain-1", port: 9200, check: { ttl: "30s" } });
  await c.agent.check.pass("service:node-drain-1");
  await poll(listed(c, "node-drain", "node-drain-1", true), "node-drain-1 passing");
  const snapshot = await (await fetch(`${HTTP}/v1/registry/${TENANT}/${NAMESPACE}/node-drain`)).json();
  const native = snapshot.endpoints.find((e) => e.instance === "node-drain-1");
  execFileSync(env.MUSTER_BIN ?? "muster", [
    "drain", `${NAMESPACE}/node-drain`, "node-drain-1", "--incarnation", String(native.incarnation),
    "--reason", "deploy", "--server", HTTP, "--tenant", TENANT,
  ], { timeout: 30_000, stdio: "pipe" });
  await poll(async () => {
    const nodes = await c.health.service("node-drain");
    const node = entry(nodes, "node-drain-1");
    return [node !== undefined && checkStatus(node, "_service_maintenance:node-drain-1") === "critical", nodes];
  }, "node-drain-1 in maintenance after muster drain");
  const passing = await c.health.service({ service: "node-drain", passing: true });
  assert.equal(entry(passing, "node-drain-1"), undefined, "a draining instance is listed as passing");
});

test("Consul maintenance mode toggles", async () => {
  const c = client();
  await c.agent.service.register({ name: "node-maint", id: "node-maint-1", port: 9300 });
  await poll(listed(c, "node-maint", "node-maint-1", true), "node-maint-1 passing");
  const inMaintenance = (wanted) => async () => {
    const nodes = await c.health.service("node-maint");
    const node = entry(nodes, "node-maint-1");
    const found = node !== undefined && checkStatus(node, "_service_maintenance:node-maint-1") !== undefined;
    return [found === wanted, nodes];
  };
  await c.agent.service.maintenance({ id: "node-maint-1", enable: true, reason: "upgrade" });
  await poll(inMaintenance(true), "node-maint-1 in maintenance");
  await c.agent.service.maintenance({ id: "node-maint-1", enable: false });
  await poll(inMaintenance(false), "node-maint-1 out of maintenance");
  await poll(listed(c, "node-maint", "node-maint-1", true), "node-maint-1 passing again");
});

test("a token without rights is an ACL error", async () => {
  const port = Number(env.MUSTER_AUTH_CONSUL_PORT);
  const denied = client(port, env.MUSTER_DENIED_TOKEN);
  await assert.rejects(
    denied.agent.service.register({ name: "node-secret", id: "node-secret-1", port: 9400 }),
    (err) => {
      assert.equal(err.statusCode, 403, `${err}`);
      assert.ok(err.isPapi && err.isResponse, `${err}`);
      return true;
    },
  );
  const operator = client(port, env.MUSTER_OPERATOR_TOKEN);
  assert.deepEqual(await operator.health.service("node-secret"), [], "a refused registration left an instance behind");
  await operator.agent.service.register({ name: "node-secret", id: "node-secret-1", port: 9400 });
  await poll(listed(operator, "node-secret", "node-secret-1"), "node-secret-1 listed");
});
