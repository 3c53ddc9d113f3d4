// #/c/i — a campaign at a glance: counts by state, the progress bar against the budget, the best
// trial (its parameters and metrics as tables, as the trial view shows them), elapsed and ETA, and
// the stages with their state.
import {h, fmt, duration, figure, stat, table, section, stateBadge, when, note} from '../dom.js';
import {valuesTable, metricsTable} from './trial.js';

export function stagesTable(i, stages) {
  const columns = [
    {label: 'id', cell: (s) => String(s.id ?? '')},
    {label: 'name', cell: (s) => s.name ?? ''},
    {label: 'kind', cell: (s) => s.kind ?? ''},
    {label: 'state', cell: (s) => stateBadge(s.state ?? '—'), csv: (s) => s.state ?? ''},
    {label: 'trials', cell: (s) => Object.entries(s.trials || {}).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(' · ') || '—'},
    {label: 'started', cell: (s) => when(s.started_at)},
    {label: 'finished', cell: (s) => when(s.finished_at)},
    {label: 'summary', cell: (s) => (s.summary === undefined || s.summary === null ? '' : typeof s.summary === 'string' ? s.summary : JSON.stringify(s.summary)),
     class: 'wrap'},
  ];
  return table('stages-table', columns, stages || [], {rowData: (s) => ({stage: String(s.name ?? s.id)})});
}

export default async function overview(ctx) {
  const o = await ctx.api(`/api/campaigns/${ctx.i}/overview`);
  const by = (o.trials && o.trials.by_state) || {};
  const budget = o.budget || {};
  const progress = h('progress', {id: 'budget', max: 1, value: budget.fraction ?? 0,
                                  title: budget.fraction === null || budget.fraction === undefined ? 'no trial budget' : `${fmt(budget.fraction * 100)} %`});
  if (budget.fraction === null || budget.fraction === undefined) progress.removeAttribute('value');  // indeterminate
  const best = o.best;
  const counts = Object.keys(by).map((s) => stat(s, figure(`count-${s}`, by[s])));
  const sec = section('overview', o.name ?? 'Campaign',
    h('div', {class: 'stats'},
      stat('name', figure('name', null, o.name ?? '')),
      stat('state', h('span', {class: `state state-${o.state}`, dataset: {figure: 'state'}}, o.state ?? '')),
      ...(o.simulated ? [stat('simulated', h('span', {dataset: {figure: 'simulated'}}, o.simulated))] : []),
      stat('algorithm', o.algorithm ?? '—'),
      stat('objective', (o.objectives || []).map((x) => `${x.metric} (${x.mode})`).join(', ') || '—'),
      stat('trials', figure('trials-total', o.trials ? o.trials.total : null)),
      stat('elapsed', figure('elapsed', o.elapsed_s, duration(o.elapsed_s))),
      stat('ETA', figure('eta', o.eta_s, duration(o.eta_s))),
      stat('created', when(o.created_at)),
    ),
    // The store says running but the master is gone (killed): the state as `hpctune status` says it.
    ...(o.master && o.master.resume ? [h('p', {class: 'note', dataset: {figure: 'master-gone'}}, o.state_text ?? '')] : []),
    // The master's recorded warnings, as `hpctune status` lists them (text only: never HTML).
    ...(o.warnings || []).map((w) => h('p', {class: 'note', dataset: {figure: 'warning'}}, `warning: ${w}`)),
    h('h2', {}, 'Progress'),
    h('div', {class: 'progress-row'}, progress,
      h('span', {}, `${budget.finished ?? 0} finished of `, budget.max_trials === null || budget.max_trials === undefined ? 'no budget' : String(budget.max_trials),
        ' · fraction ', figure('budget-fraction', budget.fraction ?? null))),
    h('h2', {}, 'Trials by state'),
    h('div', {class: 'stats'}, counts.length ? counts : note('No trials yet.')),
    h('h2', {}, 'Best so far'),
    best ? [h('div', {class: 'stats'},
              stat('objective', figure('best-objective', best.objective)),
              stat('trial', h('a', {href: `#/c/${ctx.i}/trials/${best.trial}`, dataset: {trialLink: String(best.trial)}}, '#', figure('best-trial', best.trial)))),
            // As the trial view shows them: the searched values, its run settings and lineage, its metrics.
            h('div', {class: 'two'},
              h('div', {}, h('h3', {}, 'Parameters'), valuesTable('best-params', 'parameter', best.params),
                Object.keys(best.run_settings || {}).length ? [h('h3', {}, 'Run settings'), valuesTable('best-run-settings', 'setting', best.run_settings)] : null,
                Object.keys(best.lineage || {}).length ? [h('h3', {}, 'Started from'), valuesTable('best-lineage', 'lineage', best.lineage)] : null),
              h('div', {}, h('h3', {}, 'Metrics'), metricsTable('best-metrics', best.metrics)))]
         : h('p', {}, 'No finished trial yet. ', figure('best-objective', null), ' ', figure('best-trial', null)),
    h('h2', {}, 'Stages'),
    stagesTable(ctx.i, o.stages),
  );
  ctx.mount(sec);
  return sec;
}
