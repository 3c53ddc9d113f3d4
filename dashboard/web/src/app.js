// The dashboard's single-page app: hash routing (#/, #/compare?c=0,1, #/c/{i}/{view}), the nav bar,
// errors in #error, and the live updates: /api/changes is polled every 2 s and the current view is
// drawn again (keeping the scroll and the charts' zoom) when its campaign's version moved.
// Plain ES modules, no framework; every view builds its nodes with dom.js (text only, never HTML).
import {h} from './dom.js';
import {saveZoom, forgetZoom, disposeAll, loadCharts} from './charts.js';
import campaigns from './views/campaigns.js';
import compare from './views/compare.js';
import overview from './views/overview.js';
import history from './views/history.js';
import generations from './views/generations.js';
import params from './views/params.js';
import importance from './views/importance.js';
import curves from './views/curves.js';
import pareto from './views/pareto.js';
import trials from './views/trials.js';
import trial from './views/trial.js';
import timeline from './views/timeline.js';
import stages from './views/stages.js';

const campaignViews = {
  overview: {title: 'Overview', render: overview},
  history: {title: 'History', render: history},
  generations: {title: 'Generations', render: generations},
  params: {title: 'Parameters', render: params},
  importance: {title: 'Importance', render: importance},
  curves: {title: 'Curves', render: curves},
  pareto: {title: 'Pareto', render: pareto},
  trials: {title: 'Trials', render: trials},
  timeline: {title: 'Timeline', render: timeline},
  stages: {title: 'Stages', render: stages},
};

const POLL_MS = 2000;
const main = document.getElementById('view');
const nav = document.getElementById('nav');
const errorBox = document.getElementById('error');
const liveBadge = document.getElementById('live');

