// The Muster dashboard (SPEC U2): vanilla JS, no build step, served from the binary.
//
// Views are hash routes, each reloadable and linkable:
//   #/                           overview   <- GET /v1/overview?stream=true
//   #/{tenant}/{ns}/{service}    endpoints  <- GET /v1/watch/{t}/{ns}/{svc} (NDJSON frames)
//                                 leases    <- GET /v1/deadlines/{t}/{ns}/{svc}?stream=true
//                                 converge  <- GET /v1/convergence/{t}/{ns}/{svc}?stream=true
//   #/cluster                    members    <- GET /v1/cluster?stream=true
//   #/lab[?params]               lab run    <- GET /v1/lab/run?...
// Everything live is a stream read with fetch() + ReadableStream (so it can carry an
// Authorization header, which EventSource cannot); nothing polls. A stream that ends or
// fails is reopened with backoff. Every element a test needs has a data-test attribute
// (docs/dashboard.md lists them).
'use strict';

const TOKEN_KEY = 'muster.token';
const STATES = ['ready', 'degraded', 'starting', 'draining', 'not_serving', 'unknown'];
const LAB_SETUPS = ['reference', 'all', 'hard-coded', 'ttl-10s', 'ttl-2s', 'watch', 'eject', 'drain',
  'silence', 'preservation'];
// Reconnect backoff of a stream that ended: 0.5 s doubling to 8 s.
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 8000;

// ---- small DOM helpers -------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'test') node.dataset.test = value;
    else if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function $(selector) { return document.querySelector(selector); }

function enc(part) { return encodeURIComponent(part); }

function showMessage(text, kind) {
  const box = $('[data-test="message"]');
  if (!text) { box.hidden = true; box.textContent = ''; return; }
  box.hidden = false;
  box.dataset.kind = kind || 'error';
  box.textContent = text;
}

function setLive(state, text) {
  const badge = $('[data-test="live-status"]');
  badge.dataset.state = state;
  badge.textContent = text || state;
}

// ---- the API -----------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

function authHeaders() {
  const secret = token();
  return secret ? { Authorization: 'Bearer ' + secret } : {};
}

async function errorOf(response) {
  let code = 'http_' + response.status;
  let message = response.statusText;
  try {
    const body = await response.json();
    code = body.error.code;
    message = body.error.message;
  } catch (_) { /* not the API's error shape */ }
  return new ApiError(response.status, code, message);
}

async function request(path, signal) {
  const response = await fetch(path, { headers: authHeaders(), signal, cache: 'no-store' });
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function getJson(path, signal) {
  return (await request(path, signal)).json();
}

// Reads an NDJSON stream, calling onLine(value, response) per non-empty line; resolves when
// the server ends it.
async function readStream(path, signal, onLine) {
  const response = await request(path, signal);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline).trim();
      buffered = buffered.slice(newline + 1);
      if (!line) continue;
      const value = JSON.parse(line);
      // A change stream ends with an error line (a revoked token, a failed read).
      if (value && value.error && value.error.code) throw new ApiError(0, value.error.code, value.error.message);
      if (value) onLine(value, response);
    }
  }
}

