// A second, independent proxyless xDS client against Muster's control plane (SPEC D5): gRPC's
// Node client (@grpc/grpc-js with @grpc/grpc-js-xds), beside the Python one in .ci/xds. No
// Muster code in the client: a channel to `xds:///api.prod`, the bootstrap naming
// `muster serve --xds`. Three real grpc-js backends are registered with the muster CLI; the
// checks: calls spread over all three, and a drained one gets no new calls (within 10 s of
// the drain, and then for a whole window) while the other two keep serving.
//
// Run by .ci/xds-node.sh, which starts `muster serve --xds` and sets MUSTER_BIN,
// MUSTER_SERVER and MUSTER_XDS_ADDR.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { execFileSync } = require("child_process");

const MUSTER = process.env.MUSTER_BIN;
const XDS = process.env.MUSTER_XDS_ADDR;
const TARGET = "xds:///api.prod";
const WINDOW = 60;
const CHANGE_TIMEOUT_MS = 10000;

// The bootstrap is read when the first xDS channel is made: written before grpc loads.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "muster-xds-node-"));
const bootstrap = path.join(dir, "bootstrap.json");
fs.writeFileSync(
  bootstrap,
  JSON.stringify({
    xds_servers: [{ server_uri: XDS, channel_creds: [{ type: "insecure" }], server_features: ["xds_v3"] }],
    node: { id: "node-client-1", cluster: "ci-node", locality: { region: "r1", zone: "a" } },
  }),
);
process.env.GRPC_XDS_BOOTSTRAP = bootstrap;

const grpc = require("@grpc/grpc-js");
require("@grpc/grpc-js-xds").register();

// `/muster.ci.Echo/Who`, bytes in and out: the backend answers with its name.
const bytes = { serialize: (b) => b, deserialize: (b) => b };
const service = {
  Who: {
    path: "/muster.ci.Echo/Who",
    requestStream: false,
    responseStream: false,
    requestSerialize: bytes.serialize,
    requestDeserialize: bytes.deserialize,
    responseSerialize: bytes.serialize,
    responseDeserialize: bytes.deserialize,
  },
};

function muster(...args) {
  return execFileSync(MUSTER, args, { encoding: "utf8", timeout: 30000 });
}

async function backend(name) {
  const server = new grpc.Server();
  const counted = { name, calls: 0, server };
  server.addService(service, {
    Who: (_call, reply) => {
      counted.calls += 1;
      reply(null, Buffer.from(name));
    },
  });
  counted.port = await new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) =>
      err ? reject(err) : resolve(port),
    ),
  );
  muster("register", "prod/api", name, "--addr", `127.0.0.1:${counted.port}`, "--port-name", "grpc",
    "--incarnation", "1", "--ttl", "10m", "--region", "r1", "--zone", "a");
  return counted;
}

const Client = grpc.makeGenericClientConstructor(service, "Echo");
const client = new Client(TARGET, grpc.credentials.createInsecure());

function call() {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + 2000);
    client.Who(Buffer.alloc(0), { deadline }, (err, reply) => (err ? reject(err) : resolve(reply.toString())));
  });
}

// Who answered each of `n` calls, by name.
async function window(n = WINDOW) {
  const seen = {};
  for (let i = 0; i < n; i++) {
    const who = await call();
    seen[who] = (seen[who] || 0) + 1;
  }
  return seen;
}

async function until(condition, what) {
  const started = Date.now();
  let last = {};
  while (Date.now() - started < CHANGE_TIMEOUT_MS) {
    try {
      last = await window();
      if (condition(last)) return last;
    } catch (err) {
      last = { error: String(err) };
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: not within ${CHANGE_TIMEOUT_MS} ms (last window ${JSON.stringify(last)})`);
}

async function main() {
  const backends = [await backend("n1"), await backend("n2"), await backend("n3")];
  const spread = await until((w) => ["n1", "n2", "n3"].every((n) => (w[n] || 0) > 0), "calls reaching all three backends");
  console.log(`xds-node: calls spread over three backends: ${JSON.stringify(spread)}`);

  muster("drain", "prod/api", "n2", "--incarnation", "1", "--reason", "xds node ci");
  await until((w) => !w.n2 && (w.n1 || 0) > 0 && (w.n3 || 0) > 0, "the drained n2 getting no calls");
  const before = backends[1].calls;
  const after = await window();
  if (backends[1].calls !== before || after.n2) {
    throw new Error(`the drained n2 got calls again: ${JSON.stringify(after)}`);
  }
  console.log(`xds-node: after the drain, n2 gets none: ${JSON.stringify(after)}`);
  client.close();
  for (const b of backends) b.server.forceShutdown();
  fs.rmSync(dir, { recursive: true, force: true });
}

main().then(
  () => {
    console.log("xds-node: ok");
    process.exit(0);
  },
  (err) => {
    console.error(`xds-node: ${err.stack || err}`);
    process.exit(1);
  },
);