// GET an API path; the parsed JSON, or an Error carrying the API's {error} text and the status.
export async function api(path) {
  const res = await fetch(path, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  if (!res.ok) {
    const e = new Error(`${path}: ${body && body.error ? body.error : `HTTP ${res.status}`}`);
    e.status = res.status;
    throw e;
  }
  return body;
}

export function showError(message) {
  errorBox.textContent = message;
  errorBox.hidden = !message;
}

// The route of a hash: {name, i, id, query}.
function parseRoute(hash) {
  const raw = (hash || '').replace(/^#/, '') || '/';
  const [path, qs] = raw.split('?');
  const query = new URLSearchParams(qs || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return {name: 'campaigns', query};
  if (parts[0] === 'compare') return {name: 'compare', query};
  if (parts[0] === 'c' && /^\d+$/.test(parts[1] || '')) {
    const i = Number(parts[1]);
    const view = parts[2] || 'overview';
    if (view === 'trials' && parts[3] !== undefined) {
      return /^\d+$/.test(parts[3]) ? {name: 'trial', i, id: Number(parts[3]), query} : {name: 'unknown', path};
    }
    if (campaignViews[view] && parts.length <= 3) return {name: view, i, query};
  }
  return {name: 'unknown', path};
}

function renderNav(route) {
  const items = [h('a', {href: '#/', class: route.name === 'campaigns' ? 'active' : undefined}, 'Campaigns')];
  if (route.i !== undefined) {
    const name = campaignNames.get(route.i);
    items.push(h('span', {class: 'nav-campaign', title: 'campaign'}, name !== undefined ? name : `campaign ${route.i}`));
    // A campaign `hpctune simulate` recorded says so beside its name.
    const mark = campaignSimulated.get(route.i);
    if (mark) items.push(h('span', {id: 'simulated-badge', class: 'badge-simulated', title: mark}, 'simulated'));
    for (const [key, v] of Object.entries(campaignViews)) {
      const active = route.name === key || (key === 'trials' && route.name === 'trial');
      items.push(h('a', {href: `#/c/${route.i}${key === 'overview' ? '' : `/${key}`}`, class: active ? 'active' : undefined,
                         dataset: {view: key}}, v.title));
    }
  } else if (route.name === 'compare') {
    items.push(h('span', {class: 'nav-campaign'}, 'Compare'));
  }
  nav.replaceChildren(...items);
}

// The names of the served campaigns (nav), filled by the campaigns list and /api/changes.
const campaignNames = new Map();
const campaignSimulated = new Map();  // index -> the 'simulated' mark, or null for a real campaign
export function rememberCampaigns(list) {
  for (const c of list) {
    campaignNames.set(c.index, c.name);
    if (c.simulated !== undefined) campaignSimulated.set(c.index, c.simulated);
  }
}

// The views that draw no chart: they open without ECharts.
const CHARTLESS = new Set(['campaigns', 'overview', 'trials', 'unknown']);

let renderToken = 0;
let current = null;  // {route, versions seen at render}

// Draws the route's view. keep: a live re-render (keep the scroll and the charts' zoom).
async function render(keep = false) {
  const route = parseRoute(location.hash);
  const token = ++renderToken;
  const scroll = [window.scrollX, window.scrollY];
  if (keep) {
    saveZoom(main);
    main.style.minHeight = `${main.offsetHeight}px`;  // CSSOM, allowed by the CSP (no inline style)
  } else {
    forgetZoom();
  }
  const old = main.querySelector('section.view');
  if (old) delete old.dataset.ready;
  current = {route, version: versions.get(route.i)};
  renderNav(route);
  // Opened straight on a campaign's page: learn the names for the nav bar (not waited for).
  if (route.i !== undefined && !campaignNames.has(route.i)) {
    api('/api/campaigns').then((d) => {
      rememberCampaigns(d.campaigns || []);
      if (token === renderToken) renderNav(route);
    }).catch(() => {});
  }
  const ctx = {
    route, i: route.i, id: route.id, query: route.query, api, keep,
    rerender: () => render(true),
    stale: () => token !== renderToken,
    // Puts the view's section in place of the old one (charts are drawn after: they need a size).
    mount: (sec) => {
      if (token !== renderToken) return false;
      disposeAll();
      main.replaceChildren(sec);
      return true;
    },
  };
  try {
    let sec;
    if (!CHARTLESS.has(route.name)) await loadCharts();
    if (route.name === 'campaigns') sec = await campaigns(ctx);
    else if (route.name === 'compare') sec = await compare(ctx);
    else if (route.name === 'trial') sec = await trial(ctx);
    else if (campaignViews[route.name]) sec = await campaignViews[route.name].render(ctx);
    else {
      sec = h('section', {id: 'view-notfound', class: 'view'}, h('h1', {}, 'Not found'),
              h('p', {}, 'No view at ', h('code', {}, location.hash), '. ', h('a', {href: '#/'}, 'All campaigns')));
      ctx.mount(sec);
    }
    if (token !== renderToken) return;
    if (sec) sec.dataset.ready = '1';
    if (!keep) showError('');
    else showError('');
  } catch (e) {
    if (token !== renderToken) return;
    showError(e.message || String(e));
    if (!main.querySelector('section.view')) main.replaceChildren(h('section', {id: 'view-error', class: 'view'}));
  } finally {
    if (token === renderToken) {
      if (keep) window.scrollTo(scroll[0], scroll[1]);
      else window.scrollTo(0, 0);
      main.style.minHeight = '';
      updateBadge();
    }
  }
}

// Live updates: the server's change counter, and each campaign's own.
const versions = new Map();
const states = new Map();
let since = 0;
let lastUpdate = null;
let changesAvailable = true;

function updateBadge() {
  const i = current && current.route.i;
  const state = i !== undefined ? states.get(i) : [...states.values()].includes('running') ? 'running' : undefined;
  const time = lastUpdate ? lastUpdate.toLocaleTimeString() : '';
  if (!changesAvailable) {
    liveBadge.textContent = '';
    liveBadge.className = 'live-off';
    return;
  }
  if (state === 'running') {
    liveBadge.textContent = `live · ${time}`;
    liveBadge.className = 'live-on';
  } else {
    liveBadge.textContent = state ? `${state} · ${time}` : time;
    liveBadge.className = 'live-off';
  }
  liveBadge.title = 'updated from /api/changes every 2 s';
}

async function poll() {
  try {
    const ch = await api(`/api/changes?since=${since}`);
    changesAvailable = true;
    since = ch.version;
    let moved = false;
    const i = current && current.route.i;
    for (const c of ch.campaigns || []) {
      const before = versions.get(c.index);
      if (before !== undefined && before !== c.version && (i === undefined || i === c.index)) moved = true;
      versions.set(c.index, c.version);
      states.set(c.index, c.state);
    }
    lastUpdate = new Date();
    updateBadge();
    // A view drawn before its campaign's version was known is drawn again when that differs.
    if (current && i !== undefined && current.version !== undefined && current.version !== versions.get(i)) moved = true;
    if (moved && !document.hidden && !interacting()) await render(true);
  } catch (e) {
    if (e.status === 404) changesAvailable = false;
    updateBadge();
  }
}

// Not while the user types in a filter or holds a select open: the re-render would take the focus.
function interacting() {
  const a = document.activeElement;
  return a && (a.tagName === 'INPUT' || a.tagName === 'SELECT') && a.type !== 'checkbox';
}

async function pollLoop() {
  await poll();
  setTimeout(pollLoop, POLL_MS);
}

window.addEventListener('hashchange', () => render(false));
// Errors nobody caught still reach the page as text.
window.addEventListener('unhandledrejection', (e) => showError(String(e.reason && e.reason.message ? e.reason.message : e.reason)));
render(false);
pollLoop();