// Keeps a stream open for the view's life: reopens it with backoff when it ends or fails.
// An API refusal (401, 403, 404 ...) stops it and goes to onRefused.
function follow(view, name, path, handlers) {
  let delay = RETRY_FIRST_MS;
  const run = async () => {
    while (!view.signal.aborted) {
      try {
        handlers.onOpen && handlers.onOpen();
        await readStream(path, view.signal, (value, response) => {
          delay = RETRY_FIRST_MS;
          view.streamState(name, 'live');
          handlers.onLine(value, response);
        });
        if (view.signal.aborted) return;
        view.streamState(name, 'reconnecting');
      } catch (error) {
        if (view.signal.aborted) return;
        // Refusals that will not change by asking again end the stream; a server that is
        // busy, restarting or without a quorum is asked again, with backoff.
        if (error instanceof ApiError && !transient(error)) {
          view.streamState(name, 'refused');
          handlers.onRefused ? handlers.onRefused(error) : refused(error);
          return;
        }
        view.streamState(name, 'reconnecting');
      }
      await sleep(delay, view.signal);
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  };
  run();
}

// Whether asking again may help: 408, 429 and 5xx, and the API's codes of the moment.
function transient(error) {
  const codes = ['request_timeout', 'too_many_watches', 'no_quorum', 'leader_unreachable', 'not_caught_up', 'stale', 'unavailable',
    'storage_failed', 'too_many_connections', 'internal', 'lab_busy'];
  return error.status === 408 || error.status === 429 || error.status >= 500 || codes.includes(error.code);
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

// An API refusal shown to the user; a 401 asks for a token.
function refused(error) {
  if (error.status === 401) {
    askForToken(error.code === 'unauthenticated' && token() ? 'The token was refused: ' + error.message : '');
    return;
  }
  showMessage(error.code + ': ' + error.message);
}

// ---- token -------------------------------------------------------------------------------

function authOn() { return document.documentElement.dataset.auth === 'on'; }

function askForToken(why) {
  const form = $('[data-test="token-form"]');
  form.hidden = false;
  if (why) showMessage(why);
  form.querySelector('input').focus();
}

function renderToken() {
  const secret = token();
  $('[data-test="token-status"]').textContent = secret ? 'token set' : (authOn() ? 'no token' : '');
  $('[data-test="token-clear"]').hidden = !secret;
}

function setupToken() {
  const form = $('[data-test="token-form"]');
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const input = form.querySelector('input');
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = '';
    form.hidden = true;
    showMessage('');
    renderToken();
    route();
  });
  $('[data-test="token-clear"]').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    renderToken();
    route();
  });
  renderToken();
}

// ---- views -------------------------------------------------------------------------------

// One view's life: its abort signal (ends its streams and timers) and its streams' states.
class View {
  constructor() {
    this.controller = new AbortController();
    this.signal = this.controller.signal;
    this.streams = new Map();
    this.timers = [];
  }

  every(ms, tick) {
    this.timers.push(setInterval(tick, ms));
  }

  streamState(name, state) {
    this.streams.set(name, state);
    const states = [...this.streams.values()];
    if (states.includes('reconnecting')) setLive('reconnecting');
    else if (states.includes('live')) setLive('live');
    else setLive(states[0] || 'idle');
  }

  close() {
    this.controller.abort();
    this.timers.forEach(clearInterval);
  }
}

let current = null;

function route() {
  if (current) current.close();
  current = new View();
  showMessage('');
  setLive('idle');
  const main = $('#view');
  main.replaceChildren();
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  let parts;
  try {
    parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  } catch (_) {
    parts = ['not-found', 'not-found', 'not-found', 'not-found'];  // a malformed link: the not-found view
  }
  for (const link of document.querySelectorAll('header nav a')) {
    const target = link.getAttribute('href').slice(1);
    link.classList.toggle('active', target === '/' ? parts.length === 0 || parts.length === 3 : path === target);
  }
  if (authOn() && !token()) {
    main.dataset.view = 'token';
    askForToken('');
    return;
  }
  if (parts.length === 0) return overview(current, main);
  if (parts.length === 1 && parts[0] === 'cluster') return cluster(current, main);
  if (parts.length === 1 && parts[0] === 'lab') return lab(current, main, new URLSearchParams(query || ''));
  if (parts.length === 3) return service(current, main, parts[0], parts[1], parts[2]);
  main.dataset.view = 'not-found';
  main.append(el('p', { test: 'not-found', text: 'No such view: #' + hash }));
}

// ---- #/ overview -------------------------------------------------------------------------

function overview(view, main) {
  main.dataset.view = 'overview';
  const revision = el('span', { test: 'overview-revision', text: '…' });
  const body = el('div', { test: 'overview' }, el('p', { class: 'muted', text: 'Loading…' }));
  main.append(el('h1', {}, 'Services ', el('small', {}, 'registry revision ', revision)), body);
  follow(view, 'overview', '/v1/overview?stream=true', {
    onLine(reply) {
      revision.textContent = reply.revision;
      body.replaceChildren(...renderOverview(reply));
    },
  });
}

