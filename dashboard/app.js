// model-gateway dashboard: polls GET /v1/gateway/ranks and renders every DP rank of every engine group, the history
// charts (charts.js, uPlot) and the event list (events.js). Plain ES modules, no build step. The API key (when the
// gateway has one) is typed by the user, kept in sessionStorage for this tab only, and sent as
// `Authorization: Bearer`; it never goes into the URL.
import { Charts } from './charts.js';
import { EventList } from './events.js';

const POLL_MS = 500;
const KEY_STORE = 'model-gateway.api-key';

const $ = (id) => document.getElementById(id);
const charts = new Charts($('history'));
const events = new EventList($('events'), $('events-empty'));
let apiKey = sessionStorage.getItem(KEY_STORE) ?? '';
let updates = 0;

$('api-key').value = apiKey;
$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  apiKey = $('api-key').value.trim();
  if (apiKey === '') sessionStorage.removeItem(KEY_STORE);
  else sessionStorage.setItem(KEY_STORE, apiKey);
  $('key-hint').textContent = '';
  void poll();
});

function fmt(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return '–';
  return Number(value).toFixed(digits);
}

function ms(value) {
  if (value === null || value === undefined) return '–';
  return value >= 100 ? value.toFixed(0) : value.toFixed(1);
}

function pct(p) {
  return `${ms(p.p50)} / ${ms(p.p90)} / ${ms(p.p99)}`;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function kvCell(ratio) {
  if (ratio === null) return el('span', { class: 'muted' }, '–');
  const wrap = el('span', { class: 'kv' });
  const track = el('span', { class: 'track' });
  const fill = el('span', { class: 'fill' });
  fill.style.width = `${Math.min(100, Math.max(0, ratio * 100)).toFixed(1)}%`;
  track.append(fill);
  wrap.append(track, `${(ratio * 100).toFixed(1)}%`);
  return wrap;
}

/** The state cell: the state, and for a dead rank why (its death cause). */
function stateCell(state, cause) {
  if (state !== 'dead' || cause === null) return state;
  return el('span', {}, state, el('span', { class: 'cause', 'data-cause': cause }, cause));
}

const COLUMNS = [
  ['rank', 'dp rank'],
  ['state', 'state'],
  ['in_flight', 'in-flight'],
  ['num_running_reqs', 'running'],
  ['num_waiting_reqs', 'waiting'],
  ['kv_cache_usage', 'KV cache'],
  ['dispatch_rate', 'dispatch/s'],
  ['tokens', 'tokens/s'],
  ['ttft', 'TTFT p50/p90/p99 ms'],
  ['itl', 'ITL p50/p90/p99 ms'],
  ['dispatched', 'dispatched (pinned)'],
];

function rankRow(group, r) {
  const state = r.state ?? (group.alive ? 'connected' : 'dead');
  const cells = {
    rank: r.dp_rank,
    state: stateCell(state, r.cause ?? null),
    in_flight: r.in_flight,
    num_running_reqs: fmt(r.num_running_reqs),
    num_waiting_reqs: fmt(r.num_waiting_reqs),
    kv_cache_usage: kvCell(r.kv_cache_usage),
    dispatch_rate: fmt(r.dispatch_rate, 1),
    tokens: fmt(r.generation_tokens_per_second, 0),
    ttft: pct(r.ttft_ms),
    itl: pct(r.itl_ms),
    dispatched: `${r.dispatched_pinned + r.dispatched_unpinned} (${r.dispatched_pinned})`,
  };
  const tr = el('tr', { 'data-group': group.name, 'data-rank': String(r.dp_rank), class: `rank-${state}` });
  for (const [field] of COLUMNS) {
    const td = el('td', { 'data-field': field }, cells[field]);
    if (field === 'state') td.className = `state-${state}`;
    tr.append(td);
  }
  return tr;
}

// Flow control's queue of a group (issue 30): waiting requests per priority band and per tenant, and how queued
// requests ended. Null when flow control is off: nothing is shown.
function queuePanel(fc) {
  if (fc === null || fc === undefined) return null;
  const bands = Object.entries(fc.queued_by_band).map(([band, n]) =>
    el('span', { class: `queue-band${n > 0 ? ' busy' : ''}`, 'data-band': band }, `${band} ${n}`),
  );
  const tenants = Object.entries(fc.queued_by_tenant);
  const tenantList =
    tenants.length === 0
      ? el('span', { class: 'muted' }, 'no tenant waiting')
      : el(
          'span',
          {},
          ...tenants.map(([t, n]) => el('span', { class: 'queue-tenant', 'data-tenant': t }, `${t} ${n}`)),
        );
  const o = fc.outcomes;
  const ended = `granted ${o.granted} · timed out ${o.timed_out} · refused ${o.refused} · shed ${o.shed} · left ${o.left}`;
  return el(
    'div',
    { class: 'queue' },
    el('span', { class: 'label' }, 'queue'),
    ...bands,
    el('span', { class: 'label' }, 'tenants'),
    tenantList,
    el('span', { class: 'muted queue-ended' }, ended),
  );
}

function render(view) {
  $('model').textContent = view.served_model_names.join(', ');
  const totals = {
    ...view.server,
    dispatch_rate: 0,
    tokens_per_second: 0,
  };
  const sections = [];
  for (const g of view.groups) {
    // The group's status as /health reports it: ok, degraded (a rank is not ready), starting or unavailable.
    const status = g.alive ? g.status : 'unavailable';
    const badge = el('span', { class: `badge ${status}` }, status);
    const head = el('tr', {}, ...COLUMNS.map(([, label]) => el('th', {}, label)));
    const body = el('tbody');
    for (const r of g.ranks) {
      totals.dispatch_rate += r.dispatch_rate;
      totals.tokens_per_second += r.generation_tokens_per_second;
      body.append(rankRow(g, r));
    }
    sections.push(
      el(
        'section',
        { class: 'group', 'data-group': g.name },
        el('h2', {}, `${g.name} · ${g.engine} · ${g.ranks.length} DP rank${g.ranks.length === 1 ? '' : 's'}`, badge),
        ...[queuePanel(g.flow_control)].filter((x) => x !== null),
        el('table', {}, el('thead', {}, head), body),
      ),
    );
  }
  $('groups').replaceChildren(...sections);
  for (const node of document.querySelectorAll('[data-total]')) {
    const name = node.getAttribute('data-total');
    const v = totals[name];
    node.textContent =
      name === 'kv_cache_usage_perc' ? `${(v * 100).toFixed(1)}%` : name === 'dispatch_rate' ? fmt(v, 1) : fmt(v);
  }
}

function setStatus(ok, text) {
  $('status').className = `dot ${ok ? 'ok' : 'bad'}`;
  $('status-text').textContent = text;
}

async function poll() {
  const headers = { accept: 'application/json' };
  if (apiKey !== '') headers.authorization = `Bearer ${apiKey}`;
  try {
    const res = await fetch('/v1/gateway/ranks', { headers, cache: 'no-store', signal: AbortSignal.timeout(2000) });
    if (res.status === 401 || res.status === 403) {
      setStatus(false, `${res.status}: the gateway needs an API key`);
      $('key-hint').textContent = apiKey === '' ? 'enter the API key' : 'that key was refused';
      return;
    }
    if (!res.ok) {
      setStatus(false, `HTTP ${res.status}`);
      return;
    }
    const view = await res.json();
    render(view);
    charts.add(view);
    events.update(view);
    updates++;
    document.body.dataset.updates = String(updates);
    setStatus(true, `live · updated ${new Date().toLocaleTimeString()}`);
  } catch (err) {
    setStatus(false, `unreachable (${err instanceof Error ? err.message : String(err)})`);
  }
}

async function loop() {
  for (;;) {
    const started = performance.now();
    await poll();
    await new Promise((r) => setTimeout(r, Math.max(0, POLL_MS - (performance.now() - started))));
  }
}

void loop();
