// #/c/i/trials/ID — one trial: its figures, reports curve, parameters (the searched values), run
// settings and lineage (links, and the source trial and checkpoint hpctune gave it), metrics,
// attempts, error text, log tails, artifacts (checkpoints among them) and events.
import {h, fmt, figure, section, note, table, stateBadge, when, duration, stat} from '../dom.js';
import {chartDiv, draw, tip, zoomXY} from '../charts.js';

// An object's entries as a two-column table (name, value): the trial's parameters, metrics, lineage
// and run settings, and the overview's best trial.
const kv = (obj) => Object.entries(obj || {}).map(([k, v]) => ({k, v}));
const shown = (v) => (typeof v === 'number' ? fmt(v) : typeof v === 'string' ? v : JSON.stringify(v));
export function valuesTable(id, label, obj) {
  return table(id, [{label, cell: (r) => r.k}, {label: 'value', cell: (r) => shown(r.v), class: 'wrap'}], kv(obj));
}
export function metricsTable(id, obj) {
  return table(id, [{label: 'metric', cell: (r) => r.k}, {label: 'value', cell: (r) => fmt(r.v)}], kv(obj));
}
// What hpctune added to the trial's params (source_trial, source_checkpoint), without the links.
export function lineageValues(lineage) {
  const {parents, children, ...rest} = lineage || {};
  return rest;
}

function lineageLinks(i, list) {
  if (!list || !list.length) return '—';
  return list.map((x, k) => [k ? ', ' : '', h('a', {href: `#/c/${i}/trials/${x.trial}`, dataset: {trialLink: String(x.trial)}}, `#${x.trial}`),
                             x.relation ? h('span', {class: 'muted'}, ` (${x.relation})`) : null]);
}

export default async function trial(ctx) {
  const t = await ctx.api(`/api/campaigns/${ctx.i}/trials/${ctx.id}`);
  const attempts = t.attempts || [];
  // The trial's error, then each attempt's that says something else (the last attempt's is the trial's).
  const errors = [...new Set([t.error, ...attempts.map((a) => a.error)].filter((e) => e))];
  const byStep = t.metrics_by_step || [];
  const metricNames = [...new Set(byStep.flatMap((r) => Object.keys(r.metrics || {})))];
  const lineage = t.lineage || {parents: t.parent_trial ? [{trial: t.parent_trial, relation: 'parent'}] : [], children: []};
  const chartEl = chartDiv('trial-curve');
  const sources = lineageValues(t.lineage);
  const settings = t.run_settings || {};
  const sec = section('trial', `Trial #${t.trial}`,
    h('div', {class: 'stats'},
      stat('trial', figure('trial', t.trial)),
      stat('state', h('span', {class: `state state-${t.state}`, dataset: {figure: 'state'}}, t.state ?? '')),
      stat('objective', figure('objective', t.objective ?? null)),
      stat('attempts', figure('attempts', attempts.length)),
      stat('stage', t.stage ?? '—'),
      stat('generation', t.generation === undefined ? '—' : String(t.generation)),
      stat('group', t.group === undefined || t.group === null ? '—' : String(t.group)),
      ...(t.sync_mode ? [stat('sync mode', figure('sync-mode', t.sync_mode, t.sync_mode))] : []),
      stat('duration', duration(t.seconds)),
      stat('started', when(t.started_at)),
      stat('finished', when(t.finished_at))),
    h('h2', {}, 'Lineage'),
    h('p', {class: 'lineage'}, 'parents: ', lineageLinks(ctx.i, lineage.parents), h('br'), 'children: ', lineageLinks(ctx.i, lineage.children)),
    Object.keys(sources).length ? valuesTable('trial-lineage', 'started from', sources) : null,
    h('h2', {}, 'Reports'),
    byStep.length ? chartEl : note('No intermediate reports.'),
    h('div', {class: 'two'},
      h('div', {}, h('h2', {}, 'Parameters'), valuesTable('trial-params', 'parameter', t.params),
        Object.keys(settings).length ? [h('h2', {}, 'Run settings'), valuesTable('trial-run-settings', 'setting', settings)] : null),
      h('div', {}, h('h2', {}, 'Metrics'), metricsTable('trial-metrics', t.metrics))),
    h('h2', {}, 'Error'),
    errors.length ? h('pre', {id: 'trial-error', class: 'error-text'}, errors.join('\n\n')) : h('pre', {id: 'trial-error', class: 'empty'}, ''),
    h('h2', {}, 'Attempts'),
    table('trial-attempts', [
      {label: 'attempt', cell: (a) => String(a.attempt)},
      {label: 'state', cell: (a) => stateBadge(a.state), csv: (a) => a.state},
      {label: 'group', cell: (a) => String(a.group_id ?? '')},
      {label: 'GPUs', cell: (a) => a.devices || '-'},
      {label: 'started', cell: (a) => when(a.started_at)},
      {label: 'finished', cell: (a) => when(a.finished_at)},
      {label: 'charged', cell: (a) => (a.charged ? 'yes' : 'no')},
      {label: 'error', cell: (a) => a.error ?? '', class: 'wrap err'},
    ], attempts),
    h('h2', {}, 'Logs'),
    (t.logs || []).length ? (t.logs || []).map((l) => h('div', {class: 'log'}, h('div', {class: 'log-path'}, l.path),
                                                        h('pre', {class: 'log-tail'}, Array.isArray(l.tail) ? l.tail.join('\n') : String(l.tail ?? ''))))
                          : note('No log files.'),
    h('h2', {}, 'Artifacts'),
    table('trial-artifacts', [
      {label: 'attempt', cell: (a) => String(a.attempt ?? '')},
      {label: 'kind', cell: (a) => a.kind ?? ''},
      {label: 'path', cell: (a) => a.path ?? '', class: 'wrap'},
      {label: 'bytes', cell: (a) => String(a.bytes ?? '')},
    ], t.artifacts || []),
    h('h2', {}, 'Events'),
    table('trial-events', [
      {label: 'time', cell: (e) => when(e.t ?? e.time)},
      {label: 'kind', cell: (e) => e.kind ?? e.type ?? ''},
      {label: 'detail', cell: (e) => e.message ?? e.detail ?? JSON.stringify(e), class: 'wrap'},
    ], t.events || []));
  ctx.mount(sec);
  if (byStep.length) {
    draw(chartEl, {
      legend: {top: 4, left: 10, type: 'scroll', right: 60},
      grid: {left: 70, right: 30, top: 40, bottom: 70},
      tooltip: {trigger: 'axis', formatter: tip((ps) => [`step ${ps[0].value[0]}`, ...ps.map((p) => `${p.seriesName}: ${fmt(p.value[1])}`)].join('\n'))},
      xAxis: {type: 'value', name: 'step', nameLocation: 'middle', nameGap: 28, scale: true},
      yAxis: {type: 'value', scale: true},
      dataZoom: zoomXY,
      series: metricNames.map((m) => ({name: m, type: 'line', showSymbol: byStep.length < 60,
                                       data: byStep.filter((r) => r.metrics && m in r.metrics).map((r) => [r.step, r.metrics[m]])})),
    });
  }
  return sec;
}