function renderOverview(reply) {
  if (reply.namespaces.length === 0) {
    return [el('p', { test: 'empty', class: 'muted', text: 'No services you may read are registered.' })];
  }
  return reply.namespaces.map((ns) => {
    const name = ns.tenant + '/' + ns.namespace;
    const rows = ns.services.map((svc) => {
      const key = name + '/' + svc.service;
      return el('tr', { test: 'service-row', 'data-service': key },
        el('td', {}, el('a', { href: '#/' + key.split('/').map(enc).join('/'), test: 'service-link' }, svc.service)),
        el('td', { test: 'endpoint-total', class: 'num', text: svc.endpoints }),
        STATES.map((state) => el('td', {
          test: 'state-count', 'data-state': state, class: 'num' + (svc.states[state] ? ' state-' + state : ' zero'),
          text: svc.states[state] || 0,
        })),
        el('td', { test: 'service-revision', class: 'num', text: svc.revision }),
        el('td', { test: 'service-watchers', class: 'num', text: svc.watchers }),
        el('td', { test: 'protection', 'data-active': String(svc.protection_active) },
          svc.protection_active ? el('span', { class: 'badge warn', text: 'protected' }) : '—'));
    });
    return el('section', { test: 'namespace', 'data-namespace': name },
      el('h2', {}, name, ' ', el('small', { test: 'namespace-watchers' }, ns.watchers + ' namespace watchers')),
      el('table', {},
        el('thead', {}, el('tr', {},
          el('th', { text: 'service' }), el('th', { text: 'endpoints' }),
          STATES.map((s) => el('th', { text: s.replace('_', ' ') })),
          el('th', { text: 'revision' }), el('th', { text: 'watchers' }), el('th', { text: 'protection' }))),
        el('tbody', {}, rows)));
  });
}

// ---- #/{tenant}/{namespace}/{service} ----------------------------------------------------

function service(view, main, tenant, namespace, name) {
  main.dataset.view = 'service';
  const key = [tenant, namespace, name];
  const path = key.map(enc).join('/');
  const endpoints = new Map();
  let deadlines = new Map();
  // The server's clock minus the browser's, from the Date header (1 s resolution): applied
  // only when the two disagree by more than that, so a skewed laptop still counts right.
  let skewMs = 0;
  let revision = null;

  const convergence = convergencePanel(view, path);
  const revisionEl = el('span', { test: 'service-revision', text: '…' });
  const countEl = el('span', { test: 'endpoint-count', text: '…' });
  const tbody = el('tbody', { test: 'endpoints' });
  const empty = el('p', { test: 'empty', class: 'muted', text: 'No endpoints.', hidden: true });
  main.append(
    el('h1', {}, el('a', { href: '#/', text: tenant + '/' + namespace }), ' / ', el('span', { test: 'service-name', text: name })),
    el('p', { class: 'muted' }, 'revision ', revisionEl, ' · ', countEl, ' endpoints'),
    el('table', {},
      el('thead', {}, el('tr', {}, ['instance', 'incarnation', 'addresses', 'ports', 'locality', 'state',
        'set by', 'weight', 'lease', 'revision'].map((h) => el('th', { text: h })))),
      tbody),
    empty,
    convergence.panel);

  const render = () => {
    revisionEl.textContent = revision === null ? '…' : revision;
    countEl.textContent = endpoints.size;
    empty.hidden = endpoints.size !== 0;
    const sorted = [...endpoints.values()].sort((a, b) => (a.instance < b.instance ? -1 : 1));
    tbody.replaceChildren(...sorted.map(endpointRow));
    tick();
  };

  const endpointRow = (e) => {
    const o = e.observation || {};
    const locality = [e.locality && e.locality.region, e.locality && e.locality.zone,
      e.locality && e.locality.sub_zone].filter(Boolean).join(' / ') || '—';
    return el('tr', { test: 'endpoint-row', 'data-instance': e.instance, 'data-state': e.serving },
      el('td', { test: 'endpoint-instance', text: e.instance }),
      el('td', { test: 'endpoint-incarnation', class: 'num', text: e.incarnation }),
      el('td', { test: 'endpoint-addresses', text: e.addresses.map((a) => a.ip + (a.scope ? ' (' + a.scope + ')' : '')).join(', ') }),
      el('td', { test: 'endpoint-ports', text: (e.ports || []).map((p) => p.name + ':' + p.port + '/' + p.protocol).join(', ') || '—' }),
      el('td', { test: 'endpoint-locality', text: locality + (e.locality && e.locality.priority ? ' · p' + e.locality.priority : '') }),
      el('td', {}, el('span', { test: 'endpoint-state', class: 'badge state-' + e.serving, text: e.serving })),
      el('td', { test: 'endpoint-observation', title: o.at_ms ? new Date(o.at_ms).toISOString() : '' },
        (o.actor || '?') + ' (' + (o.principal || '?') + ')' + (o.reason ? ': ' + o.reason : '')),
      el('td', { test: 'endpoint-weight', class: 'num', text: e.weight }),
      el('td', { test: 'lease-countdown', class: 'num', 'data-instance': e.instance, 'data-lease': e.lease === null || e.lease === undefined ? '' : e.lease }),
      el('td', { test: 'endpoint-revision', class: 'num', text: e.revision }));
  };

  // The countdown: client-side, from each lease's deadline in the data; no requests.
  const tick = () => {
    const now = Date.now() + skewMs;
    for (const cell of tbody.querySelectorAll('[data-test="lease-countdown"]')) {
      const deadline = deadlines.get(cell.dataset.instance);
      if (!cell.dataset.lease) { cell.textContent = 'none'; cell.dataset.remainingMs = ''; continue; }
      if (deadline === undefined || deadline === null) { cell.textContent = 'lease ' + cell.dataset.lease; continue; }
      const remaining = Math.max(0, deadline - now);
      cell.dataset.remainingMs = String(remaining);
      cell.textContent = (remaining / 1000).toFixed(1) + ' s';
      cell.classList.toggle('expiring', remaining < 2000);
    }
  };
  view.every(100, tick);

  const apply = (frame) => {
    switch (frame.type) {
      case 'snapshot':
        for (const e of frame.snapshot.endpoints) endpoints.set(e.instance, e);
        revision = frame.snapshot.revision;
        break;
      case 'update':
        for (const event of frame.events) {
          if (event.type === 'put') endpoints.set(event.endpoint.instance, event.endpoint);
          else endpoints.delete(event.instance);
        }
        revision = frame.revision;
        convergence.changed();
        break;
      case 'progress':
        if (revision === null) revision = 0;
        break;
      case 'resync':
      case 'closing':
        return;
      case 'error':
        showMessage(frame.error.code + ': ' + frame.error.message);
        return;
      default:
        return;
    }
    render();
  };

  follow(view, 'watch', '/v1/watch/' + path, {
    // A reconnect starts from a fresh snapshot: forget what the last stream built.
    onOpen() { endpoints.clear(); revision = null; },
    onLine: apply,
  });
  follow(view, 'deadlines', '/v1/deadlines/' + path + '?stream=true', {
    onLine(reply, response) {
      const date = Date.parse(response.headers.get('date'));
      if (!Number.isNaN(date) && Math.abs(date - Date.now()) > 2000) skewMs = date - Date.now();
      deadlines = new Map(reply.endpoints.map((d) => [d.instance, d.deadline_unix_ms]));
      tick();
    },
  });
  render();
}

