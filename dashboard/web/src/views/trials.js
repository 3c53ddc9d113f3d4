// #/c/i/trials — the trial table, paged, sorted and filtered on the server (q: a substring of the
// parameters, the error text or "#id"; state; stage), with stage, parameters (the searched values),
// the trial each started from, metrics, state, attempts and duration, and the server's CSV of every
// matching row.
import {h, fmt, figure, section, note, table, trialLink, stateBadge, duration} from '../dom.js';

const STATES = ['queued', 'assigned', 'running', 'done', 'failed', 'pruned', 'paused', 'interrupted'];
const PAGE = 50;
const views = new Map();  // per campaign: {offset, sort, order, q, state}

function query(v, extra = {}) {
  const p = new URLSearchParams();
  if (v.sort) p.set('sort', v.sort);
  if (v.order) p.set('order', v.order);
  if (v.q) p.set('q', v.q);
  if (v.state) p.set('state', v.state);
  if (v.stage) p.set('stage', v.stage);
  for (const [k, x] of Object.entries(extra)) p.set(k, String(x));
  return p.toString();
}

// The trial a trial started from: the source trial hpctune gave it, else its parent; null for none.
function from(t) {
  const source = t.lineage && t.lineage.source_trial;
  if (source !== undefined && source !== null) return source;
  return t.parent_trial ?? null;
}

export default async function trials(ctx) {
  if (!views.has(ctx.i)) views.set(ctx.i, {offset: 0, sort: 'trial', order: 'asc', q: '', state: '', stage: ''});
  const v = views.get(ctx.i);
  // A link with ?stage=NAME chooses the stage; the filter below changes it.
  const linked = ctx.query.get('stage');
  if (linked && linked !== v.linked) { v.stage = linked; v.offset = 0; }
  v.linked = linked;
  const d = await ctx.api(`/api/campaigns/${ctx.i}/trials?${query(v, {offset: v.offset, limit: PAGE})}`);
  const rows = d.trials || [];
  const paramNames = [...new Set(rows.flatMap((t) => Object.keys(t.params || {})))].sort();
  const metricNames = [...new Set(rows.flatMap((t) => Object.keys(t.metrics || {})))].sort();
  const columns = [
    {label: 'trial', sort: 'trial', cell: (t) => trialLink(ctx.i, t.trial), csv: (t) => String(t.trial)},
    {label: 'state', sort: 'state', cell: (t) => stateBadge(t.state), csv: (t) => t.state},
    {label: 'stage', cell: (t) => t.stage ?? ''},
    ...(rows.some((t) => from(t) !== null)
      ? [{label: 'from', title: 'the trial it started from (a transfer\'s source, a retrained member\'s original)',
          cell: (t) => (from(t) === null ? '' : trialLink(ctx.i, from(t), {dataset: {trialLink: String(from(t))}})), csv: (t) => String(from(t) ?? '')}]
      : []),
    {label: 'gen', cell: (t) => (t.generation === undefined ? '' : String(t.generation))},
    {label: 'attempt', sort: 'attempt', cell: (t) => String(t.attempt ?? '')},
    {label: 'group', cell: (t) => (t.group === undefined || t.group === null || t.group < 0 ? '' : String(t.group))},
    {label: 'seconds', sort: 'seconds', cell: (t) => duration(t.seconds), csv: (t) => fmt(t.seconds)},
    {label: 'objective', sort: 'objective', cell: (t) => fmt(t.objective), class: 'num'},
    ...paramNames.map((n) => ({label: n, sort: `params.${n}`, class: 'num',
                               cell: (t) => (t.params && n in t.params ? (typeof t.params[n] === 'number' ? fmt(t.params[n]) : String(t.params[n])) : '')})),
    ...metricNames.map((n) => ({label: n, sort: `metrics.${n}`, class: 'num metric',
                                cell: (t) => (t.metrics && n in t.metrics ? fmt(t.metrics[n]) : '')})),
    {label: 'error', cell: (t) => (t.error ? t.error.split('\n')[0].slice(0, 120) : ''), csv: (t) => t.error ?? '', class: 'wrap err'},
  ];
  const filter = h('input', {id: 'trials-filter', type: 'search', placeholder: 'filter: parameter text, error, #id', value: v.q});
  const stateSel = h('select', {id: 'trials-state', title: 'state'}, h('option', {value: ''}, 'any state'),
                     STATES.map((s) => h('option', {value: s}, s)));
  stateSel.value = v.state;
  const stageNames = d.stages || [];
  const stageSel = stageNames.length > 1
    ? h('select', {id: 'trials-stage', title: 'stage'}, h('option', {value: ''}, 'any stage'),
        stageNames.map((s) => h('option', {value: s}, s)))
    : null;
  if (stageSel) stageSel.value = v.stage;
  const prev = h('button', {id: 'trials-prev', type: 'button', disabled: v.offset <= 0}, '‹ prev');
  const next = h('button', {id: 'trials-next', type: 'button', disabled: v.offset + rows.length >= d.total}, 'next ›');
  const csv = h('a', {id: 'trials-csv', href: `/api/campaigns/${ctx.i}/trials?${query(v, {format: 'csv'})}`, download: '',
                      class: 'button'}, 'CSV of all matching');
  const t = table('trials-table', columns, rows, {rowData: (r) => ({trial: String(r.trial)}), filename: `trials-page.csv`});
  const sec = section('trials', 'Trials',
    h('div', {class: 'toolbar'}, filter, stateSel, stageSel, prev,
      h('span', {}, rows.length ? `${v.offset + 1}–${v.offset + rows.length}` : '0', ' of ', figure('trials-total', d.total)), next, csv),
    rows.length ? null : note('No trial matches.'),
    t);
  ctx.mount(sec);
  // Sorting: click a header; again to reverse.
  for (const th of sec.querySelectorAll('th[data-sort]')) {
    if (th.dataset.sort === v.sort) th.classList.add(v.order === 'desc' ? 'sorted-desc' : 'sorted-asc');
    th.addEventListener('click', () => {
      if (v.sort === th.dataset.sort) v.order = v.order === 'asc' ? 'desc' : 'asc';
      else { v.sort = th.dataset.sort; v.order = 'asc'; }
      v.offset = 0;
      ctx.rerender();
    });
  }
  let timer = null;
  filter.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      v.q = filter.value;
      v.offset = 0;
      await ctx.rerender();
      const again = document.getElementById('trials-filter');
      if (again) { again.focus(); again.setSelectionRange(again.value.length, again.value.length); }
    }, 300);
  });
  stateSel.addEventListener('change', () => { v.state = stateSel.value; v.offset = 0; ctx.rerender(); });
  if (stageSel) stageSel.addEventListener('change', () => { v.stage = stageSel.value; v.offset = 0; ctx.rerender(); });
  prev.addEventListener('click', () => { v.offset = Math.max(0, v.offset - PAGE); ctx.rerender(); });
  next.addEventListener('click', () => { v.offset += PAGE; ctx.rerender(); });
  return sec;
}