// Convergence (SPEC O3). The API document says first whether this server has the route (so a
// server without it costs no failing request) and whether it streams: with `stream` it is
// followed; without, it is read once and again after every change the service's watch
// delivers (driven by events, never by a timer).
function convergencePanel(view, path) {
  const panel = el('section', { test: 'convergence-panel', class: 'panel' },
    el('h2', { text: 'Convergence' }),
    el('p', { test: 'convergence-empty', class: 'muted', text: 'Loading…' }));
  const body = el('div', { test: 'convergence-body' });
  panel.append(body);
  const none = (why) => {
    panel.dataset.state = 'none';
    panel.querySelector('[data-test="convergence-empty"]').textContent = 'no convergence data' + (why ? ' (' + why + ')' : '');
    body.replaceChildren();
  };
  const show = (reply) => {
    panel.dataset.state = 'live';
    panel.querySelector('[data-test="convergence-empty"]').textContent = '';
    body.replaceChildren(...renderConvergence(reply).filter(Boolean));
  };
  const onRefused = (error) => {
    if (error.status === 404) none();
    else refused(error);
  };
  // The summary's own change stream: counts as they change, ages every few seconds.
  follow(view, 'convergence', '/v1/convergence/' + path + '?stream=true', { onLine: show, onRefused });
  return { panel, changed: () => {} };
}

function renderConvergence(c) {
  const summary = el('p', { test: 'convergence-summary' },
    el('strong', { test: 'convergence-applied', text: c.applied + ' / ' + c.live }),
    ' subscribers at revision ≥ ' + c.target + (c.cohort ? ' in ' + c.cohort : ''),
    ' · ', el('span', { test: 'convergence-state', class: 'badge ' + (c.converged ? 'state-ready' : 'state-draining'),
      text: c.converged ? 'converged' : 'converging' }));
  const byRevision = el('p', { test: 'convergence-by-revision', class: 'muted' },
    'by applied revision: ' + ((c.by_revision || []).map((r) => 'r' + r.revision + ' × ' + r.subscribers).join(', ') || 'no subscribers'),
    (c.paths || []).length ? ' · by path: ' + c.paths.map((p) => p.path + ' ' + p.applied + '/' + p.live).join(', ') : '');
  const buckets = (c.latency && c.latency.buckets) || [];
  const peak = Math.max(1, ...buckets.map((b) => b.count));
  const bars = el('div', { test: 'latency-histogram', class: 'histogram' },
    buckets.map((b) => {
      const bar = el('span', { class: 'bar' });
      bar.style.height = Math.round((100 * b.count) / peak) + '%';
      return el('div', { test: 'latency-bar', class: 'bucket', 'data-le-ms': b.le_ms === null ? 'inf' : b.le_ms,
        'data-count': b.count, title: (b.le_ms === null ? '> last' : '≤ ' + b.le_ms + ' ms') + ': ' + b.count },
      bar, el('span', { class: 'label', text: b.le_ms === null ? '∞' : b.le_ms }));
    }));
  const latency = c.latency ? el('p', { class: 'muted', test: 'latency-quantiles',
    text: 'commit→applied: p50 ' + c.latency.p50_ms + ' ms · p90 ' + c.latency.p90_ms + ' ms · p99 ' +
      c.latency.p99_ms + ' ms · max ' + c.latency.max_ms + ' ms (' + c.latency.samples + ' samples)' }) : null;
  const stragglers = el('table', { test: 'stragglers' },
    el('thead', {}, el('tr', {}, ['client', 'cohort', 'path', 'revision', 'behind', 'last report'].map((h) => el('th', { text: h })))),
    el('tbody', {}, (c.stragglers || []).map((s) => el('tr', { test: 'straggler-row', 'data-client': s.client_id },
      el('td', { text: s.client_id }), el('td', { text: s.cohort || '—' }), el('td', { text: s.path }),
      el('td', { class: 'num', text: s.revision }), el('td', { class: 'num', text: (s.behind_ms / 1000).toFixed(1) + ' s' }),
      el('td', { class: 'num', text: (s.last_report_ms / 1000).toFixed(1) + ' s ago' })))));
  const more = (c.stragglers_total || 0) > (c.stragglers || []).length
    ? el('p', { class: 'muted', text: c.stragglers_total + ' stragglers in all' }) : null;
  return [summary, byRevision, el('h3', { text: 'Latency histogram' }), bars, latency, el('h3', { text: 'Stragglers' }),
    (c.stragglers || []).length ? stragglers : el('p', { class: 'muted', test: 'no-stragglers', text: 'none' }), more];
}

// ---- #/cluster ---------------------------------------------------------------------------

function cluster(view, main) {
  main.dataset.view = 'cluster';
  const facts = el('dl', { test: 'cluster-facts', class: 'facts' });
  const tbody = el('tbody', {});
  main.append(el('h1', { text: 'Cluster' }), facts,
    el('table', {}, el('thead', {}, el('tr', {}, ['id', 'address', 'role', 'voter'].map((h) => el('th', { text: h })))), tbody));
  follow(view, 'cluster', '/v1/cluster?stream=true', {
    onLine(c) {
      const fact = (label, test, value) => [el('dt', { text: label }), el('dd', { test, text: value })];
      facts.replaceChildren(
        ...fact('this node', 'cluster-node', c.node_id),
        ...fact('leader', 'cluster-leader', c.leader === null || c.leader === undefined ? 'none' : c.leader),
        ...fact('applied index', 'cluster-applied-index', c.applied_index),
        ...fact('revision', 'cluster-revision', c.revision),
        ...fact('last leader contact', 'cluster-last-contact',
          c.last_leader_contact_ms === null || c.last_leader_contact_ms === undefined ? '—' : c.last_leader_contact_ms + ' ms ago'));
      tbody.replaceChildren(...c.members.map((m) => el('tr', { test: 'cluster-member', 'data-id': m.id },
        el('td', { class: 'num', text: m.id }), el('td', { text: m.addr }),
        el('td', {}, m.id === c.leader ? el('span', { test: 'member-leader', class: 'badge state-ready', text: 'leader' }) : 'follower',
          m.id === c.node_id ? ' · this node' : ''),
        el('td', { text: m.voter ? 'yes' : 'learner' }))));
    },
  });
}

// ---- #/lab -------------------------------------------------------------------------------

const LAB_FIELDS = [
  ['instances', 'instances', 'number', '500'],
  ['kill', 'crash (count or %)', 'text', '10%'],
  ['crash_at_ms', 'crash at (ms)', 'number', '20000'],
  ['duration_ms', 'duration (ms)', 'number', '60000'],
  ['callers', 'callers', 'number', '20'],
  ['rate', 'requests/s per caller', 'number', '100'],
  ['seed', 'seed', 'number', ''],
];

function lab(view, main, params) {
  main.dataset.view = 'lab';
  const scenario = el('input', { name: 'scenario', list: 'lab-setups', test: 'lab-scenario',
    value: params.get('scenario') || 'reference' });
  const form = el('form', { test: 'lab-form', class: 'lab-form' },
    el('label', {}, 'setups ', scenario,
      el('datalist', { id: 'lab-setups' }, LAB_SETUPS.map((s) => el('option', { value: s })))),
    LAB_FIELDS.map(([name, label, type, placeholder]) => el('label', {}, label + ' ',
      el('input', { name, type, placeholder, test: 'lab-' + name.replace(/_/g, '-'), value: params.get(name) || '' }))),
    el('button', { type: 'submit', test: 'lab-run', text: 'Run simulation' }));
  const status = el('p', { test: 'lab-status', class: 'muted' });
  const result = el('div', { test: 'lab-result' });
  main.append(el('h1', { text: 'Lab' }),
    el('p', { class: 'muted', text: 'A muster lab simulation on the real registry and client code, on a virtual clock (SPEC X1). One run at a time per server.' }),
    form, status, result);
  const run = async () => {
    const query = new URLSearchParams();
    for (const input of form.querySelectorAll('input')) if (input.value.trim()) query.set(input.name, input.value.trim());
    // The view's URL names its parameters, so a run is linkable (replaceState: no re-route).
    history.replaceState(null, '', '#/lab?' + query);
    status.textContent = 'running…';
    status.dataset.state = 'running';
    result.replaceChildren();
    form.querySelector('button').disabled = true;
    try {
      const reply = await getJson('/v1/lab/run?' + query, view.signal);
      status.textContent = 'done';
      status.dataset.state = 'done';
      result.replaceChildren(...renderLab(view, reply).filter(Boolean));
    } catch (error) {
      if (view.signal.aborted) return;
      status.dataset.state = 'error';
      status.textContent = error instanceof ApiError ? error.code + ': ' + error.message : 'the run failed';
    } finally {
      form.querySelector('button').disabled = false;
    }
  };
  form.addEventListener('submit', (event) => { event.preventDefault(); run(); });
  if ([...params.keys()].length) run();
}

function renderLab(view, reply) {
  const setups = (reply.report && reply.report.setups) || [];
  const table = el('table', { test: 'lab-setups' },
    el('thead', {}, el('tr', {}, ['setup', 'failed requests', 'stale window', 'heartbeats/s', 'lookups/s'].map((h) => el('th', { text: h })))),
    el('tbody', {}, setups.map((s) => el('tr', { test: 'lab-result-row', 'data-setup': s.name },
      el('td', { text: s.name }), el('td', { class: 'num', text: s.failed }),
      el('td', { class: 'num', text: s.stale_window_s.toFixed(2) + ' s' }),
      el('td', { class: 'num', text: s.heartbeats_per_s.toFixed(1) }),
      el('td', { class: 'num', text: s.lookups_per_s.toFixed(1) })))));
  // Plots as blob: images: an SVG shown through <img> runs no script.
  const plots = reply.plots.map((plot) => {
    const url = URL.createObjectURL(new Blob([plot.svg], { type: 'image/svg+xml' }));
    view.signal.addEventListener('abort', () => URL.revokeObjectURL(url), { once: true });
    return el('figure', {}, el('img', { test: 'lab-plot', 'data-plot': plot.name, src: url, alt: plot.name.replace(/_/g, ' ') }));
  });
  return [table, el('div', { class: 'plots' }, plots)];
}

// ---- start -------------------------------------------------------------------------------

window.addEventListener('hashchange', route);
setupToken();
route();
